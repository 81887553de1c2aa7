/* kernels_cuda_cnn.cu - the CUDA backend's CNN ops (kernels.h): im2col and
 * col2im, pooling, the channel sums and batch normalization; the rest of the
 * backend is kernels_cuda.cu (worker/model/kernels_cuda_int.cuh).
 *
 * They compute every output element with the CPU reference's operations in
 * its order (kernels_cpu_cnn.c), as a gather: one thread per output element,
 * no atomics, so they are deterministic run to run, and bitwise equal to the
 * CPU except bn_bwd_sums, whose double sums run in blocks of rows (the CPU's
 * in one running sum); chan_sums equals the CPU's while CHAN_BLOCK is its
 * KCPU_BLOCK. Tolerances: tests/unit/test_kernels_cnn.c. */
#include <stdio.h>

#include "worker/model/kernels_cuda_int.cuh"

namespace kcuda {

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

} // namespace kcuda
