/* kernels_cuda.cu - the CUDA backend of kernels.h: cuBLAS for GEMMs, small
 * elementwise/row kernels for the rest, a compute stream and a copy stream.
 *
 * fp32 throughout; cuBLAS runs with CUBLAS_DEFAULT_MATH and TF32 is never
 * enabled, so results stay within fp32 rounding of the CPU reference (the
 * tolerances are in tests/unit/test_kernels.c). Every CUDA/cuBLAS failure is
 * CTRAIN_E_CUDA with the call named in k->err.
 *
 * The CNN ops (im2col, col2im, pooling, batch normalization) compute every
 * output element with the CPU reference's operations in its order
 * (kernels_cpu_cnn.c), as a gather: one thread per output element, no
 * atomics, so they are deterministic run to run, and bitwise equal to the CPU
 * except bn_bwd_sums, whose double sums run in blocks of rows (the CPU's in
 * one running sum); chan_sums equals the CPU's while CHAN_BLOCK is its
 * KCPU_BLOCK. Tolerances: tests/unit/test_kernels_cnn.c. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "worker/model/kernels.h"
#include "worker/model/kernels_row.h"
}

namespace {

struct cuda_impl {
  cudaStream_t compute;
  cudaStream_t copy;
  cublasHandle_t blas;
  cudaEvent_t copied[KERN_SLOTS];   /* the copy into slot's dst is done */
  cudaEvent_t released[KERN_SLOTS]; /* compute is done reading slot's dst */
  void *scratch;                    /* the channel sums' partials (scratch_for) */
  size_t scratch_bytes;
};

const int THREADS = 256;

inline cuda_impl *impl(kern_t *k) {
  return static_cast<cuda_impl *>(k->impl);
}

ctrain_err fail_cuda(kern_t *k, const char *call, cudaError_t e) {
  snprintf(k->err, sizeof(k->err), "CUDA device %d: %s: %s (%s)", k->device, call,
           cudaGetErrorName(e), cudaGetErrorString(e));
  return CTRAIN_E_CUDA;
}

ctrain_err fail_blas(kern_t *k, const char *call, cublasStatus_t s) {
  snprintf(k->err, sizeof(k->err), "CUDA device %d: %s: %s (%s)", k->device, call,
           cublasGetStatusName(s), cublasGetStatusString(s));
  return CTRAIN_E_CUDA;
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return fail_cuda(k, #call, e_);                                                              \
  } while (0)

/* Every op first makes its device current: one thread drives the replicas
 * of several GPUs (replicas.h), and streams, handles and memory belong to
 * the device they were made on. Cheap when it already is. */
#define ON_DEVICE() CK(cudaSetDevice(k->device))

/* After a launch: a bad configuration shows here, faults at the next sync. */
#define LAUNCHED(name)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = cudaGetLastError();                                                           \
    if (e_ != cudaSuccess)                                                                         \
      return fail_cuda(k, name "<<<>>>", e_);                                                      \
  } while (0)

inline unsigned blocks_for(size_t n) {
  size_t b = (n + THREADS - 1) / THREADS;
  if (b > 65535u * 8u)
    b = 65535u * 8u; /* grid-stride loops cover the rest */
  return (unsigned)(b ? b : 1);
}

#define GRID_STRIDE(i, n)                                                                          \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                          \
       i += (size_t)gridDim.x * blockDim.x)

__global__ void bias_fill_kernel(float *y, const float *b, size_t total, int n) {
  GRID_STRIDE(i, total) {
    y[i] = b[i % (size_t)n];
  }
}

/* One thread per column: reads are coalesced across the warp (adjacent
 * columns), and the row order is the CPU's. */
__global__ void bias_grad_kernel(float *gb, const float *d, int rows, int n) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= n)
    return;
  float s = 0;
  for (int r = 0; r < rows; r++)
    s += d[(size_t)r * (size_t)n + (size_t)c];
  gb[c] = s;
}

__global__ void act_fwd_kernel(int a, float *y, size_t n) {
  GRID_STRIDE(i, n) {
    float v = y[i];
    if (a == MODEL_RELU)
      v = v > 0 ? v : 0;
    else if (a == MODEL_TANH)
      v = tanhf(v);
    else if (a == MODEL_SIGMOID)
      v = 1.0f / (1.0f + expf(-v));
    y[i] = v;
  }
}

__global__ void act_bwd_kernel(int a, const float *y, float *dy, size_t n) {
  GRID_STRIDE(i, n) {
    float v = y[i];
    if (a == MODEL_RELU)
      dy[i] = v > 0 ? dy[i] : 0;
    else if (a == MODEL_TANH)
      dy[i] *= 1.0f - v * v;
    else if (a == MODEL_SIGMOID)
      dy[i] *= v * (1.0f - v);
  }
}

__global__ void mul_kernel(float *y, const float *x, const float *mask, size_t n) {
  GRID_STRIDE(i, n) {
    y[i] = x[i] * mask[i];
  }
}

/* One thread per row (C is the class count: small). stats must be zero. */
__global__ void softmax_ce_kernel(const float *logits, const int32_t *labels, int rows, int C,
                                  float *probs, double *stats) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows)
    return;
  double loss;
  int hit;
  if (!kern_softmax_ce_row(logits + (size_t)r * (size_t)C, C, labels[r],
                           probs + (size_t)r * (size_t)C, &loss, &hit))
    return;
  atomicAdd(&stats[0], loss);
  if (hit)
    atomicAdd(&stats[1], 1.0);
}

__global__ void ce_grad_kernel(const float *probs, const int32_t *labels, int C, float scale,
                               float *d, size_t total) {
  GRID_STRIDE(i, total) {
    size_t r = i / (size_t)C;
    int c = (int)(i % (size_t)C);
    float g = probs[i] * scale;
    if (labels[r] == c)
      g -= scale;
    d[i] = g;
  }
}

__global__ void sgd_kernel(float *w, const float *g, size_t n, float lr) {
  GRID_STRIDE(i, n) {
    w[i] -= lr * g[i];
  }
}

__global__ void sgd_momentum_kernel(float *w, const float *g, float *v, size_t n, float lr,
                                    float mom, int nesterov) {
  GRID_STRIDE(i, n) {
    float vi = mom * v[i] - lr * g[i];
    v[i] = vi;
    w[i] += nesterov ? mom * vi - lr * g[i] : vi;
  }
}

__global__ void adam_kernel(float *w, const float *g, float *m, float *v, size_t n, float alpha,
                            float b1, float b2, float eps) {
  GRID_STRIDE(i, n) {
    float gi = g[i];
    float mi = m[i] + (gi - m[i]) * (1.0f - b1);
    float vi = v[i] + (gi * gi - v[i]) * (1.0f - b2);
    m[i] = mi;
    v[i] = vi;
    w[i] -= alpha * mi / (sqrtf(vi) + eps);
  }
}

/* ---- CNN ops: NHWC, one thread per output element (a gather), each
 * element's operations those of kernels_cpu_cnn.c in the same order. The
 * __f*_rn intrinsics keep nvcc from contracting a multiply and an add into
 * an FMA, which the CPU reference (x86-64, no FMA) never does. ---- */

/* The output positions (lo..hi, along one axis) whose window reads input
 * position `in`: 0 <= in + pad - o * s < k. Empty when lo > hi. */
__device__ void out_range(int in, int pad, int k, int s, int n_out, int *lo, int *hi) {
  int p = in + pad, l = p - k + 1, h = p / s;
  *lo = l <= 0 ? 0 : (l + s - 1) / s;
  *hi = h < n_out - 1 ? h : n_out - 1;
}

/* Output pixel t of (B, OH, OW): its (oh, ow); returns its b. */
__device__ size_t out_pixel(const kern_win &g, size_t t, int *oh, int *ow) {
  *ow = (int)(t % (size_t)g.OW);
  t /= (size_t)g.OW;
  *oh = (int)(t % (size_t)g.OH);
  return t / (size_t)g.OH;
}

/* Element idx of an input (B, H, W, C) and the output rows [oh0, oh1] x
 * [ow0, ow1] whose windows read it: what a backward kernel with one thread
 * per input element gathers over. */
struct in_elem {
  size_t b;
  int ih, iw, c, oh0, oh1, ow0, ow1;
};
__device__ in_elem in_windows(const kern_win &g, size_t idx) {
  in_elem e;
  size_t t = idx;
  e.c = (int)(t % (size_t)g.C);
  t /= (size_t)g.C;
  e.iw = (int)(t % (size_t)g.W);
  t /= (size_t)g.W;
  e.ih = (int)(t % (size_t)g.H);
  e.b = t / (size_t)g.H;
  out_range(e.ih, g.pt, g.kh, g.sh, g.OH, &e.oh0, &e.oh1);
  out_range(e.iw, g.pl, g.kw, g.sw, g.OW, &e.ow0, &e.ow1);
  return e;
}

/* How many of a window's k positions from `start` lie inside [0, n). */
__device__ int valid_span(int start, int k, int n) {
  int a = start > 0 ? start : 0, b = start + k < n ? start + k : n;
  return b > a ? b - a : 0;
}

/* col (B*OH*OW, kh*kw*C): one thread per entry; padding reads as 0. */
__global__ void im2col_kernel(kern_win g, const float *x, float *col, size_t total) {
  GRID_STRIDE(idx, total) {
    size_t t = idx;
    int c = (int)(t % (size_t)g.C);
    t /= (size_t)g.C;
    int j = (int)(t % (size_t)g.kw);
    t /= (size_t)g.kw;
    int i = (int)(t % (size_t)g.kh), oh, ow;
    size_t b = out_pixel(g, t / (size_t)g.kh, &oh, &ow);
    int ih = oh * g.sh - g.pt + i, iw = ow * g.sw - g.pl + j;
    col[idx] = ih < 0 || ih >= g.H || iw < 0 || iw >= g.W
                   ? 0.0f
                   : x[((b * (size_t)g.H + (size_t)ih) * (size_t)g.W + (size_t)iw) * (size_t)g.C +
                       (size_t)c];
  }
}

/* dx (B, H, W, C): one thread per element sums the col entries that came
 * from it, windows in the CPU's (oh, ow) order from 0: the CPU's scatter
 * adds them to a zeroed dx in that order, so the sum is the same bitwise. */
__global__ void col2im_kernel(kern_win g, const float *col, float *dx, size_t total) {
  GRID_STRIDE(idx, total) {
    in_elem e = in_windows(g, idx);
    float s = 0.0f;
    for (int oh = e.oh0; oh <= e.oh1; oh++)
      for (int ow = e.ow0; ow <= e.ow1; ow++) {
        int i = e.ih + g.pt - oh * g.sh, j = e.iw + g.pl - ow * g.sw;
        size_t row = (e.b * (size_t)g.OH + (size_t)oh) * (size_t)g.OW + (size_t)ow;
        s = __fadd_rn(
            s, col[((row * (size_t)g.kh + (size_t)i) * (size_t)g.kw + (size_t)j) * (size_t)g.C +
                   (size_t)e.c]);
      }
    dx[idx] = s;
  }
}

/* Channel c of window (oh, ow) over its valid positions in the CPU's (i, j)
 * order: the max (replaced on `>` only, so the first maximum wins: at *bh,
 * *bw) or the sum (__fadd_rn, in order); *n the positions. */
__device__ float window_scan(const kern_win &g, const float *x, size_t b, int oh, int ow, int c,
                             bool max, int *n, int *bh, int *bw) {
  float acc = 0.0f;
  *n = 0, *bh = -1, *bw = -1;
  for (int i = 0; i < g.kh; i++) {
    int h = oh * g.sh - g.pt + i;
    if (h < 0 || h >= g.H)
      continue;
    for (int j = 0; j < g.kw; j++) {
      int w = ow * g.sw - g.pl + j;
      if (w < 0 || w >= g.W)
        continue;
      float v =
          x[((b * (size_t)g.H + (size_t)h) * (size_t)g.W + (size_t)w) * (size_t)g.C + (size_t)c];
      if (*n == 0 || (max && v > acc)) {
        acc = v;
        *bh = h, *bw = w;
      } else if (!max) {
        acc = __fadd_rn(acc, v);
      }
      ++*n;
    }
  }
  return acc;
}

/* y (B, OH, OW, C): the window's valid positions in (i, j) order, the first
 * copied, the others folded in (max: the CPU's `v > y ? v : y`; mean: summed,
 * then divided by their count). */
__global__ void pool_fwd_kernel(kern_win g, int max, const float *x, float *y, size_t total) {
  GRID_STRIDE(idx, total) {
    int c = (int)(idx % (size_t)g.C), oh, ow;
    size_t b = out_pixel(g, idx / (size_t)g.C, &oh, &ow);
    int n, bh, bw;
    float acc = window_scan(g, x, b, oh, ow, c, max, &n, &bh, &bw);
    y[idx] = max ? acc : __fdiv_rn(acc, (float)n);
  }
}

/* Whether (ih, iw) is the first maximum of channel c in window (oh, ow),
 * as the CPU's scan finds it. */
__device__ bool is_first_max(const kern_win &g, const float *x, size_t b, int oh, int ow, int c,
                             int ih, int iw) {
  int n, bh, bw;
  window_scan(g, x, b, oh, ow, c, true, &n, &bh, &bw);
  return bh == ih && bw == iw;
}

/* dx (B, H, W, C): one thread per element sums, over the windows holding it
 * in the CPU's (oh, ow) order, dy when it is the window's first maximum
 * (max) or dy / the window's count (mean). */
__global__ void pool_bwd_kernel(kern_win g, int max, const float *x, const float *dy, float *dx,
                                size_t total) {
  GRID_STRIDE(idx, total) {
    in_elem e = in_windows(g, idx);
    float s = 0.0f;
    for (int oh = e.oh0; oh <= e.oh1; oh++)
      for (int ow = e.ow0; ow <= e.ow1; ow++) {
        float d = dy[((e.b * (size_t)g.OH + (size_t)oh) * (size_t)g.OW + (size_t)ow) * (size_t)g.C +
                     (size_t)e.c];
        if (!max) {
          int n = valid_span(oh * g.sh - g.pt, g.kh, g.H) * valid_span(ow * g.sw - g.pl, g.kw, g.W);
          s = __fadd_rn(s, __fdiv_rn(d, (float)n));
        } else if (is_first_max(g, x, e.b, oh, ow, e.c, e.ih, e.iw)) {
          s = __fadd_rn(s, d);
        }
      }
    dx[idx] = s;
  }
}

/* Rows per partial sum: kernels_cpu_cnn.c's KCPU_BLOCK, so chan_sums' float
 * partials are the CPU's. */
const int CHAN_BLOCK = 64;

/* part (nblk, C): thread (blk, c) sums rows blk*CHAN_BLOCK.. of column c in
 * float, in row order (of (x - center)^2 with center). Adjacent threads read
 * adjacent channels. */
__global__ void chan_part_kernel(const float *x, const float *center, int rows, int C, float *part,
                                 size_t total) {
  GRID_STRIDE(idx, total) {
    int c = (int)(idx % (size_t)C), blk = (int)(idx / (size_t)C);
    int r0 = blk * CHAN_BLOCK, r1 = rows - r0 < CHAN_BLOCK ? rows : r0 + CHAN_BLOCK;
    float p = 0.0f;
    for (int r = r0; r < r1; r++) {
      float v = x[(size_t)r * (size_t)C + (size_t)c];
      if (center) {
        float d = __fsub_rn(v, center[c]);
        p = __fadd_rn(p, __fmul_rn(d, d));
      } else {
        p = __fadd_rn(p, v);
      }
    }
    part[idx] = p;
  }
}

/* out (C) = the partials of each channel summed in double, block order. */
__global__ void chan_total_kernel(const float *part, int nblk, int C, float *out) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  double a = 0.0;
  for (int b = 0; b < nblk; b++)
    a += (double)part[(size_t)b * (size_t)C + (size_t)c];
  out[c] = (float)a;
}

__global__ void bn_fwd_kernel(const float *x, int C, const float *mean, const float *inv,
                              const float *gamma, const float *beta, float *y, size_t total) {
  GRID_STRIDE(idx, total) {
    int c = (int)(idx % (size_t)C);
    float xhat = __fmul_rn(__fsub_rn(x[idx], mean[c]), inv[c]);
    y[idx] = __fadd_rn(__fmul_rn(gamma ? gamma[c] : 1.0f, xhat), beta ? beta[c] : 0.0f);
  }
}

/* part (nblk, 2, C) in double: thread (blk, c) sums dy and dy * xhat over
 * its block's rows (the CPU sums every row into one double: another order,
 * the same products). */
__global__ void bn_sums_part_kernel(const float *x, const float *dy, int rows, int C,
                                    const float *mean, const float *inv, double *part,
                                    size_t total) {
  GRID_STRIDE(idx, total) {
    int c = (int)(idx % (size_t)C), blk = (int)(idx / (size_t)C);
    int r0 = blk * CHAN_BLOCK, r1 = rows - r0 < CHAN_BLOCK ? rows : r0 + CHAN_BLOCK;
    double s0 = 0.0, s1 = 0.0;
    for (int r = r0; r < r1; r++) {
      size_t e = (size_t)r * (size_t)C + (size_t)c;
      float xhat = __fmul_rn(__fsub_rn(x[e], mean[c]), inv[c]);
      s0 = __dadd_rn(s0, (double)dy[e]);
      s1 = __dadd_rn(s1, __dmul_rn((double)dy[e], (double)xhat));
    }
    part[(size_t)blk * 2 * (size_t)C + (size_t)c] = s0;
    part[(size_t)blk * 2 * (size_t)C + (size_t)C + (size_t)c] = s1;
  }
}

/* out (2C): the partials summed in double, block order. */
__global__ void bn_sums_total_kernel(const double *part, int nblk, int C, float *out) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= 2 * C)
    return;
  double a = 0.0;
  for (int b = 0; b < nblk; b++)
    a += part[(size_t)b * 2 * (size_t)C + (size_t)c];
  out[c] = (float)a;
}

__global__ void bn_bwd_kernel(const float *x, const float *dy, int C, const float *mean,
                              const float *inv, const float *gamma, const float *sums, float n,
                              float *dx, size_t total) {
  GRID_STRIDE(idx, total) {
    int c = (int)(idx % (size_t)C);
    float xhat = __fmul_rn(__fsub_rn(x[idx], mean[c]), inv[c]);
    float r = __fsub_rn(__fsub_rn(dy[idx], __fdiv_rn(sums[c], n)),
                        __fdiv_rn(__fmul_rn(xhat, sums[C + c]), n));
    dx[idx] = __fmul_rn(__fmul_rn(gamma ? gamma[c] : 1.0f, inv[c]), r);
  }
}

/* `bytes` (at least 1) of device memory, or of pinned host memory. */
static ctrain_err alloc_on(kern_t *k, void **p, size_t bytes, bool host) {
  *p = NULL;
  ON_DEVICE();
  bytes = bytes ? bytes : 1;
  CK(host ? cudaMallocHost(p, bytes) : cudaMalloc(p, bytes));
  return CTRAIN_OK;
}

static void free_on(kern_t *k, void *p, bool host) {
  cudaSetDevice(k->device);
  if (p)
    host ? cudaFreeHost(p) : cudaFree(p);
}

ctrain_err cu_alloc(kern_t *k, void **p, size_t bytes) {
  return alloc_on(k, p, bytes, false);
}
void cu_free(kern_t *k, void *p) {
  free_on(k, p, false);
}
ctrain_err cu_alloc_host(kern_t *k, void **p, size_t bytes) {
  return alloc_on(k, p, bytes, true);
}
void cu_free_host(kern_t *k, void *p) {
  free_on(k, p, true);
}

ctrain_err cu_h2d(kern_t *k, void *dst, const void *src, size_t bytes) {
  ON_DEVICE();
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_d2h(kern_t *k, void *dst, const void *src, size_t bytes) {
  ON_DEVICE();
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl(k)->compute));
  CK(cudaStreamSynchronize(impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_memset0(kern_t *k, void *dst, size_t bytes) {
  ON_DEVICE();
  CK(cudaMemsetAsync(dst, 0, bytes, impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_stage_wait(kern_t *k, int slot) {
  ON_DEVICE();
  CK(cudaEventSynchronize(impl(k)->copied[slot]));
  return CTRAIN_OK;
}

ctrain_err cu_stage(kern_t *k, int slot, void *dst, const void *src, size_t bytes) {
  ON_DEVICE();
  cuda_impl *c = impl(k);
  CK(cudaStreamWaitEvent(c->copy, c->released[slot], 0));
  CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->copy));
  CK(cudaEventRecord(c->copied[slot], c->copy));
  CK(cudaStreamWaitEvent(c->compute, c->copied[slot], 0));
  return CTRAIN_OK;
}

ctrain_err cu_release(kern_t *k, int slot) {
  ON_DEVICE();
  CK(cudaEventRecord(impl(k)->released[slot], impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_sync(kern_t *k) {
  ON_DEVICE();
  CK(cudaStreamSynchronize(impl(k)->compute));
  return CTRAIN_OK;
}

/* Row-major C = A B is column-major C^T = B^T A^T: swap the operands. */
ctrain_err cu_gemm(kern_t *k, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  ON_DEVICE();
  cublasStatus_t s =
      cublasSgemm(impl(k)->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                  M, K, &alpha, B, ldb, A, lda, &beta, C, ldc);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail_blas(k, "cublasSgemm", s);
  return CTRAIN_OK;
}

ctrain_err cu_bias_fill(kern_t *k, float *y, const float *b, int rows, int n) {
  ON_DEVICE();
  size_t total = (size_t)rows * (size_t)n;
  bias_fill_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(y, b, total, n);
  LAUNCHED("bias_fill_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_bias_grad(kern_t *k, float *gb, const float *d, int rows, int n) {
  ON_DEVICE();
  bias_grad_kernel<<<blocks_for((size_t)n), THREADS, 0, impl(k)->compute>>>(gb, d, rows, n);
  LAUNCHED("bias_grad_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_act_fwd(kern_t *k, model_act a, float *y, size_t n) {
  ON_DEVICE();
  if (a != MODEL_RELU && a != MODEL_TANH && a != MODEL_SIGMOID)
    return CTRAIN_OK;
  act_fwd_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>((int)a, y, n);
  LAUNCHED("act_fwd_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_act_bwd(kern_t *k, model_act a, const float *y, float *dy, size_t n) {
  ON_DEVICE();
  if (a != MODEL_RELU && a != MODEL_TANH && a != MODEL_SIGMOID)
    return CTRAIN_OK;
  act_bwd_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>((int)a, y, dy, n);
  LAUNCHED("act_bwd_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_mul(kern_t *k, float *y, const float *x, const float *mask, size_t n) {
  ON_DEVICE();
  mul_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>(y, x, mask, n);
  LAUNCHED("mul_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_copy(kern_t *k, float *dst, const float *src, size_t n) {
  ON_DEVICE();
  if (dst == src || n == 0)
    return CTRAIN_OK;
  CK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, impl(k)->compute));
  return CTRAIN_OK;
}

ctrain_err cu_softmax_ce(kern_t *k, const float *logits, const int32_t *labels, int rows, int C,
                         float *probs, double *stats) {
  ON_DEVICE();
  CK(cudaMemsetAsync(stats, 0, 2 * sizeof(double), impl(k)->compute));
  softmax_ce_kernel<<<blocks_for((size_t)rows), THREADS, 0, impl(k)->compute>>>(
      logits, labels, rows, C, probs, stats);
  LAUNCHED("softmax_ce_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_ce_grad(kern_t *k, const float *probs, const int32_t *labels, int rows, int C,
                      float scale, float *d) {
  ON_DEVICE();
  size_t total = (size_t)rows * (size_t)C;
  ce_grad_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(probs, labels, C, scale, d,
                                                                      total);
  LAUNCHED("ce_grad_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_sgd(kern_t *k, float *w, const float *g, float *v, size_t n, float lr, float mom,
                  int nesterov) {
  ON_DEVICE();
  if (!v) {
    sgd_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>(w, g, n, lr);
    LAUNCHED("sgd_kernel");
    return CTRAIN_OK;
  }
  sgd_momentum_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>(w, g, v, n, lr, mom,
                                                                       nesterov);
  LAUNCHED("sgd_momentum_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_adam(kern_t *k, float *w, const float *g, float *m, float *v, size_t n, float alpha,
                   float b1, float b2, float eps) {
  ON_DEVICE();
  adam_kernel<<<blocks_for(n), THREADS, 0, impl(k)->compute>>>(w, g, m, v, n, alpha, b1, b2, eps);
  LAUNCHED("adam_kernel");
  return CTRAIN_OK;
}

/* The CNN ops' scratch (the channel sums' partials), grown on demand: the
 * old one is freed only once the compute stream is done with it. */
ctrain_err scratch_for(kern_t *k, size_t bytes, void **p) {
  cuda_impl *c = impl(k);
  if (bytes > c->scratch_bytes) {
    CK(cudaStreamSynchronize(c->compute));
    if (c->scratch)
      CK(cudaFree(c->scratch));
    c->scratch = NULL;
    c->scratch_bytes = 0;
    CK(cudaMalloc(&c->scratch, bytes));
    c->scratch_bytes = bytes;
  }
  *p = c->scratch;
  return CTRAIN_OK;
}

ctrain_err cu_im2col(kern_t *k, const kern_win *g, const float *x, float *col) {
  ON_DEVICE();
  size_t total = (size_t)g->B * g->OH * g->OW * g->kh * g->kw * g->C;
  if (!total)
    return CTRAIN_OK;
  im2col_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(*g, x, col, total);
  LAUNCHED("im2col_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_col2im(kern_t *k, const kern_win *g, const float *col, float *dx) {
  ON_DEVICE();
  size_t total = (size_t)g->B * g->H * g->W * g->C;
  if (!total)
    return CTRAIN_OK;
  col2im_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(*g, col, dx, total);
  LAUNCHED("col2im_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_pool_fwd(kern_t *k, const kern_win *g, int max, const float *x, float *y) {
  ON_DEVICE();
  size_t total = (size_t)g->B * g->OH * g->OW * g->C;
  if (!total)
    return CTRAIN_OK;
  pool_fwd_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(*g, max, x, y, total);
  LAUNCHED("pool_fwd_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_pool_bwd(kern_t *k, const kern_win *g, int max, const float *x, const float *dy,
                       float *dx) {
  ON_DEVICE();
  size_t total = (size_t)g->B * g->H * g->W * g->C;
  if (!total)
    return CTRAIN_OK;
  pool_bwd_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(*g, max, x, dy, dx, total);
  LAUNCHED("pool_bwd_kernel");
  return CTRAIN_OK;
}

/* Scratch for the per-block partials of a column reduction over `rows`
 * rows of C columns: *nblk blocks of CHAN_BLOCK rows, *total = nblk * C
 * partials of `each` bytes (at least one byte of scratch). Nothing to do
 * when C <= 0 (the caller returns). */
static ctrain_err partials(kern_t *k, int rows, int C, size_t each, int *nblk, size_t *total,
                           void **part) {
  ON_DEVICE();
  *nblk = (rows + CHAN_BLOCK - 1) / CHAN_BLOCK;
  *total = C > 0 ? (size_t)*nblk * (size_t)C : 0;
  if (C <= 0)
    return CTRAIN_OK;
  return scratch_for(k, *total ? *total * each : 1, part);
}

ctrain_err cu_chan_sums(kern_t *k, const float *x, const float *center, int rows, int C,
                        float *out) {
  int nblk;
  size_t total;
  void *part = NULL;
  ctrain_err e = partials(k, rows, C, sizeof(float), &nblk, &total, &part);
  if (e || C <= 0)
    return e;
  if (total) {
    chan_part_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(
        x, center, rows, C, static_cast<float *>(part), total);
    LAUNCHED("chan_part_kernel");
  }
  chan_total_kernel<<<blocks_for((size_t)C), THREADS, 0, impl(k)->compute>>>(
      static_cast<const float *>(part), nblk, C, out);
  LAUNCHED("chan_total_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_bn_fwd(kern_t *k, const float *x, int rows, int C, const float *mean,
                     const float *inv, const float *gamma, const float *beta, float *y) {
  ON_DEVICE();
  size_t total = (size_t)rows * (size_t)C;
  if (!total)
    return CTRAIN_OK;
  bn_fwd_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(x, C, mean, inv, gamma, beta,
                                                                     y, total);
  LAUNCHED("bn_fwd_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_bn_bwd_sums(kern_t *k, const float *x, const float *dy, int rows, int C,
                          const float *mean, const float *inv, float *out) {
  int nblk;
  size_t total;
  void *part = NULL;
  ctrain_err e = partials(k, rows, C, 2 * sizeof(double), &nblk, &total, &part);
  if (e || C <= 0)
    return e;
  if (total) {
    bn_sums_part_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(
        x, dy, rows, C, mean, inv, static_cast<double *>(part), total);
    LAUNCHED("bn_sums_part_kernel");
  }
  bn_sums_total_kernel<<<blocks_for(2 * (size_t)C), THREADS, 0, impl(k)->compute>>>(
      static_cast<const double *>(part), nblk, C, out);
  LAUNCHED("bn_sums_total_kernel");
  return CTRAIN_OK;
}

ctrain_err cu_bn_bwd(kern_t *k, const float *x, const float *dy, int rows, int C, const float *mean,
                     const float *inv, const float *gamma, const float *sums, float n, float *dx) {
  ON_DEVICE();
  size_t total = (size_t)rows * (size_t)C;
  if (!total)
    return CTRAIN_OK;
  bn_bwd_kernel<<<blocks_for(total), THREADS, 0, impl(k)->compute>>>(x, dy, C, mean, inv, gamma,
                                                                     sums, n, dx, total);
  LAUNCHED("bn_bwd_kernel");
  return CTRAIN_OK;
}

void cu_destroy(kern_t *k) {
  cuda_impl *c = impl(k);
  if (c) {
    cudaSetDevice(k->device);
    if (c->compute)
      cudaStreamSynchronize(c->compute);
    if (c->copy)
      cudaStreamSynchronize(c->copy);
    for (int i = 0; i < KERN_SLOTS; i++) {
      if (c->copied[i])
        cudaEventDestroy(c->copied[i]);
      if (c->released[i])
        cudaEventDestroy(c->released[i]);
    }
    if (c->scratch)
      cudaFree(c->scratch);
    if (c->blas)
      cublasDestroy(c->blas);
    if (c->compute)
      cudaStreamDestroy(c->compute);
    if (c->copy)
      cudaStreamDestroy(c->copy);
    free(c);
  }
  free(k);
}

const kern_ops cuda_ops = {
    "cuda",
    1,
    cu_alloc,
    cu_free,
    cu_alloc_host,
    cu_free_host,
    cu_h2d,
    cu_d2h,
    cu_memset0,
    cu_stage_wait,
    cu_stage,
    cu_release,
    cu_sync,
    cu_gemm,
    cu_bias_fill,
    cu_bias_grad,
    cu_act_fwd,
    cu_act_bwd,
    cu_mul,
    cu_copy,
    cu_softmax_ce,
    cu_ce_grad,
    cu_sgd,
    cu_adam,
    cu_destroy,
    /* The CNN layers' ops. An op left NULL here would make
     * dmodel_create refuse the layers that need it, naming the backend. */
    cu_im2col,
    cu_col2im,
    cu_pool_fwd,
    cu_pool_bwd,
    cu_chan_sums,
    cu_bn_fwd,
    cu_bn_bwd_sums,
    cu_bn_bwd,
    /* No direct convolution: Conv2D runs as im2col + cuBLAS. */
    NULL,
    NULL,
    NULL,
    NULL,
    /* relu_bias_grad: the ReLU's and the bias' gradients run apart. */
    NULL,
    /* Batch normalization and pooling run apart (bn_pool_ok, _fwd, _bwd). */
    NULL,
    NULL,
    NULL,
};

} // namespace

extern "C" ctrain_err kern_cuda_create_impl(int device, kern_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  kern_t *k = NULL;
  cuda_impl *c = NULL;
  cublasStatus_t bs;
  *out = NULL;
  k = static_cast<kern_t *>(calloc(1, sizeof(*k)));
  c = static_cast<cuda_impl *>(calloc(1, sizeof(*c)));
  if (!k || !c) {
    free(k);
    free(c);
    snprintf(errbuf, errlen, "CUDA backend: out of memory");
    return CTRAIN_E_NOMEM;
  }
  k->ops = &cuda_ops;
  k->device = device;
  k->impl = c;
#define STEP(call)                                                                                 \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      result = fail_cuda(k, #call, e_);                                                            \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)
  STEP(cudaSetDevice(device));
  STEP(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
  STEP(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
  for (int i = 0; i < KERN_SLOTS; i++) {
    STEP(cudaEventCreateWithFlags(&c->copied[i], cudaEventDisableTiming));
    STEP(cudaEventCreateWithFlags(&c->released[i], cudaEventDisableTiming));
  }
#undef STEP
  bs = cublasCreate(&c->blas);
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasSetStream(c->blas, c->compute);
  if (bs == CUBLAS_STATUS_SUCCESS)
    bs = cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH); /* fp32, no TF32 */
  if (bs != CUBLAS_STATUS_SUCCESS) {
    result = fail_blas(k, "cublasCreate/SetStream/SetMathMode", bs);
    goto out;
  }
  *out = k;
  k = NULL;
out:
  if (k) {
    snprintf(errbuf, errlen, "%s", k->err);
    cu_destroy(k);
  }
  return result;
}
