/* worker/model/kernels.h - the compute backend the model's math runs on.
 *
 * A backend (kernels_cpu.c: the reference, plain loops and OpenBLAS's
 * cblas_sgemm, what CPU training runs; kernels_cuda.cu: CUDA kernels and
 * cuBLAS, tested against it) fills a kern_ops table. Callers (dmodel.c, tests, benches) use only
 * the table and never know which backend runs: every pointer a kernel takes is "device" memory of
 * that backend (plain host memory for the CPU one), obtained from kern_alloc, except where a field
 * says host.
 *
 * Work is issued in order on the backend's compute stream and may run
 * asynchronously: results are visible to the host after kern_d2h (which
 * waits) or kern_sync. An op returns CTRAIN_E_CUDA (or CTRAIN_E_NOMEM) with
 * the failing call named in kern_errmsg(); a failed backend stays failed.
 *
 * Matrices are row-major, as in model.h: C (M, N) = alpha op(A) op(B) + beta C
 * with op(A) (M, K), op(B) (K, N) and leading dimensions in elements. */
#ifndef CTRAIN_KERNELS_H
#define CTRAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "worker/model/model.h"

typedef struct kern kern_t;

/* A 2-D window over NHWC x (B, H, W, C) giving (B, OH, OW, .): a kh x kw
 * window at strides (sh, sw), x padded with pt rows above and pl columns to
 * the left (Keras 'same' padding; 0 for 'valid'), as many below and right as
 * the output needs. Used by im2col (Conv2D) and pooling. */
typedef struct {
  int B, H, W, C;
  int kh, kw, sh, sw, pt, pl;
  int OH, OW;
} kern_win;

#define KERN_SLOTS 2

typedef struct {
  const char *name; /* "cpu" or "cuda" */
  int is_device;    /* 1: memory is not host-addressable */

  ctrain_err (*alloc)(kern_t *k, void **p, size_t bytes);
  void (*free)(kern_t *k, void *p);
  /* Pinned (page-locked) host memory for staging; plain malloc on the CPU. */
  ctrain_err (*alloc_host)(kern_t *k, void **p, size_t bytes);
  void (*free_host)(kern_t *k, void *p);
  /* Ordered with the compute stream; h2d may return before the copy ends
   * only when src is pinned (alloc_host) memory. d2h waits. */
  ctrain_err (*h2d)(kern_t *k, void *dst, const void *src, size_t bytes);
  ctrain_err (*d2h)(kern_t *k, void *dst, const void *src, size_t bytes);
  ctrain_err (*memset0)(kern_t *k, void *dst, size_t bytes);
  /* Batch staging, double-buffered by `slot` (0..KERN_SLOTS-1), so the copy
   * of batch s+1 overlaps the compute of batch s:
   *   stage_wait(slot)  returns once the last copy out of slot's pinned host
   *                     buffer has finished (the host may refill it);
   *   stage(slot, ...)  copies `bytes` of pinned `src` to `dst` on the copy
   *                     stream, after the compute stream released slot; the
   *                     compute stream waits for the copy before its next op;
   *   release(slot)     marks the compute stream done with slot's dst.
   * On the CPU, stage is a memcpy and the others are no-ops. */
  ctrain_err (*stage_wait)(kern_t *k, int slot);
  ctrain_err (*stage)(kern_t *k, int slot, void *dst, const void *src, size_t bytes);
  ctrain_err (*release)(kern_t *k, int slot);
  ctrain_err (*sync)(kern_t *k);

  ctrain_err (*gemm)(kern_t *k, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc);
  /* y (rows, n): every row = b (n). */
  ctrain_err (*bias_fill)(kern_t *k, float *y, const float *b, int rows, int n);
  /* gb (n) = column sums of d (rows, n). */
  ctrain_err (*bias_grad)(kern_t *k, float *gb, const float *d, int rows, int n);
  /* y = f(y) in place; softmax and linear are no-ops (the loss applies softmax). */
  ctrain_err (*act_fwd)(kern_t *k, model_act a, float *y, size_t n);
  /* dy *= f'(.) expressed through the output y. */
  ctrain_err (*act_bwd)(kern_t *k, model_act a, const float *y, float *dy, size_t n);
  /* y = x * mask (dropout, mask already scaled by 1/keep); y may alias x. */
  ctrain_err (*mul)(kern_t *k, float *y, const float *x, const float *mask, size_t n);
  ctrain_err (*copy)(kern_t *k, float *dst, const float *src, size_t n);
  /* Sparse softmax cross-entropy of logits (rows, C) against labels (rows):
   * probs (rows, C) = softmax; stats[0] (double, device) = summed loss of the
   * rows whose label is in [0, C), stats[1] = number of correct argmaxes (as
   * a double). Overwrites stats. */
  ctrain_err (*softmax_ce)(kern_t *k, const float *logits, const int32_t *labels, int rows, int C,
                           float *probs, double *stats);
  /* d (rows, C) = scale * (probs - onehot(labels)). */
  ctrain_err (*ce_grad)(kern_t *k, const float *probs, const int32_t *labels, int rows, int C,
                        float scale, float *d);
  /* Keras SGD: plain (v NULL), momentum, Nesterov. */
  ctrain_err (*sgd)(kern_t *k, float *w, const float *g, float *v, size_t n, float lr, float mom,
                    int nesterov);
  /* Keras Adam with alpha = lr*sqrt(1-b2^t)/(1-b1^t) computed by the caller. */
  ctrain_err (*adam)(kern_t *k, float *w, const float *g, float *m, float *v, size_t n, float alpha,
                     float b1, float b2, float eps);
  void (*destroy)(kern_t *k);

  /* Convolution, pooling and batch normalization (the CNN layers). A backend
   * may leave them NULL; dmodel_create then refuses a model that needs them,
   * naming the backend and the layer. */
  /* col (B*OH*OW, kh*kw*C) = the patches of x, column order (kh, kw, C) so
   * that col times a HWIO kernel (kh*kw*C, filters) is the convolution;
   * padding reads as 0. */
  ctrain_err (*im2col)(kern_t *k, const kern_win *g, const float *x, float *col);
  /* dx (B, H, W, C) = the sum of col's entries back at their positions
   * (overwrites dx): im2col's adjoint. */
  ctrain_err (*col2im)(kern_t *k, const kern_win *g, const float *col, float *dx);
  /* y (B, OH, OW, C) = max (max != 0) or mean of each window's positions
   * inside x (padding excluded, as TensorFlow does). */
  ctrain_err (*pool_fwd)(kern_t *k, const kern_win *g, int max, const float *x, float *y);
  /* dx (B, H, W, C) (overwritten) from dy (B, OH, OW, C): max routes dy to
   * the window's first maximum of x; mean spreads it over the window. */
  ctrain_err (*pool_bwd)(kern_t *k, const kern_win *g, int max, const float *x, const float *dy,
                         float *dx);
  /* out (C) = column sums of x (rows, C); with center (C) not NULL, the
   * sums of (x - center)^2. Accumulated in double. */
  ctrain_err (*chan_sums)(kern_t *k, const float *x, const float *center, int rows, int C,
                          float *out);
  /* y (rows, C) = gamma * (x - mean) * inv + beta; gamma NULL reads as 1,
   * beta NULL as 0. y may alias x. */
  ctrain_err (*bn_fwd)(kern_t *k, const float *x, int rows, int C, const float *mean,
                       const float *inv, const float *gamma, const float *beta, float *y);
  /* out (2C) = column sums of dy and of dy * (x - mean) * inv. */
  ctrain_err (*bn_bwd_sums)(kern_t *k, const float *x, const float *dy, int rows, int C,
                            const float *mean, const float *inv, float *out);
  /* dx (rows, C) = gamma * inv * (dy - sums[c] / n - xhat * sums[C + c] / n)
   * with the sums over every row of the batch (all replicas) and n rows in
   * all; gamma NULL reads as 1. dx may alias dy. */
  ctrain_err (*bn_bwd)(kern_t *k, const float *x, const float *dy, int rows, int C,
                       const float *mean, const float *inv, const float *gamma, const float *sums,
                       float n, float *dx);

  /* Direct convolution, without im2col (optional: NULL, or conv_direct
   * returning 0 for a layer, sends it through im2col + gemm). conv_direct:
   * 1 when the three ops below run window g with F filters on this machine.
   * w is HWIO (kh, kw, C, F). */
  int (*conv_direct)(kern_t *k, const kern_win *g, int F);
  /* y (B, OH, OW, F) = bias (F; NULL reads as 0) + the convolution of x;
   * relu: then act_fwd's ReLU, the same floats. */
  ctrain_err (*conv_fwd)(kern_t *k, const kern_win *g, const float *x, const float *w,
                         const float *bias, int F, int relu, float *y);
  /* dw (kh, kw, C, F) (overwritten) = the kernel's gradient over the batch
   * from dy (B, OH, OW, F). */
  ctrain_err (*conv_dw)(kern_t *k, const kern_win *g, const float *x, const float *dy, int F,
                        float *dw);
  /* dx (B, H, W, C) (overwritten) = the input's gradient from dy. */
  ctrain_err (*conv_dx)(kern_t *k, const kern_win *g, const float *dy, const float *w, int F,
                        float *dx);

  /* act_bwd's ReLU of dy (rows, n) at y, then bias_grad of the result into
   * gb (n), in one pass: the floats of the two apart (optional: NULL runs
   * them apart). */
  ctrain_err (*relu_bias_grad)(kern_t *k, const float *y, float *dy, int rows, int n, float *gb);

  /* Batch normalization then pooling, without the normalized tensor
   * (optional: NULL, or bn_pool_ok returning 0 for the pooling's window g,
   * runs bn_fwd and pool_fwd/pool_bwd apart). The pooling's input is
   * bn_fwd(x, mean, inv, gamma, beta), worked out as it is read, so y and dx
   * are the floats of the two ops apart: y (B, OH, OW, C) the pooling of it,
   * dx (B, H, W, C, overwritten) the gradient of it from dy. */
  int (*bn_pool_ok)(kern_t *k, const kern_win *g);
  ctrain_err (*bn_pool_fwd)(kern_t *k, const kern_win *g, int max, const float *x,
                            const float *mean, const float *inv, const float *gamma,
                            const float *beta, float *y);
  ctrain_err (*bn_pool_bwd)(kern_t *k, const kern_win *g, int max, const float *x,
                            const float *mean, const float *inv, const float *gamma,
                            const float *beta, const float *dy, float *dx);
} kern_ops;

struct kern {
  const kern_ops *ops;
  int device;    /* CUDA ordinal; -1 on the CPU */
  char err[512]; /* last error, naming the failing call */
  void *impl;    /* backend state */
};

/* The CPU reference backend. *out is owned by the caller (kern_free). */
CTRAIN_NODISCARD ctrain_err kern_cpu_create(kern_t **out);
/* From now on the CPU backend's GEMMs run on the calling thread only (no
 * OpenBLAS threads), so that several threads may each run a CPU backend at
 * once (local replicas stepped in parallel: replicas_sync_bn). Call it before
 * those threads start. */
void kern_cpu_blas_one_thread(void);
/* The most OpenBLAS threads the CPU backend's large GEMMs use: at most n
 * (OpenBLAS's own count when that is smaller). The worker passes its CPU
 * budget (worker/cpubudget.h) unless the user set OpenBLAS's count; call it
 * before the first GEMM. Returns the count now in force. */
int kern_cpu_blas_threads(int n);
/* The count in force for the CPU backend's large GEMMs: 1 once
 * kern_cpu_blas_one_thread ran, else what kern_cpu_blas_threads set (or
 * OpenBLAS's own). */
int kern_cpu_blas_threads_now(void);

/* OpenBLAS's kernels for this CPU. OpenBLAS picks them once, as it loads,
 * from the CPU's family and model numbers, and falls back to its SSE3
 * kernels ("Prescott") for a model it does not know: 0.3.21 (Debian 12, our
 * image) does so on Intel's Emerald Rapids, where its AVX-512 kernels
 * ("SkylakeX") run the model's GEMMs 4-5x faster on the same core.
 * kern_cpu_blas_core returns the name of OpenBLAS's pick and, in *better,
 * the core to ask for (OPENBLAS_CORETYPE, read as the library loads) when the
 * CPU runs wider vectors than that pick uses, else NULL. */
const char *kern_cpu_blas_core(const char **better);
/* The rule behind it: the core to ask for instead of `core` on a CPU whose
 * widest vectors are `level` (kern_cpu_vector_level), or NULL when `core`
 * already uses them or is a name this rule does not know (a newer
 * OpenBLAS's own pick is kept). */
const char *kern_blas_core_better(const char *core, int level);
/* The widest vector instructions this CPU and its OS run: 3 AVX-512
 * (F, BW, DQ, VL), 2 AVX2 with FMA, 1 AVX, 0 less, -1 not x86. */
int kern_cpu_vector_level(void);

/* The CUDA backend on `device` (its own compute and copy streams and cuBLAS
 * handle, fp32 math without TF32). CTRAIN_E_UNSUPPORTED in a build without
 * CUDA; CTRAIN_E_CUDA naming the call when the device cannot be used. The
 * message goes to errbuf. *out is owned by the caller. */
CTRAIN_NODISCARD ctrain_err kern_cuda_create(int device, kern_t **out, char *errbuf, size_t errlen);

/* Borrowed; valid until the next op or kern_free. */
const char *kern_errmsg(const kern_t *k);
/* Accepts NULL. */
void kern_free(kern_t *k);

#ifdef CTRAIN_HAVE_CUDA
/* In kernels_cuda.cu. */
CTRAIN_NODISCARD ctrain_err kern_cuda_create_impl(int device, kern_t **out, char *errbuf,
                                                  size_t errlen);
#endif

/* The declarations of a backend's CNN ops named P_im2col, P_col2im, ...,
 * the kern_ops entries' signatures written once: kernels_cpu_cnn.h declares
 * kcpu's, kernels_cuda_int.cuh cu's. */
#define KERN_CNN_OPS_DECLARE(P)                                                                    \
  CTRAIN_NODISCARD ctrain_err P##_im2col(kern_t *k, const kern_win *g, const float *x,             \
                                         float *col);                                              \
  CTRAIN_NODISCARD ctrain_err P##_col2im(kern_t *k, const kern_win *g, const float *col,           \
                                         float *dx);                                               \
  CTRAIN_NODISCARD ctrain_err P##_pool_fwd(kern_t *k, const kern_win *g, int max, const float *x,  \
                                           float *y);                                              \
  CTRAIN_NODISCARD ctrain_err P##_pool_bwd(kern_t *k, const kern_win *g, int max, const float *x,  \
                                           const float *dy, float *dx);                            \
  CTRAIN_NODISCARD ctrain_err P##_chan_sums(kern_t *k, const float *x, const float *center,        \
                                            int rows, int C, float *out);                          \
  CTRAIN_NODISCARD ctrain_err P##_bn_fwd(kern_t *k, const float *x, int rows, int C,               \
                                         const float *mean, const float *inv, const float *gamma,  \
                                         const float *beta, float *y);                             \
  CTRAIN_NODISCARD ctrain_err P##_bn_bwd_sums(kern_t *k, const float *x, const float *dy,          \
                                              int rows, int C, const float *mean,                  \
                                              const float *inv, float *out);                       \
  CTRAIN_NODISCARD ctrain_err P##_bn_bwd(                                                          \
      kern_t *k, const float *x, const float *dy, int rows, int C, const float *mean,              \
      const float *inv, const float *gamma, const float *sums, float n, float *dx)

#endif
