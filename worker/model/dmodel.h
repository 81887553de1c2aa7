/* worker/model/dmodel.h - a model_t's training step on a compute backend
 * (kernels.h): the one model path. train.c and evaluate.c drive it on the CPU
 * reference backend or on CUDA; the math is written once, here, as ops.
 *
 * The layer list, offsets and optimizer hyper-parameters stay in the host
 * model_t/optim_t (borrowed, they must outlive the dmodel); the dmodel holds
 * the backend copies: parameters, gradients and optimizer state each in ONE
 * backend allocation (one all-reduce covers every gradient), activations, and
 * KERN_SLOTS pinned staging buffers so the copy of the next batch overlaps the
 * compute of this one. Gradients are checked against finite differences
 * (test_model.c), the CUDA backend against the CPU one (test_kernels.c).
 *
 * Several replicas per worker (train.c): one dmodel (and one kern_t) per
 * replica, all built from the same model_t; their gradients are summed
 * locally, all-reduced across workers, written back with
 * dmodel_grads_from_host, and every replica applies the same update. */
#ifndef CTRAIN_DMODEL_H
#define CTRAIN_DMODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "ctrain/rng.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"

typedef struct dmodel dmodel_t;

/* Allocates everything for batches of up to `cap` on k (borrowed). Params,
 * grads and state start as zeros: dmodel_push the host values. */
CTRAIN_NODISCARD ctrain_err dmodel_create(kern_t *k, const model_t *m, const optim_t *opt, int cap,
                                          dmodel_t **out, char *errbuf, size_t errlen);
/* Accepts NULL. */
void dmodel_free(dmodel_t *d);

/* Host -> backend: m->params and (opt not NULL) opt->state. */
CTRAIN_NODISCARD ctrain_err dmodel_push(dmodel_t *d, const model_t *m, const optim_t *opt);
/* Backend -> host: m->params and (opt not NULL) opt->state. Waits. */
CTRAIN_NODISCARD ctrain_err dmodel_pull(dmodel_t *d, model_t *m, optim_t *opt);

/* Stages x (B, input_dim) and labels (B) (host memory, borrowed for the
 * call), drawing the dropout masks from rng when training (on the host, so
 * every backend applies the same masks), then runs forward and the loss and, when `backward`,
 * the backward pass: grads = d(scale * summed loss)/d(params). Returns before
 * the backend finishes; dmodel_stats waits. */
CTRAIN_NODISCARD ctrain_err dmodel_step(dmodel_t *d, const float *x, const int32_t *labels, int B,
                                        int training, rng_t *rng, float scale, int backward);
/* The last step's summed loss and correct count (the sum over the batch). Waits. */
CTRAIN_NODISCARD ctrain_err dmodel_stats(dmodel_t *d, double *loss, long *correct);

/* Backend -> host copy of the gradients. */
CTRAIN_NODISCARD ctrain_err dmodel_grads_to_host(dmodel_t *d, float *host);

/* Host -> backend copy of the gradients (n_params floats, borrowed). */
CTRAIN_NODISCARD ctrain_err dmodel_grads_from_host(dmodel_t *d, const float *host);

/* optim_update on the backend's parameters, gradients and state: counts
 * opt->iterations. */
CTRAIN_NODISCARD ctrain_err dmodel_update(dmodel_t *d, optim_t *opt, float lr);

/* optim_update with `grads` (n_params floats of the backend's memory,
 * borrowed) in place of the model's own: a host-memory replica applies the
 * reduced gradients where they lie, with no copy. */
CTRAIN_NODISCARD ctrain_err dmodel_update_with(dmodel_t *d, optim_t *opt, float lr,
                                               const float *grads);

/* The gradients' buffer when the backend's memory is host memory (the CPU
 * backend), read after dmodel_step returned; NULL on a device backend. */
float *dmodel_host_grads(dmodel_t *d);

/* Host-memory backends only (else CTRAIN_E_UNSUPPORTED): the backward pass
 * writes the gradients to `grads` (n_params floats, borrowed, must outlive d
 * or the next call) and dmodel_update reads them there; NULL: back to d's own
 * buffer. Replica 0 of a CPU replica set writes into the buffer that is
 * all-reduced, which saves a copy out and a copy back per step. */
CTRAIN_NODISCARD ctrain_err dmodel_use_grads(dmodel_t *d, float *grads);

/* Sums n floats (host memory, in place) over every replica of every
 * worker: synchronized batch normalization (the per-replica sums of each
 * BatchNormalization layer's batch statistics, in forward, and of its
 * gradient terms, in backward). Every replica calls it in the same order,
 * the same number of times per step. On failure: its code, and why in
 * errbuf (dmodel_errmsg then names the layer and says it). */
typedef ctrain_err (*dmodel_sum_fn)(void *ctx, float *v, size_t n, char *errbuf, size_t errlen);

/* Installs fn (ctx borrowed); NULL: the statistics are this replica's alone,
 * which is exact for one replica in all. */
void dmodel_set_bn_sync(dmodel_t *d, dmodel_sum_fn fn, void *ctx);

/* Called in the backward pass of a host-memory backend each time the
 * gradients from `lo` to the end are final: after each layer with
 * parameters, from the top down (the parameters lie in layer order, so lo
 * falls). Returns nonzero to fail the step (its code; errbuf says why).
 * What lets the all-reduce of the top layers' gradients start while the
 * lower ones are still computed (coll_queue.h). */
typedef ctrain_err (*dmodel_ready_fn)(void *ctx, size_t lo, char *errbuf, size_t errlen);

/* Installs fn (ctx borrowed); NULL: none. Host-memory backends only (else
 * CTRAIN_E_UNSUPPORTED): on a device a finished op is not a finished
 * gradient. */
CTRAIN_NODISCARD ctrain_err dmodel_set_grads_ready(dmodel_t *d, dmodel_ready_fn fn, void *ctx);

/* The backend's message for the last failure (borrowed). */
const char *dmodel_errmsg(const dmodel_t *d);

#endif
