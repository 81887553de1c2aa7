/* worker/model/kernels_cpu_cnn.h - the CPU reference backend's convolution,
 * pooling and batch-normalization ops (kernels.h documents each); the
 * kern_ops table in kernels_cpu.c points at them. */
#ifndef CTRAIN_KERNELS_CPU_CNN_H
#define CTRAIN_KERNELS_CPU_CNN_H

#include "worker/model/kernels.h"

/* The CPU backend's elementwise and per-channel loops are built for
 * AVX-512, AVX2 and baseline x86-64 (SSE2), and the loader picks the build
 * the CPU runs (target_clones: an ifunc, resolved once). The build is
 * portable and the loops still use a new CPU's vectors. Every clone is built
 * without fused multiply-add and without reassociation (KCPU_VECTORIZE,
 * KERN_VECTORIZE), so each computes the same floats as the others: GCC
 * only, whose optimize attribute turns contraction off (clang ignores it),
 * and not under ThreadSanitizer: an ifunc's resolver runs before the TSan
 * runtime is up, and the instrumented resolver crashed the tests. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__) &&       \
    !defined(__SANITIZE_THREAD__)
#define KERN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KERN_CLONES
#endif

/* GCC's per-function optimization switches (vectorize at -O2, no
 * contraction); clang has no optimize attribute and warns of it. */
#if defined(__GNUC__) && !defined(__clang__)
#define KERN_OPTIMIZE(...) __attribute__((optimize(__VA_ARGS__)))
#else
#define KERN_OPTIMIZE(...)
#endif

KERN_CNN_OPS_DECLARE(kcpu);

/* kernels_cpu_conv.c: kernels.h's direct convolution (AVX-512), and the
 * scratch it keeps in the backend (freed by kcpu_conv_free). */
int kcpu_conv_direct(kern_t *k, const kern_win *g, int F);
CTRAIN_NODISCARD ctrain_err kcpu_conv_fwd(kern_t *k, const kern_win *g, const float *x,
                                          const float *w, const float *bias, int F, int relu,
                                          float *y);
CTRAIN_NODISCARD ctrain_err kcpu_conv_dw(kern_t *k, const kern_win *g, const float *x,
                                         const float *dy, int F, float *dw);
CTRAIN_NODISCARD ctrain_err kcpu_conv_dx(kern_t *k, const kern_win *g, const float *dy,
                                         const float *w, int F, float *dx);
void kcpu_conv_free(kern_t *k);
/* kernels.h's bn_pool_ok, bn_pool_fwd, bn_pool_bwd: 2x2 pooling that tiles
 * the image. */
int kcpu_bn_pool_ok(kern_t *k, const kern_win *g);
CTRAIN_NODISCARD ctrain_err kcpu_bn_pool_fwd(kern_t *k, const kern_win *g, int max, const float *x,
                                             const float *mean, const float *inv,
                                             const float *gamma, const float *beta, float *y);
CTRAIN_NODISCARD ctrain_err kcpu_bn_pool_bwd(kern_t *k, const kern_win *g, int max, const float *x,
                                             const float *mean, const float *inv,
                                             const float *gamma, const float *beta, const float *dy,
                                             float *dx);

#endif
