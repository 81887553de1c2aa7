/* worker/model/dmodel_internal.h - the dmodel's state, shared by dmodel.c
 * (the step, the MLP layers) and dmodel_cnn.c (Conv2D, pooling, batch
 * normalization). Not for other modules: they use dmodel.h. */
#ifndef CTRAIN_DMODEL_INTERNAL_H
#define CTRAIN_DMODEL_INTERNAL_H

#include "worker/model/dmodel.h"

struct dmodel {
  kern_t *k;
  const model_t *m;
  int cap;
  size_t n_params;
  int n_slots;              /* optimizer slots */
  float *params;            /* (n_params) backend */
  float *grads;             /* (n_params) backend: own_grads, or the caller's (dmodel_use_grads) */
  float *own_grads;         /* (n_params) backend, owned */
  float *state;             /* (n_slots, n_params) backend, NULL when no slots */
  float *acts;              /* backend: every layer's y, (cap, out) each, in layer order */
  float **y;                /* (n_layers) host array of backend pointers into acts */
  const float **out;        /* (n_layers) this step's output of each layer: y[i], or (Flatten,
                               Dropout off) its input, which it passes on without a copy */
  float **mask;             /* (n_layers) backend pointers into the staged block, or NULL */
  float *d0, *d1;           /* (cap, max features) backend scratch */
  float *probs;             /* (cap, n_classes) backend */
  double *stats;            /* (2) backend: loss sum, correct */
  size_t stage_bytes;       /* x | labels | masks */
  void *host[KERN_SLOTS];   /* pinned staging buffers */
  void *staged[KERN_SLOTS]; /* backend copies */
  int slot;                 /* the slot of the last step */
  size_t mask_floats;       /* per sample, over every Dropout layer */
  int first_param;          /* the first layer with parameters: nothing below it needs a
                               gradient, so the backward pass stops there */
  float *col;               /* (col_floats) backend: Conv2D patches of a chunk of the batch */
  size_t col_floats;
  float **col_kept;          /* (n_layers) backend or NULL: a Conv2D layer's patches of the whole
                                batch, kept from its forward for its backward (dW needs the same
                                patches) when the batch is one chunk and DMODEL_COL_KEPT allows */
  const float **col_kept_in; /* (n_layers) the input those patches are of, NULL when none */
  int *col_kept_b;           /* (n_layers) and its batch size */
  size_t dx_block;           /* on the CPU, floats of a Conv2D's patch gradient turned into its
                                dx at a time, per OpenBLAS thread (DMODEL_DX_BLOCK; tests set
                                it smaller) */
  dmodel_ready_fn ready;     /* dmodel_set_grads_ready's, or NULL */
  void *ready_ctx;
  int unfused;    /* 1: ops the backend fuses run apart: BatchNormalization then
                     pooling (bn_pool_*), a Conv2D's ReLU and bias gradients
                     (relu_bias_grad); tests compare the two */
  int conv_gemm;  /* 1: Conv2D layers take im2col + gemm even where the backend
                     runs them directly (conv_direct; tests compare the two) */
  float *bn;      /* backend: per BatchNormalization layer mean | inv (c each) at
                     bn_off[i], then a (2 * max c) scratch at bn_scratch */
  size_t *bn_off; /* (n_layers) */
  size_t bn_scratch;
  float *bn_host;        /* (5 * max c + 2) host staging of the statistics */
  int training;          /* the last forward's mode: batch or moving statistics */
  float *bn_n;           /* (n_layers) host: the rows (all replicas) of the last step */
  dmodel_sum_fn bn_sync; /* sums the statistics over every replica; NULL: this one alone */
  void *bn_sync_ctx;
};

#define OP(call)                                                                                   \
  do {                                                                                             \
    result = (call);                                                                               \
    if (result)                                                                                    \
      goto out;                                                                                    \
  } while (0)

/* Conv2D patches are built for chunks of the batch so that the patch buffer
 * stays under this many floats (at least one sample a chunk). */
#define DMODEL_COL_FLOATS ((size_t)1 << 22)
/* At most this many floats of patches kept from the forwards for the
 * backwards, over every Conv2D layer (the first layers that fit keep
 * theirs; the others build them again). */
#define DMODEL_COL_KEPT ((size_t)1 << 24)
/* Floats of a Conv2D's patch gradient turned into dx at a time on the CPU,
 * per OpenBLAS thread (1 MiB: within a core's L2), so that it is read back
 * from cache rather than memory. */
#define DMODEL_DX_BLOCK ((size_t)1 << 18)

/* Sizes the CNN buffers (col, bn, bn_host, bn_off) for batches of cap:
 * CTRAIN_E_UNSUPPORTED naming the layer when the backend lacks its ops. */
CTRAIN_NODISCARD ctrain_err dmodel_cnn_alloc(dmodel_t *d, int cap);
void dmodel_cnn_free(dmodel_t *d);

/* Layer i's forward: y = f(in) for B samples (training: batch statistics,
 * synchronized, and the moving statistics updated). */
CTRAIN_NODISCARD ctrain_err dmodel_cnn_fwd(dmodel_t *d, int i, const float *in, float *y, int B,
                                           int training);
/* Layer i's backward: g (B, out) is d(loss)/d(y) (an activation's factor
 * not yet applied); writes the parameters' gradients and, when dx is not
 * NULL, d(loss)/d(in) into dx. g may be overwritten. */
CTRAIN_NODISCARD ctrain_err dmodel_cnn_bwd(dmodel_t *d, int i, const float *in, float *g, float *dx,
                                           int B);

#endif
