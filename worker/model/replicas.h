/* worker/model/replicas.h - the R local replicas of one worker.
 *
 * Each replica is one dmodel on its own backend: a GPU (kern_cuda on device
 * r) or a logical CPU replica (the CPU reference backend), as TensorFlow
 * splits a CPU into logical devices to test MirroredStrategy, so the whole
 * multi-replica path runs on CPU. All start from the same weights and apply
 * the same update, so they stay bitwise equal (test_replicas.c).
 *
 * A step: replicas_step on every replica (each its own batch slice and
 * dropout stream); replicas_reduce sums their gradients into `sum` (replica
 * order, on the host), where the train loop all-reduces it across workers;
 * replicas_apply writes the result back to every replica and runs the
 * optimizer there.
 *
 * GPU replicas step in turn on the calling thread. CPU replicas (up to 64)
 * step on threads of their own in replicas_step_all (a pool started with the
 * set, replica 0 on the caller's thread), each with one OpenBLAS thread
 * (kern_cpu_blas_one_thread), so that cpu:R uses R cores; replicas_reduce
 * sums a slice of the gradients on each of those threads and
 * replicas_apply runs every replica's update on its own; every
 * BatchNormalization layer sums its statistics over the replicas (in
 * replica order, so the result does not depend on which arrives first) and,
 * once replicas_sync_bn has given the hook, across workers, as
 * SyncBatchNormalization does under MirroredStrategy. The gradients are
 * summed in replica order after every replica has stepped: the same floats
 * as stepping them in turn. */
#ifndef CTRAIN_REPLICAS_H
#define CTRAIN_REPLICAS_H

#include <stddef.h>

#include "ctrain/err.h"
#include "ctrain/rng.h"
#include "worker/model/dmodel.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"

typedef struct {
  int n;   /* replicas */
  int gpu; /* 1: replica r runs on CUDA device r */
  size_t n_params;
  kern_t **k;    /* (n) backends, owned */
  dmodel_t **d;  /* (n) models, owned */
  rng_t *drop;   /* (n) dropout streams */
  float *sum;    /* (n_params + extra) host: the reduced gradients, then spare floats */
  float *tmp;    /* (n_params) host: one replica's gradients */
  double *loss;  /* (n) last step's summed loss per replica */
  long *correct; /* (n) last step's correct count per replica */
  size_t input_dim;
  struct replicas_bn *bn;     /* the statistics' meeting point (replicas_sync_bn); NULL: none */
  struct replicas_pool *pool; /* several CPU replicas: the threads they step on; NULL: none */
} replica_set;

/* Builds n replicas of m (borrowed, must outlive the set) for batches of up
 * to cap, with optimizer state for opt (NULL: evaluation only). `extra`
 * floats past the gradients in `sum` are the caller's (the train loop's
 * SIGTERM flag travels there). Errors name the device. *out is owned by the
 * caller (replicas_free). */
CTRAIN_NODISCARD ctrain_err replicas_create(const model_t *m, const optim_t *opt, int n, int gpu,
                                            int cap, size_t extra, replica_set **out, char *errbuf,
                                            size_t errlen);
/* Accepts NULL. */
void replicas_free(replica_set *rs);

/* Host -> every replica: m->params and (opt not NULL) opt->state. */
CTRAIN_NODISCARD ctrain_err replicas_push(replica_set *rs, const model_t *m, const optim_t *opt,
                                          char *errbuf, size_t errlen);
/* Replica 0 -> host (all are equal). */
CTRAIN_NODISCARD ctrain_err replicas_pull(replica_set *rs, model_t *m, optim_t *opt, char *errbuf,
                                          size_t errlen);

/* Forward (+ backward) of x (B, input_dim), y (B) on replica r, dropout from
 * rs->drop[r] when training; grads = d(scale * summed loss)/d(params). Loss
 * and correct land in rs->loss[r], rs->correct[r] once replicas_wait runs. */
CTRAIN_NODISCARD ctrain_err replicas_step(replica_set *rs, int r, const float *x, const int32_t *y,
                                          int B, int training, float scale, int backward,
                                          char *errbuf, size_t errlen);
/* Every replica's step: replica r on x + r*B*input_dim, y + r*B (x holds
 * n*B samples), on threads of their own when their batch statistics are
 * synchronized, else in turn. */
CTRAIN_NODISCARD ctrain_err replicas_step_all(replica_set *rs, const float *x, const int32_t *y,
                                              int B, int training, float scale, int backward,
                                              char *errbuf, size_t errlen);

/* Batch normalization statistics summed over every replica of this worker,
 * then by `across` (NULL: this worker alone) over the workers. One replica:
 * `across` alone. Several: CPU replicas only (CTRAIN_E_UNSUPPORTED on GPUs,
 * with errbuf); pins the CPU backend's GEMMs to one thread each. */
CTRAIN_NODISCARD ctrain_err replicas_sync_bn(replica_set *rs, dmodel_sum_fn across, void *ctx,
                                             char *errbuf, size_t errlen);

/* Waits for every replica's step and fills rs->loss, rs->correct. */
CTRAIN_NODISCARD ctrain_err replicas_wait(replica_set *rs, char *errbuf, size_t errlen);

/* rs->sum[0..n_params) = sum over replicas (in replica order) of their
 * gradients. */
CTRAIN_NODISCARD ctrain_err replicas_reduce(replica_set *rs, char *errbuf, size_t errlen);

/* Every replica: gradients = rs->sum, then one optimizer update at lr (opt
 * counts one iteration, not n). */
CTRAIN_NODISCARD ctrain_err replicas_apply(replica_set *rs, optim_t *opt, float lr, char *errbuf,
                                           size_t errlen);

#endif
