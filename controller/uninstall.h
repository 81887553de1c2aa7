/* controller/uninstall.h - `ctrain-controller --release-finalizers`: the
 * one-shot that uninstall runs (docs/operations.md "Uninstall").
 *
 * Every pod the controller creates carries PODBUILD_FINALIZER, which only
 * the controller removes (reconcile.h). With the controller gone, a deleted
 * job's pods, and any namespace that holds one, stay Terminating for good.
 * This mode removes that finalizer, and nothing else, from every pod in the
 * controller's scope (all namespaces, or --namespace) that carries it,
 * running or going, and exits. */
#ifndef CTRAIN_CTL_UNINSTALL_H
#define CTRAIN_CTL_UNINSTALL_H

#include <stdio.h>

#include "controller/options.h"
#include "ctrain/err.h"

/* Page size of the pod list. */
#define CTL_UNINSTALL_PAGE 500
/* Tries per pod when its patch's test fails (the pod changed in between). */
#define CTL_UNINSTALL_TRIES 5
/* Failed pods named in the summary; the rest are counted. */
#define CTL_UNINSTALL_NAMED 20

/* Lists the pods labelled PODBUILD_LABEL_JOB in the scope of `o` (borrowed:
 * kubeconfig, context, namespace_, qps, burst), page by page, and removes
 * PODBUILD_FINALIZER from each that carries it by the controller's own
 * patch (ctl_exec_remove_finalizer: it tests the pod's uid and the
 * finalizer at its index; a failed test is read and retried). Other pods
 * and other finalizers are never written. Writes one summary to `out`:
 * the pods released in how many namespaces, or the pods that failed, by
 * name, with the apiserver's words. CTRAIN_OK when every pod that carried
 * the finalizer lost it; else the first failure (a list that failed, or a
 * pod's). */
CTRAIN_NODISCARD ctrain_err ctl_release_finalizers(const ctl_options *o, FILE *out);

#endif
