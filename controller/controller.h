/* controller/controller.h - ctrain-controller's control loop: informers on the
 * jobs of each kind served (controller/jobkind.h: TrainingJobs, TFJobs) and
 * the pods and Services they own, a work queue with N workers, the pure
 * reconcile (reconcile.h) and the executor that performs its actions
 * (executor.h), leader election, metrics (metrics.h) and health (http.h). */
#ifndef CTRAIN_CTL_CONTROLLER_H
#define CTRAIN_CTL_CONTROLLER_H

#include "controller/options.h"
#include "ctrain/err.h"

/* Runs until ctl_request_stop() (SIGTERM/SIGINT in main) or lost
 * leadership. Returns CTRAIN_OK on a clean stop; an error (logged) when
 * startup failed or leadership was lost. `o` borrowed. */
CTRAIN_NODISCARD ctrain_err ctl_run(const ctl_options *o);

/* Async-signal-safe: asks ctl_run to stop. */
void ctl_request_stop(void);

#endif
