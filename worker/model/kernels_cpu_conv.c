/* kernels_cpu_conv.c - Conv2D on the CPU without im2col (kernels.h's
 * conv_direct, conv_fwd, conv_dw, conv_dx), in AVX-512 register tiles.
 *
 * im2col + sgemm writes every patch out (9x the input for a 3x3 kernel) and
 * OpenBLAS packs both operands again before its kernel runs; at the small
 * channel counts of the layers people train on a CPU that traffic took
 * about as long as the arithmetic. Here the patches are never written: the
 * input is copied once into a zero-padded image (so no tile tests bounds),
 * and each tile of outputs keeps its sums in vector registers while it walks
 * the window straight out of that image.
 *
 *   forward  a tile is P output pixels of one image row x up to 64 filters
 *            (P * NV <= 28 accumulators, NV = 16-float vectors): for every
 *            window position and input channel, NV weight vectors and P
 *            broadcasts of the input feed P * NV fused multiply-adds;
 *   dx       (stride 1) the forward of dy padded by (kernel - 1 - padding)
 *            with the kernel turned by 180 degrees and its channel axes
 *            swapped;
 *   dw       a tile is R rows of the kernel (window position x input channel)
 *            x up to 64 filters, summed over every output pixel of the batch
 *            in order, a block of pixels at a time so that dy's block stays
 *            in L1 for all the tiles.
 *
 * Each output element is one chain of fused multiply-adds in a fixed order
 * (bias first, then window row, column, channel; dw: pixel by pixel), so the
 * results are deterministic and do not depend on the blocking; they are not
 * the bits of im2col + OpenBLAS (a different order of summation), which the
 * tests compare within a tolerance (tests/unit/test_kernels_cnn.c). Built
 * for x86-64 with GCC or clang and run when the CPU and OS have AVX-512;
 * elsewhere kcpu_conv_direct says no and Conv2D takes im2col + GEMM. */
#include "worker/model/kernels_cpu_cnn.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KCONV_HAVE 1
#else
#define KCONV_HAVE 0
#endif

/* Scratch for the padded copies, kept by the backend between calls (one
 * per kern_t: replicas' threads each have their own). */
typedef struct {
  float *buf;
  size_t cap; /* floats */
} conv_scratch;

static float *scratch(kern_t *k, size_t floats) {
  conv_scratch *s = k->impl;
  if (!s && !(s = k->impl = calloc(1, sizeof(*s))))
    goto nomem;
  if (s->cap < floats) {
    free(s->buf);
    s->cap = 0;
    if (!(s->buf = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64)))
      goto nomem;
    s->cap = floats;
  }
  return s->buf;
nomem:
  snprintf(k->err, sizeof(k->err), "conv: out of memory for %zu floats of scratch", floats);
  return NULL;
}

void kcpu_conv_free(kern_t *k) {
  conv_scratch *s = k->impl;
  if (s)
    free(s->buf);
  free(s);
  k->impl = NULL;
}

/* xp (B, Hp, Wp, C) = x (B, H, W, C) with its pixel (0, 0) at (top, left),
 * 0 around it; what of x falls outside xp is dropped. */
static void pad_copy(const float *x, int B, int H, int W, int C, int top, int left, int Hp, int Wp,
                     float *xp) {
  size_t rowp = (size_t)Wp * C;
  int q0 = left > 0 ? left : 0, q1 = left + W < Wp ? left + W : Wp;
  if (q1 < q0)
    q1 = q0;
  for (int b = 0; b < B; b++)
    for (int r = 0; r < Hp; r++) {
      float *dst = xp + ((size_t)b * Hp + r) * rowp;
      int ih = r - top;
      if (ih < 0 || ih >= H) {
        memset(dst, 0, rowp * sizeof(float));
        continue;
      }
      memset(dst, 0, (size_t)q0 * C * sizeof(float));
      memcpy(dst + (size_t)q0 * C, x + (((size_t)b * H + ih) * W + (q0 - left)) * C,
             (size_t)(q1 - q0) * C * sizeof(float));
      memset(dst + (size_t)q1 * C, 0, (size_t)(Wp - q1) * C * sizeof(float));
    }
}

int kcpu_conv_direct(kern_t *k, const kern_win *g, int F) {
  (void)k;
  return KCONV_HAVE && F > 0 && g->sh == 1 && g->sw == 1 && g->pt >= 0 && g->pt < g->kh &&
         g->pl >= 0 && g->pl < g->kw && kern_cpu_vector_level() >= 3;
}

#if KCONV_HAVE

#define KCONV_AVX512  __attribute__((target("avx512f")))
#define KCONV_INLINE  static inline __attribute__((always_inline)) KCONV_AVX512
#define KCONV_MAX_ACC 24
/* What a tile's working set may take of a core's L1 data cache (48 KB on
 * recent Intel cores, 32 KB on older ones and on AMD's). */
#define KCONV_L1_BYTES (28u * 1024)

/* A forward over a padded image: y (B, OH, OW, F) = bias + x (*) w. */
typedef struct {
  const float *x; /* (B, Hp, Wp, C), padded */
  int Hp, Wp, C, kh, kw;
  const float *w;    /* (kh, kw, C, F) */
  const float *bias; /* (F) or NULL */
  int F;
  int relu; /* y = max(y, 0) as it is stored: act_fwd's ReLU, the same floats */
  float *y;
  int B, OH, OW;
} fwd_job;

/* Tile widths: the most pixels (forward) or kernel rows (dw) a tile of NV
 * vectors of filters holds in its accumulators: KCONV_MAX_ACC, or 28 for
 * two vectors (a 14-pixel row in one tile; 28 + 2 weights + 1 broadcast
 * fill the 32 registers without a spill). */
static int tile_max(int nv) {
  return nv == 1 ? 12 : nv == 2 ? 14 : KCONV_MAX_ACC / nv;
}

KCONV_INLINE __m512 load_v(const float *p, int last, __mmask16 m) {
  return last ? _mm512_maskz_loadu_ps(m, p) : _mm512_loadu_ps(p);
}

KCONV_INLINE void store_v(float *p, __m512 v, int last, __mmask16 m) {
  if (last)
    _mm512_mask_storeu_ps(p, m, v);
  else
    _mm512_storeu_ps(p, v);
}

/* v = NV vectors from p (the last one masked by m). */
KCONV_INLINE void load_row(__m512 v[4], const float *p, __mmask16 m, const int NV) {
#pragma GCC unroll 4
  for (int i = 0; i < NV; i++)
    v[i] = load_v(p + 16 * i, i == NV - 1, m);
}

/* acc += a * v, NV vectors: a tile row's share of one rank-1 update. */
KCONV_INLINE void fma_row(__m512 acc[4], __m512 a, const __m512 v[4], const int NV) {
#pragma GCC unroll 4
  for (int i = 0; i < NV; i++)
    acc[i] = _mm512_fmadd_ps(a, v[i], acc[i]);
}

/* P pixels of one output row from x0 (the first one's window origin in the
 * padded image) into y0, filters f0 .. f0 + 16 NV (the last vector masked
 * by m). */
KCONV_INLINE void fwd_tile(const fwd_job *j, const float *x0, int f0, __mmask16 m, float *y0,
                           int i0, int i1, const int P, const int NV) {
  __m512 acc[14][4];
  const int C = j->C, F = j->F;
#pragma GCC unroll 4
  for (int v = 0; v < NV; v++) {
    __m512 b = j->bias ? load_v(j->bias + f0 + 16 * v, v == NV - 1, m) : _mm512_setzero_ps();
#pragma GCC unroll 14
    for (int p = 0; p < P; p++) /* window rows from i0 > 0 add onto the sums so far */
      acc[p][v] = i0 ? load_v(y0 + (size_t)p * F + 16 * v, v == NV - 1, m) : b;
  }
  for (int i = i0; i < i1; i++)
    for (int jj = 0; jj < j->kw; jj++) {
      const float *xr = x0 + ((size_t)i * j->Wp + jj) * C;
      const float *wr = j->w + (size_t)(i * j->kw + jj) * C * F + f0;
      for (int c = 0; c < C; c++, wr += F) {
        __m512 wv[4];
        load_row(wv, wr, m, NV);
#pragma GCC unroll 14
        for (int p = 0; p < P; p++)
          fma_row(acc[p], _mm512_set1_ps(xr[(size_t)p * C + c]), wv, NV);
      }
    }
  const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 14
  for (int p = 0; p < P; p++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++) /* max(a, 0) is a > 0 ? a : 0, NaN and -0 included */
      store_v(y0 + (size_t)p * F + 16 * v,
              j->relu && i1 == j->kh ? _mm512_max_ps(acc[p][v], zero) : acc[p][v], v == NV - 1, m);
}

/* dw rows r0 .. r0 + R (off: each row's offset from a pixel's window origin
 * in the padded image), filters f0 .. f0 + 16 NV, summed over the output
 * pixels of rows [q0, q1) of the batch (row q: image q / OH, row q % OH),
 * onto what dw holds unless first. */
typedef struct {
  const float *x; /* (B, Hp, Wp, C), padded */
  int Hp, Wp, C;
  const int *off;  /* (kh * kw * C) */
  const float *dy; /* (B, OH, OW, F) */
  int F;
  float *dw;           /* (kh * kw * C, F) */
  int rows, OH, OW, K; /* rows: B * OH */
  int tiles;           /* of rows x filters, over every filter group */
} dw_job;

KCONV_INLINE void dw_tile(const dw_job *j, int r0, int f0, __mmask16 m, int q0, int q1, int first,
                          const int R, const int NV) {
  __m512 acc[14][4];
  const int F = j->F, C = j->C;
  float *d0 = j->dw + (size_t)r0 * F + f0;
  int off[14];
#pragma GCC unroll 14
  for (int r = 0; r < R; r++) {
    off[r] = j->off[r0 + r];
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      acc[r][v] = first ? _mm512_setzero_ps() : load_v(d0 + (size_t)r * F + 16 * v, v == NV - 1, m);
  }
  for (int q = q0; q < q1; q++) {
    const float *xrow = j->x + ((size_t)(q / j->OH) * j->Hp + q % j->OH) * j->Wp * C;
    const float *g = j->dy + (size_t)q * j->OW * F + f0;
    for (int ow = 0; ow < j->OW; ow++, xrow += C, g += F) {
      __m512 gv[4];
      load_row(gv, g, m, NV);
#pragma GCC unroll 14
      for (int r = 0; r < R; r++)
        fma_row(acc[r], _mm512_set1_ps(xrow[off[r]]), gv, NV);
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; r++)
#pragma GCC unroll 4
    for (int v = 0; v < NV; v++)
      store_v(d0 + (size_t)r * F + 16 * v, acc[r][v], v == NV - 1, m);
}

/* One function per tile shape, so that each keeps its accumulators in
 * registers: fwd_fn[NV - 1][P], dw_fn[NV - 1][R]. */
typedef void (*fwd_fn_t)(const fwd_job *, const float *, int, __mmask16, float *, int, int);
typedef void (*dw_fn_t)(const dw_job *, int, int, __mmask16, int, int, int);

#define KCONV_SHAPE(T, NV)                                                                         \
  KCONV_AVX512 static void fwd_##T##_##NV(const fwd_job *j, const float *x0, int f0, __mmask16 m,  \
                                          float *y0, int i0, int i1) {                             \
    fwd_tile(j, x0, f0, m, y0, i0, i1, T, NV);                                                     \
  }                                                                                                \
  KCONV_AVX512 static void dw_##T##_##NV(const dw_job *j, int r0, int f0, __mmask16 m, int q0,     \
                                         int q1, int first) {                                      \
    dw_tile(j, r0, f0, m, q0, q1, first, T, NV);                                                   \
  }
#define KCONV_SHAPES_6(NV)                                                                         \
  KCONV_SHAPE(1, NV)                                                                               \
  KCONV_SHAPE(2, NV) KCONV_SHAPE(3, NV) KCONV_SHAPE(4, NV) KCONV_SHAPE(5, NV) KCONV_SHAPE(6, NV)
#define KCONV_SHAPES_12(NV)                                                                        \
  KCONV_SHAPES_6(NV)                                                                               \
  KCONV_SHAPE(7, NV)                                                                               \
  KCONV_SHAPE(8, NV) KCONV_SHAPE(9, NV) KCONV_SHAPE(10, NV) KCONV_SHAPE(11, NV) KCONV_SHAPE(12, NV)
KCONV_SHAPES_12(1)
KCONV_SHAPES_12(2)
KCONV_SHAPE(13, 2)
KCONV_SHAPE(14, 2)
KCONV_SHAPES_6(3)
KCONV_SHAPE(7, 3)
KCONV_SHAPE(8, 3)
KCONV_SHAPES_6(4)

#define KCONV_ROW6(X, NV) X##_1_##NV, X##_2_##NV, X##_3_##NV, X##_4_##NV, X##_5_##NV, X##_6_##NV
#define KCONV_ROW12(X, NV)                                                                         \
  KCONV_ROW6(X, NV), X##_7_##NV, X##_8_##NV, X##_9_##NV, X##_10_##NV, X##_11_##NV, X##_12_##NV
static const fwd_fn_t fwd_fn[4][15] = {
    {NULL, KCONV_ROW12(fwd, 1)},
    {NULL, KCONV_ROW12(fwd, 2), fwd_13_2, fwd_14_2},
    {NULL, KCONV_ROW6(fwd, 3), fwd_7_3, fwd_8_3},
    {NULL, KCONV_ROW6(fwd, 4)},
};
static const dw_fn_t dw_fn[4][15] = {
    {NULL, KCONV_ROW12(dw, 1)},
    {NULL, KCONV_ROW12(dw, 2), dw_13_2, dw_14_2},
    {NULL, KCONV_ROW6(dw, 3), dw_7_3, dw_8_3},
    {NULL, KCONV_ROW6(dw, 4)},
};

/* Filters in groups of up to 64 (4 vectors); nv and the last vector's mask
 * of the group from f0. */
static int filter_group(int F, int f0, __mmask16 *m) {
  int nf = F - f0 < 64 ? F - f0 : 64;
  *m = (__mmask16)(nf % 16 ? (1u << (nf % 16)) - 1 : 0xFFFFu);
  return (nf + 15) / 16;
}

/* The forward's output rows (b, oh) [t * rows / n, (t + 1) * rows / n):
 * thread t of n. */
/* part(ctx, t, n) for t in [0, n) on n threads (the caller's is t = 0),
 * n = the GEMM thread budget (kern_cpu_blas_threads_now) but at most
 * `items`. Each part writes outputs of its own, each output summed in the
 * same order whatever n is, so the results do not depend on n. */
typedef void (*part_fn)(void *ctx, int t, int n);
typedef struct {
  part_fn fn;
  void *ctx;
  int t, n;
} part_arg;

static void *part_main(void *p) {
  part_arg *a = p;
  a->fn(a->ctx, a->t, a->n);
  return NULL;
}

#define KCONV_MAX_THREADS 64

static ctrain_err run_parts(kern_t *k, part_fn fn, void *ctx, int items) {
  int n = kern_cpu_blas_threads_now();
  n = n > items ? items : n;
  n = n > KCONV_MAX_THREADS ? KCONV_MAX_THREADS : n < 1 ? 1 : n;
  pthread_t th[KCONV_MAX_THREADS];
  part_arg args[KCONV_MAX_THREADS];
  int started = 1, rc = 0;
  for (; started < n; started++) {
    args[started] = (part_arg){fn, ctx, started, n};
    if ((rc = pthread_create(&th[started], NULL, part_main, &args[started])) != 0)
      break;
  }
  if (started == n)
    fn(ctx, 0, n);
  for (int t = 1; t < started; t++)
    pthread_join(th[t], NULL);
  if (started < n) { /* nothing of this call is trusted: the caller stops */
    snprintf(k->err, sizeof(k->err), "conv: pthread_create: %s", strerror(rc));
    return CTRAIN_E_NOMEM;
  }
  return CTRAIN_OK;
}

static void fwd_part(void *ctx, int t, int n) {
  const fwd_job *j = ctx;
  int rows = j->B * j->OH, q0 = (int)((long)rows * t / n), q1 = (int)((long)rows * (t + 1) / n);
  for (int f0 = 0; f0 < j->F; f0 += 64) {
    __mmask16 m;
    int nv = filter_group(j->F, f0, &m), pm = tile_max(nv);
    /* a row in tiles of even width: 14 pixels as 5 + 5 + 4, not 6 + 6 + 2 */
    int tiles = (j->OW + pm - 1) / pm;
    /* When the group's kernel (kh * kw * C * 64 floats: 72 KB for 3x3x32)
     * outgrows L1, the rows go a block at a time, one window row of the
     * kernel after the other over the block, so that the window row's part
     * (kw * C * 64 floats) is read from L1 by every tile of the block; the
     * sums stay in y between window rows, each output summed in the same
     * order as in one pass. */
    size_t wbytes = (size_t)j->kw * j->C * 16 * nv * sizeof(float);
    size_t rowbytes = ((size_t)j->OW * 16 * nv + (size_t)j->Wp * j->C) * sizeof(float);
    int split = wbytes * j->kh > KCONV_L1_BYTES;
    int rb = split && KCONV_L1_BYTES > wbytes ? (int)((KCONV_L1_BYTES - wbytes) / rowbytes) : 1;
    rb = rb < 1 ? 1 : rb;
    for (int qb = q0; qb < q1; qb += rb) {
      int qe = q1 - qb < rb ? q1 : qb + rb;
      for (int i0 = 0; i0 < j->kh; i0 += split ? 1 : j->kh)
        for (int q = qb; q < qe; q++) {
          int b = q / j->OH, oh = q % j->OH;
          const float *xrow = j->x + ((size_t)b * j->Hp + oh) * j->Wp * j->C;
          float *yrow = j->y + (size_t)q * j->OW * j->F;
          for (int i = 0, ow0 = 0; i < tiles; i++) {
            int P = (j->OW - ow0 + (tiles - i) - 1) / (tiles - i);
            fwd_fn[nv - 1][P](j, xrow + (size_t)ow0 * j->C, f0, m, yrow + (size_t)ow0 * j->F + f0,
                              i0, split ? i0 + 1 : j->kh);
            ow0 += P;
          }
        }
    }
  }
}

ctrain_err kcpu_conv_fwd(kern_t *k, const kern_win *g, const float *x, const float *w,
                         const float *bias, int F, int relu, float *y) {
  int Hp = g->OH - 1 + g->kh, Wp = g->OW - 1 + g->kw;
  float *xp = scratch(k, (size_t)g->B * Hp * Wp * g->C);
  if (!xp)
    return CTRAIN_E_NOMEM;
  pad_copy(x, g->B, g->H, g->W, g->C, g->pt, g->pl, Hp, Wp, xp);
  fwd_job j = {xp, Hp, Wp, g->C, g->kh, g->kw, w, bias, F, relu, y, g->B, g->OH, g->OW};
  return run_parts(k, fwd_part, &j, g->B * g->OH);
}

/* Output pixels of dy a dw block sums before the next tile of rows: dy's
 * block (64 filters: 32 KB) stays in L1 across the tiles. */
#define KCONV_DW_PIXELS 128

/* dw's tiles (filter group by filter group, rows by rows)
 * [t * tiles / n, (t + 1) * tiles / n): thread t of n. Every tile sums over
 * every pixel of the batch, a block of rows at a time. */
static void dw_part(void *ctx, int t, int n) {
  const dw_job *j = ctx;
  int t0 = (int)((long)j->tiles * t / n), t1 = (int)((long)j->tiles * (t + 1) / n);
  int per = KCONV_DW_PIXELS / j->OW;
  per = per < 1 ? 1 : per;
  for (int q0 = 0; q0 < j->rows; q0 += per) {
    int q1 = j->rows - q0 < per ? j->rows : q0 + per, at = 0;
    for (int f0 = 0; f0 < j->F; f0 += 64) {
      __mmask16 m;
      int nv = filter_group(j->F, f0, &m), rm = tile_max(nv);
      for (int r0 = 0; r0 < j->K; r0 += rm, at++) {
        if (at < t0 || at >= t1)
          continue;
        int R = j->K - r0 < rm ? j->K - r0 : rm;
        dw_fn[nv - 1][R](j, r0, f0, m, q0, q1, q0 == 0);
      }
    }
  }
}

ctrain_err kcpu_conv_dx(kern_t *k, const kern_win *g, const float *dy, const float *w, int F,
                        float *dx) {
  int C = g->C, kh = g->kh, kw = g->kw, Hp = g->H + kh - 1, Wp = g->W + kw - 1;
  size_t n_pad = (size_t)g->B * Hp * Wp * F, n_w = (size_t)kh * kw * C * F;
  float *gp = scratch(k, n_pad + n_w), *wr = gp ? gp + n_pad : NULL;
  if (!gp)
    return CTRAIN_E_NOMEM;
  pad_copy(dy, g->B, g->OH, g->OW, F, kh - 1 - g->pt, kw - 1 - g->pl, Hp, Wp, gp);
  /* wr (kh, kw, F, C) = w (kh, kw, C, F) turned by 180 degrees, channels
   * swapped */
  for (int i = 0; i < kh; i++)
    for (int jj = 0; jj < kw; jj++) {
      const float *src = w + (size_t)((kh - 1 - i) * kw + (kw - 1 - jj)) * C * F;
      float *dst = wr + (size_t)(i * kw + jj) * F * C;
      for (int f = 0; f < F; f++)
        for (int c = 0; c < C; c++)
          dst[(size_t)f * C + c] = src[(size_t)c * F + f];
    }
  fwd_job j = {gp, Hp, Wp, F, kh, kw, wr, NULL, C, 0, dx, g->B, g->H, g->W};
  return run_parts(k, fwd_part, &j, g->B * g->H);
}

ctrain_err kcpu_conv_dw(kern_t *k, const kern_win *g, const float *x, const float *dy, int F,
                        float *dw) {
  int C = g->C, K = g->kh * g->kw * C, Hp = g->OH - 1 + g->kh, Wp = g->OW - 1 + g->kw;
  size_t n_pad = (size_t)g->B * Hp * Wp * C;
  float *xp = scratch(k, n_pad + (size_t)K);
  if (!xp)
    return CTRAIN_E_NOMEM;
  int *off = (int *)(xp + n_pad);
  for (int i = 0, r = 0; i < g->kh; i++)
    for (int jj = 0; jj < g->kw; jj++)
      for (int c = 0; c < C; c++)
        off[r++] = (i * Wp + jj) * C + c;
  pad_copy(x, g->B, g->H, g->W, C, g->pt, g->pl, Hp, Wp, xp);
  dw_job j = {xp, Hp, Wp, C, off, dy, F, dw, g->B * g->OH, g->OH, g->OW, K, 0};
  for (int f0 = 0; f0 < F; f0 += 64) {
    __mmask16 m;
    int rm = tile_max(filter_group(F, f0, &m));
    j.tiles += (K + rm - 1) / rm;
  }
  return run_parts(k, dw_part, &j, j.tiles);
}

#else /* !KCONV_HAVE: kcpu_conv_direct says no, so these are not called */

static ctrain_err no_direct(kern_t *k) {
  snprintf(k->err, sizeof(k->err), "conv: no direct convolution in this build");
  return CTRAIN_E_UNSUPPORTED;
}

ctrain_err kcpu_conv_fwd(kern_t *k, const kern_win *g, const float *x, const float *w,
                         const float *bias, int F, int relu, float *y) {
  (void)g, (void)x, (void)w, (void)bias, (void)F, (void)y;
  return no_direct(k);
}

ctrain_err kcpu_conv_dx(kern_t *k, const kern_win *g, const float *dy, const float *w, int F,
                        float *dx) {
  (void)g, (void)dy, (void)w, (void)F, (void)dx;
  return no_direct(k);
}

ctrain_err kcpu_conv_dw(kern_t *k, const kern_win *g, const float *x, const float *dy, int F,
                        float *dw) {
  (void)g, (void)x, (void)dy, (void)F, (void)dw;
  return no_direct(k);
}

#endif
