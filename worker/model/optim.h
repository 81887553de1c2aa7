/* worker/model/optim.h - SGD (momentum, Nesterov) and Adam, with Keras's update
 * rules and defaults (Adam: beta1 0.9, beta2 0.999, epsilon 1e-7).
 *
 * The optimizer state (velocity, or Adam's m and v) is ONE allocation of
 * n_slots * n_params floats, so a backup writes it in one piece. */
#ifndef CTRAIN_OPTIM_H
#define CTRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "worker/model/kernels.h"

typedef enum { OPTIM_SGD = 0, OPTIM_ADAM } optim_kind;

typedef struct {
  optim_kind kind;
  float momentum; /* SGD */
  int nesterov;   /* SGD */
  float beta1, beta2, epsilon;
  size_t n_params;
  int n_slots;         /* 0 (plain SGD), 1 (velocity) or 2 (Adam m, v) */
  float *state;        /* (n_slots, n_params), one allocation */
  uint64_t iterations; /* updates applied so far (Keras's `iterations`) */
} optim_t;

/* name: "sgd" or "adam" (else CTRAIN_E_CONFIG naming it). *out is owned by
 * the caller (optim_free). */
CTRAIN_NODISCARD ctrain_err optim_create(const char *name, size_t n_params, float momentum,
                                         int nesterov, optim_t **out, char *errbuf, size_t errlen);
void optim_free(optim_t *o);

/* One update at learning rate lr, issued on backend k: params, grads
 * (n_params) and state (n_slots, n_params; NULL when n_slots is 0) are k's
 * memory (kern_alloc; plain host memory on the CPU backend). Counts
 * o->iterations; o->state is not touched (it is the host copy for backups). */
CTRAIN_NODISCARD ctrain_err optim_update(optim_t *o, kern_t *k, float *params, const float *grads,
                                         float *state, float lr);

#endif
