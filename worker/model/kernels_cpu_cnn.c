/* kernels_cpu_cnn.c - the CPU reference for Conv2D (im2col; the GEMM is the
 * backend's), pooling and batch normalization, NHWC throughout. Plain loops:
 * the convolution's time is in the GEMM. */
#include "worker/model/kernels_cpu_cnn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elementwise loops along the channels, vectorized at -O2 too, and cloned
 * for AVX-512 and AVX2 (as kernels_cpu.c's KERN_VECTORIZE: each element's
 * value is the scalar loop's on every clone, no reassociation and no fused
 * multiply-add). */
#define KCPU_VECTORIZE                                                                             \
  KERN_CLONES KERN_OPTIMIZE("tree-vectorize", "vect-cost-model=dynamic",                           \
                            "no-tree-loop-distribute-patterns", "fp-contract=off")

/* The input pixel a window position reads: its index (in pixels) or -1 for
 * padding. */
static inline __attribute__((always_inline)) long win_pixel(const kern_win *g, int b, int oh,
                                                            int ow, int i, int j) {
  int ih = oh * g->sh - g->pt + i, iw = ow * g->sw - g->pl + j;
  if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W)
    return -1;
  return ((long)b * g->H + ih) * g->W + iw;
}

/* The window row i of output pixel (b, oh, ow): its kernel columns
 * [*j0, *j1) inside the image, whose pixels are consecutive in memory from
 * the pixel returned (column j0's); the columns outside are padding. -1 when
 * the whole row is padding. */
static inline __attribute__((always_inline)) long win_row(const kern_win *g, int b, int oh, int ow,
                                                          int i, int *j0, int *j1) {
  int ih = oh * g->sh - g->pt + i, iw = ow * g->sw - g->pl;
  *j0 = iw < 0 ? -iw : 0;
  *j1 = g->W - iw < g->kw ? g->W - iw : g->kw;
  if (ih < 0 || ih >= g->H || *j1 <= *j0)
    return -1;
  return ((long)b * g->H + ih) * g->W + iw + *j0;
}

/* A window row at a time: its in-image columns are one run of (j1 - j0) * C
 * floats in x as in col, copied (im2col) or added (col2im) in one loop; each
 * element gets the values, in the order, of the pixel-by-pixel loops. The
 * runs are short (kw * C floats: 3 for a 3x3 kernel on one channel), so they
 * are plain loops rather than calls to memcpy and memset. */
KCPU_VECTORIZE ctrain_err kcpu_im2col(kern_t *k, const kern_win *g, const float *x, float *col) {
  (void)k;
  size_t C = (size_t)g->C, row = (size_t)g->kw * C;
  float *dst = col;
  for (int b = 0; b < g->B; b++)
    for (int oh = 0; oh < g->OH; oh++)
      for (int ow = 0; ow < g->OW; ow++)
        for (int i = 0; i < g->kh; i++, dst += row) {
          int j0 = 0, j1 = 0;
          long p = win_row(g, b, oh, ow, i, &j0, &j1);
          size_t a = p < 0 ? row : (size_t)j0 * C, e = p < 0 ? row : (size_t)j1 * C;
          const float *src = p < 0 ? x : x + (size_t)p * C; /* column j0's pixel */
          for (size_t t = 0; t < a; t++)
            dst[t] = 0.0f;
          for (size_t t = a; t < e; t++)
            dst[t] = src[t - a];
          for (size_t t = e; t < row; t++)
            dst[t] = 0.0f;
        }
  return CTRAIN_OK;
}

KCPU_VECTORIZE ctrain_err kcpu_col2im(kern_t *k, const kern_win *g, const float *col, float *dx) {
  (void)k;
  size_t C = (size_t)g->C, row = (size_t)g->kw * C;
  const float *src = col;
  memset(dx, 0, (size_t)g->B * g->H * g->W * C * sizeof(float));
  for (int b = 0; b < g->B; b++)
    for (int oh = 0; oh < g->OH; oh++)
      for (int ow = 0; ow < g->OW; ow++)
        for (int i = 0; i < g->kh; i++, src += row) {
          int j0 = 0, j1 = 0;
          long p = win_row(g, b, oh, ow, i, &j0, &j1);
          if (p < 0)
            continue;
          float *d = dx + (size_t)p * C;
          const float *s = src + (size_t)j0 * C;
          size_t n = (size_t)(j1 - j0) * C;
          for (size_t c = 0; c < n; c++)
            d[c] += s[c];
        }
  return CTRAIN_OK;
}

/* One output pixel of a pooling: y (C) over the window's valid positions
 * (the first copied, the others folded in along memory). */
static inline __attribute__((always_inline)) void
pool_pixel(const kern_win *g, int max, const float *x, int b, int oh, int ow, float *y) {
  size_t C = (size_t)g->C;
  int n = 0;
  for (int i = 0; i < g->kh; i++)
    for (int j = 0; j < g->kw; j++) {
      long p = win_pixel(g, b, oh, ow, i, j);
      if (p < 0)
        continue;
      const float *xp = x + (size_t)p * C;
      if (n++ == 0)
        memcpy(y, xp, C * sizeof(float));
      else if (max)
        for (size_t c = 0; c < C; c++)
          y[c] = xp[c] > y[c] ? xp[c] : y[c];
      else
        for (size_t c = 0; c < C; c++)
          y[c] += xp[c];
    }
  if (!max)
    for (size_t c = 0; c < C; c++)
      y[c] /= (float)n;
}

/* 2x2 windows at stride 2 that tile the image (the usual MaxPooling2D and
 * AveragePooling2D): the four positions of every channel in one loop, the
 * same operations in the same order as pool_pixel and pool_pixel_bwd (so the
 * same floats), without their per-position bounds tests. */
static int tiles_2x2(const kern_win *g) {
  return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->pt == 0 && g->pl == 0 &&
         g->OH * 2 == g->H && g->OW * 2 == g->W;
}

/* The window of output pixel (b, oh, ow): its four positions in window
 * order (row by row). */
static inline __attribute__((always_inline)) void quad(const kern_win *g, int b, int oh, int ow,
                                                       size_t at[4]) {
  size_t C = (size_t)g->C, row = (size_t)g->W * C;
  at[0] = (((size_t)b * g->H + 2 * (size_t)oh) * g->W + 2 * (size_t)ow) * C;
  at[1] = at[0] + C;
  at[2] = at[0] + row;
  at[3] = at[2] + C;
}

/* A pooling input value: x's, or (aff) batch normalization's output of it,
 * g1 * ((x - mean) * inv) + b1 with g1, b1 the gamma, beta or 1, 0 per
 * channel: kcpu_bn_fwd's operations, so its floats. */
typedef struct {
  const float *mean, *inv, *g1, *b1;
  float *tmp; /* (2 W C) a row pair's normalized values */
} bn_map;

static inline __attribute__((always_inline)) float in_val(const float *p, size_t c, const bn_map *a,
                                                          const int aff) {
  return aff ? a->g1[c] * ((p[c] - a->mean[c]) * a->inv[c]) + a->b1[c] : p[c];
}

static inline __attribute__((always_inline)) void
pool_fwd_2x2_body(const kern_win *g, int max, const float *restrict x, const bn_map *a,
                  float *restrict y, const int aff) {
  size_t C = (size_t)g->C;
  for (int b = 0; b < g->B; b++)
    for (int oh = 0; oh < g->OH; oh++)
      for (int ow = 0; ow < g->OW; ow++, y += C) {
        size_t at[4];
        quad(g, b, oh, ow, at);
        const float *x0 = x + at[0], *x1 = x + at[1], *x2 = x + at[2], *x3 = x + at[3];
        if (max)
          for (size_t c = 0; c < C; c++) {
            float v = in_val(x0, c, a, aff), v1 = in_val(x1, c, a, aff);
            float v2 = in_val(x2, c, a, aff), v3 = in_val(x3, c, a, aff);
            v = v1 > v ? v1 : v;
            v = v2 > v ? v2 : v;
            y[c] = v3 > v ? v3 : v;
          }
        else
          for (size_t c = 0; c < C; c++)
            y[c] = (((in_val(x0, c, a, aff) + in_val(x1, c, a, aff)) + in_val(x2, c, a, aff)) +
                    in_val(x3, c, a, aff)) /
                   4.0f;
      }
}

KCPU_VECTORIZE static void pool_fwd_2x2(const kern_win *g, int max, const float *restrict x,
                                        float *restrict y) {
  pool_fwd_2x2_body(g, max, x, NULL, y, 0);
}

KCPU_VECTORIZE static void bn_pool_fwd_2x2(const kern_win *g, int max, const float *restrict x,
                                           const bn_map *a, float *restrict y) {
  pool_fwd_2x2_body(g, max, x, a, y, 1);
}

/* One output row of 2x2 pooling's backward: dy (OW, C) into the two input
 * rows' dx (top d0, bottom d1: 2 OW pixels each) from their x (x0, x1).
 * Max: each channel's dy to the window's first maximum (positions row by
 * row), 0 to the others; mean: a quarter to each. */
KCPU_VECTORIZE static void pool_bwd_2x2_row(int max, int OW, size_t C, const float *restrict x0,
                                            const float *restrict x1, const float *restrict dy,
                                            float *restrict d0, float *restrict d1) {
  for (int ow = 0; ow < OW; ow++, dy += C, x0 += 2 * C, x1 += 2 * C, d0 += 2 * C, d1 += 2 * C)
    if (max)
      for (size_t c = 0; c < C; c++) {
        float top = x0[c], v1 = x0[C + c], v2 = x1[c], v3 = x1[C + c], d = dy[c];
        int k = 0, more = -(v1 > top); /* branch-free, so that it vectorizes */
        k = (k & ~more) | (1 & more);
        top = more ? v1 : top;
        more = -(v2 > top);
        k = (k & ~more) | (2 & more);
        top = more ? v2 : top;
        more = -(v3 > top);
        k = (k & ~more) | (3 & more);
        d0[c] = 0.0f + (k == 0 ? d : 0.0f);
        d0[C + c] = 0.0f + (k == 1 ? d : 0.0f);
        d1[c] = 0.0f + (k == 2 ? d : 0.0f);
        d1[C + c] = 0.0f + (k == 3 ? d : 0.0f);
      }
    else
      for (size_t c = 0; c < C; c++) {
        float d = 0.0f + dy[c] / 4.0f;
        d0[c] = d0[C + c] = d1[c] = d1[C + c] = d;
      }
}

/* n floats of batch normalization's output of x (per channel, C of them a
 * pixel) into t: kcpu_bn_fwd's operations. */
KCPU_VECTORIZE static void bn_row(const bn_map *a, size_t n, size_t C, const float *restrict x,
                                  float *restrict t) {
  for (size_t p = 0; p < n; p += C)
    for (size_t c = 0; c < C; c++)
      t[p + c] = a->g1[c] * ((x[p + c] - a->mean[c]) * a->inv[c]) + a->b1[c];
}

/* 2x2 pooling's backward, an output row at a time; with a, the pooling's
 * input rows are batch normalization's output of x, made a row pair at a
 * time in a->tmp (in cache) rather than read from a whole tensor. */
static void pool_bwd_2x2(const kern_win *g, int max, const float *x, const bn_map *a,
                         const float *dy, float *dx) {
  size_t C = (size_t)g->C, row = (size_t)g->W * C;
  for (int q = 0; q < g->B * g->OH; q++) { /* b * H + 2 oh = 2 q: the image tiles */
    const float *x0 = x + 2 * (size_t)q * row, *x1 = x0 + row;
    if (a) {
      bn_row(a, 2 * row, C, x0, a->tmp);
      x0 = a->tmp, x1 = a->tmp + row;
    }
    pool_bwd_2x2_row(max, g->OW, C, x0, x1, dy + (size_t)q * g->OW * C, dx + 2 * (size_t)q * row,
                     dx + (2 * (size_t)q + 1) * row);
  }
}

int kcpu_bn_pool_ok(kern_t *k, const kern_win *g) {
  (void)k;
  return tiles_2x2(g);
}

/* a's per-channel gamma and beta (1 and 0 where absent) and its row-pair
 * scratch, in one allocation that a.g1 owns. */
static ctrain_err bn_map_of(kern_t *k, const kern_win *g, const float *mean, const float *inv,
                            const float *gamma, const float *beta, bn_map *a) {
  int C = g->C;
  float *gb = malloc((2 * (size_t)(C > 0 ? C : 1) + 2 * (size_t)g->W * C) * sizeof(float));
  if (!gb) {
    snprintf(k->err, sizeof(k->err), "bn_pool: out of memory for %d channels", C);
    return CTRAIN_E_NOMEM;
  }
  for (int c = 0; c < C; c++) {
    gb[c] = gamma ? gamma[c] : 1.0f;
    gb[C + c] = beta ? beta[c] : 0.0f;
  }
  *a = (bn_map){mean, inv, gb, gb + C, gb + 2 * C};
  return CTRAIN_OK;
}

ctrain_err kcpu_bn_pool_fwd(kern_t *k, const kern_win *g, int max, const float *x,
                            const float *mean, const float *inv, const float *gamma,
                            const float *beta, float *y) {
  bn_map a;
  ctrain_err rc = bn_map_of(k, g, mean, inv, gamma, beta, &a);
  if (rc)
    return rc;
  bn_pool_fwd_2x2(g, max, x, &a, y);
  free((void *)a.g1);
  return CTRAIN_OK;
}

ctrain_err kcpu_bn_pool_bwd(kern_t *k, const kern_win *g, int max, const float *x,
                            const float *mean, const float *inv, const float *gamma,
                            const float *beta, const float *dy, float *dx) {
  bn_map a;
  ctrain_err rc = bn_map_of(k, g, mean, inv, gamma, beta, &a);
  if (rc)
    return rc;
  pool_bwd_2x2(g, max, x, &a, dy, dx);
  free((void *)a.g1);
  return CTRAIN_OK;
}

KCPU_VECTORIZE ctrain_err kcpu_pool_fwd(kern_t *k, const kern_win *g, int max, const float *x,
                                        float *y) {
  (void)k;
  if (tiles_2x2(g)) {
    pool_fwd_2x2(g, max, x, y);
    return CTRAIN_OK;
  }
  for (int b = 0; b < g->B; b++)
    for (int oh = 0; oh < g->OH; oh++)
      for (int ow = 0; ow < g->OW; ow++)
        pool_pixel(g, max, x, b, oh, ow, y + (((size_t)b * g->OH + oh) * g->OW + ow) * g->C);
  return CTRAIN_OK;
}

/* dy (C) of one output pixel into dx (added). Max: each channel's dy goes
 * to the window's first maximum, found as the position's number in the
 * window (arg, bestv: (C) scratch), then every window position gets dy or 0
 * by channel, in one pass along memory (adding 0 leaves dx as it was:
 * bitwise the same as adding dy at the maximum alone). Mean: spread evenly. */
static inline __attribute__((always_inline)) void
pool_pixel_bwd(const kern_win *g, int max, int tile, const float *x, const float *dy, int b, int oh,
               int ow, float *dx, int *arg, float *bestv) {
  size_t C = (size_t)g->C;
  int n = 0;
  for (int i = 0; i < g->kh; i++)
    for (int j = 0; j < g->kw; j++) {
      long p = win_pixel(g, b, oh, ow, i, j);
      if (p < 0 || !max)
        continue;
      const float *xp = x + (size_t)p * C;
      for (size_t c = 0; c < C; c++) { /* branch-free, so that it vectorizes */
        float v = xp[c], top = bestv[c];
        int a = arg[c], more = -(n == 0 || v > top);
        arg[c] = (a & ~more) | (n & more);
        bestv[c] = more ? v : top;
      }
      n++;
    }
  if (!max)
    for (int i = 0; i < g->kh; i++)
      for (int j = 0; j < g->kw; j++)
        n += win_pixel(g, b, oh, ow, i, j) >= 0;
  for (int i = 0, q = 0; i < g->kh; i++)
    for (int j = 0; j < g->kw; j++) {
      long p = win_pixel(g, b, oh, ow, i, j);
      if (p < 0)
        continue;
      float *dp = dx + (size_t)p * C;
      if (max && tile) /* 0 + what the zeroed dx plus it would be: the same bits, -0 too */
        for (size_t c = 0; c < C; c++) {
          float d = dy[c];
          int a = arg[c];
          dp[c] = 0.0f + (a == q ? d : 0.0f);
        }
      else if (max)
        for (size_t c = 0; c < C; c++) {
          float d = dy[c];
          int a = arg[c];
          dp[c] += a == q ? d : 0.0f;
        }
      else if (tile)
        for (size_t c = 0; c < C; c++)
          dp[c] = 0.0f + dy[c] / (float)n;
      else
        for (size_t c = 0; c < C; c++)
          dp[c] += dy[c] / (float)n;
      q++;
    }
}

KCPU_VECTORIZE ctrain_err kcpu_pool_bwd(kern_t *k, const kern_win *g, int max, const float *x,
                                        const float *dy, float *dx) {
  if (tiles_2x2(g)) {
    pool_bwd_2x2(g, max, x, NULL, dy, dx);
    return CTRAIN_OK;
  }
  int *arg = calloc((size_t)g->C, sizeof(int));
  float *bestv = calloc((size_t)g->C, sizeof(float));
  if (!arg || !bestv) {
    free(arg);
    free(bestv);
    snprintf(k->err, sizeof(k->err), "pool_bwd: out of memory for %d channels", g->C);
    return CTRAIN_E_NOMEM;
  }
  /* Windows that tile the image (2x2 pooling of an even image) give every
   * pixel of dx once: written, not zeroed and added to. */
  int tile = g->kh == g->sh && g->kw == g->sw && g->pt == 0 && g->pl == 0 &&
             g->OH * g->sh == g->H && g->OW * g->sw == g->W;
  if (!tile)
    memset(dx, 0, (size_t)g->B * g->H * g->W * g->C * sizeof(float));
  for (int b = 0; b < g->B; b++)
    for (int oh = 0; oh < g->OH; oh++)
      for (int ow = 0; ow < g->OW; ow++)
        pool_pixel_bwd(g, max, tile, x, dy + (((size_t)b * g->OH + oh) * g->OW + ow) * g->C, b, oh,
                       ow, dx, arg, bestv);
  free(arg);
  free(bestv);
  return CTRAIN_OK;
}

/* Per-channel double accumulators: C is at most the model's widest layer. */
static double *acc_alloc(kern_t *k, size_t n) {
  double *a = calloc(n ? n : 1, sizeof(double));
  if (!a)
    snprintf(k->err, sizeof(k->err), "calloc(%zu doubles): out of memory", n);
  return a;
}

/* Rows are summed in float within blocks of KCPU_BLOCK rows (along memory,
 * vectorized), the blocks in double. */
#define KCPU_BLOCK 64

KCPU_VECTORIZE ctrain_err kcpu_chan_sums(kern_t *k, const float *x, const float *center, int rows,
                                         int C, float *out) {
  double *acc = acc_alloc(k, (size_t)C);
  float *part = calloc((size_t)C, sizeof(float));
  if (!acc || !part) {
    free(acc);
    free(part);
    snprintf(k->err, sizeof(k->err), "chan_sums: out of memory for %d channels", C);
    return CTRAIN_E_NOMEM;
  }
  for (int r0 = 0; r0 < rows; r0 += KCPU_BLOCK) {
    int r1 = rows - r0 < KCPU_BLOCK ? rows : r0 + KCPU_BLOCK;
    memset(part, 0, (size_t)C * sizeof(float));
    for (int r = r0; r < r1; r++) {
      const float *xr = x + (size_t)r * C;
      if (center)
        for (int c = 0; c < C; c++)
          part[c] += (xr[c] - center[c]) * (xr[c] - center[c]);
      else
        for (int c = 0; c < C; c++)
          part[c] += xr[c];
    }
    for (int c = 0; c < C; c++)
      acc[c] += part[c];
  }
  for (int c = 0; c < C; c++)
    out[c] = (float)acc[c];
  free(acc);
  free(part);
  return CTRAIN_OK;
}

KCPU_VECTORIZE ctrain_err kcpu_bn_fwd(kern_t *k, const float *x, int rows, int C, const float *mean,
                                      const float *inv, const float *gamma, const float *beta,
                                      float *y) {
  (void)k;
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C;
    float *yr = y + (size_t)r * C;
    for (int c = 0; c < C; c++)
      yr[c] = (gamma ? gamma[c] : 1.0f) * ((xr[c] - mean[c]) * inv[c]) + (beta ? beta[c] : 0.0f);
  }
  return CTRAIN_OK;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KCPU_BN512 1
/* bn_bwd_sums for C = 16 NV channels (NV <= 4) with every accumulator in a
 * register (the loop below keeps them in memory, a load and a store per
 * element): the same operations on each element in the same order, so the
 * same doubles; AVX-512, without contraction. */
__attribute__((target("avx512f")))
KERN_OPTIMIZE("fp-contract=off") static void bn_bwd_sums_512(const float *x, const float *dy,
                                                             int rows, int NV, const float *mean,
                                                             const float *inv, double *acc) {
  __m512d s[4][2], t[4][2];
  __m512 mv[4], iv[4];
  size_t C = 16 * (size_t)NV;
  for (int v = 0; v < NV; v++) {
    mv[v] = _mm512_loadu_ps(mean + 16 * v);
    iv[v] = _mm512_loadu_ps(inv + 16 * v);
    s[v][0] = s[v][1] = t[v][0] = t[v][1] = _mm512_setzero_pd();
  }
  for (int r = 0; r < rows; r++)
    for (int v = 0; v < NV; v++) {
      __m512 d = _mm512_loadu_ps(dy + r * C + 16 * v), xx = _mm512_loadu_ps(x + r * C + 16 * v);
      __m512 xhat = _mm512_mul_ps(_mm512_sub_ps(xx, mv[v]), iv[v]);
      __m512d dlo = _mm512_cvtps_pd(_mm512_castps512_ps256(d));
      __m512d dhi =
          _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)));
      __m512d hlo = _mm512_cvtps_pd(_mm512_castps512_ps256(xhat));
      __m512d hhi =
          _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(xhat), 1)));
      s[v][0] = _mm512_add_pd(s[v][0], dlo);
      s[v][1] = _mm512_add_pd(s[v][1], dhi);
      t[v][0] = _mm512_add_pd(t[v][0], _mm512_mul_pd(dlo, hlo));
      t[v][1] = _mm512_add_pd(t[v][1], _mm512_mul_pd(dhi, hhi));
    }
  for (int v = 0; v < NV; v++) {
    _mm512_storeu_pd(acc + 16 * v, s[v][0]);
    _mm512_storeu_pd(acc + 16 * v + 8, s[v][1]);
    _mm512_storeu_pd(acc + C + 16 * v, t[v][0]);
    _mm512_storeu_pd(acc + C + 16 * v + 8, t[v][1]);
  }
}
#else
#define KCPU_BN512 0
#endif

KCPU_VECTORIZE ctrain_err kcpu_bn_bwd_sums(kern_t *k, const float *x, const float *dy, int rows,
                                           int C, const float *mean, const float *inv, float *out) {
  double *acc = acc_alloc(k, 2 * (size_t)C);
  if (!acc)
    return CTRAIN_E_NOMEM;
#if KCPU_BN512
  if (C % 16 == 0 && C > 0 && C <= 64 && kern_cpu_vector_level() >= 3) {
    bn_bwd_sums_512(x, dy, rows, C / 16, mean, inv, acc);
    rows = 0; /* done: the loop below only rounds to float */
  }
#endif
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C, *dr = dy + (size_t)r * C;
    for (int c = 0; c < C; c++) {
      acc[c] += dr[c];
      acc[C + c] += (double)dr[c] * ((xr[c] - mean[c]) * inv[c]);
    }
  }
  for (int c = 0; c < 2 * C; c++)
    out[c] = (float)acc[c];
  free(acc);
  return CTRAIN_OK;
}

/* The per-channel factors gamma * inv and sums / n are worked out once, not
 * per row: the same operations, so the same values as the row loop had. */
KCPU_VECTORIZE ctrain_err kcpu_bn_bwd(kern_t *k, const float *x, const float *dy, int rows, int C,
                                      const float *mean, const float *inv, const float *gamma,
                                      const float *sums, float n, float *dx) {
  float *scale = malloc(2 * (size_t)(C > 0 ? C : 1) * sizeof(float)), *m0 = scale + C;
  if (!scale) {
    snprintf(k->err, sizeof(k->err), "bn_bwd: out of memory for %d channels", C);
    return CTRAIN_E_NOMEM;
  }
  for (int c = 0; c < C; c++) {
    scale[c] = (gamma ? gamma[c] : 1.0f) * inv[c];
    m0[c] = sums[c] / n;
  }
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * C, *dr = dy + (size_t)r * C;
    float *o = dx + (size_t)r * C;
    for (int c = 0; c < C; c++) {
      float xhat = (xr[c] - mean[c]) * inv[c];
      o[c] = scale[c] * (dr[c] - m0[c] - xhat * sums[C + c] / n);
    }
  }
  free(scale);
  return CTRAIN_OK;
}
