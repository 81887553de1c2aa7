/* worker/model/kernels_cpu_cnn.h - the CPU reference backend's convolution,
 * pooling and batch-normalization ops (kernels.h documents each); the
 * kern_ops table in kernels_cpu.c points at them. */
#ifndef CTRAIN_KERNELS_CPU_CNN_H
#define CTRAIN_KERNELS_CPU_CNN_H

#include "worker/model/kernels.h"

ctrain_err kcpu_im2col(kern_t *k, const kern_win *g, const float *x, float *col);
ctrain_err kcpu_col2im(kern_t *k, const kern_win *g, const float *col, float *dx);
ctrain_err kcpu_pool_fwd(kern_t *k, const kern_win *g, int max, const float *x, float *y);
ctrain_err kcpu_pool_bwd(kern_t *k, const kern_win *g, int max, const float *x, const float *dy,
                         float *dx);
ctrain_err kcpu_chan_sums(kern_t *k, const float *x, const float *center, int rows, int C,
                          float *out);
ctrain_err kcpu_bn_fwd(kern_t *k, const float *x, int rows, int C, const float *mean,
                       const float *inv, const float *gamma, const float *beta, float *y);
ctrain_err kcpu_bn_bwd_sums(kern_t *k, const float *x, const float *dy, int rows, int C,
                            const float *mean, const float *inv, float *out);
ctrain_err kcpu_bn_bwd(kern_t *k, const float *x, const float *dy, int rows, int C,
                       const float *mean, const float *inv, const float *gamma, const float *sums,
                       float n, float *dx);

#endif
