/* test_conv_direct.c - the CPU backend's direct convolution (kernels.h's
 * conv_fwd, conv_dw, conv_dx: kernels_cpu_conv.c) against the patches path
 * it replaces (im2col, OpenBLAS's GEMM, col2im) on the same backend, for
 * windows that reach every tile shape and edge: 1 to 70 filters (a masked
 * last vector, more than one group of 64), 1 to 35 input channels, 1x1 to
 * 5x5 kernels, 'same' and 'valid', rows of 1 to 29 pixels, the two layers of
 * examples/fashion-mnist-cnn.yaml; and that the model's gradients are the
 * same either way within float rounding. Skipped on a CPU without AVX-512
 * (where Conv2D takes the patches path only). */
#include "test.h"

#include <math.h>
#include <string.h>

#include "worker/model/dmodel_internal.h"
#include "worker/model/kernels.h"

#include "test_cpu_model.h"

typedef struct {
  int B, H, W, C, F, kh, kw, same;
} conv_shape;

static kern_win window(const conv_shape *s) {
  kern_win g = {s->B, s->H, s->W, s->C, s->kh, s->kw, 1, 1, 0, 0, 0, 0};
  if (s->same) { /* TensorFlow's: the extra row or column of padding below/right */
    g.pt = (s->kh - 1) / 2;
    g.pl = (s->kw - 1) / 2;
    g.OH = s->H;
    g.OW = s->W;
  } else {
    g.OH = s->H - s->kh + 1;
    g.OW = s->W - s->kw + 1;
  }
  return g;
}

static float *randoms(size_t n, uint64_t seed) {
  rng_t r;
  rng_seed(&r, seed, 0);
  float *v = malloc((n ? n : 1) * sizeof(float));
  ASSERT(v);
  for (size_t i = 0; i < n; i++)
    v[i] = rng_uniform(&r) * 2 - 1;
  return v;
}

/* got against want, element by element, within a few float roundings of
 * sums of `terms` products of values in [-1, 1]. */
static void near(const char *what, const conv_shape *s, const float *got, const float *want,
                 size_t n, int terms) {
  double tol = 4e-7 * terms + 1e-6;
  for (size_t i = 0; i < n; i++)
    if (!(fabs((double)got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
      TEST_FAIL_("%s [B%d %dx%dx%d F%d k%dx%d %s] [%zu]: direct %.9g, patches %.9g", what, s->B,
                 s->H, s->W, s->C, s->F, s->kh, s->kw, s->same ? "same" : "valid", i, got[i],
                 want[i]);
}

static void check_shape(kern_t *k, const conv_shape *s) {
  const kern_ops *o = k->ops;
  kern_win g = window(s);
  int K = s->kh * s->kw * s->C, M = g.B * g.OH * g.OW;
  size_t nx = (size_t)s->B * s->H * s->W * s->C, ny = (size_t)M * s->F, nw = (size_t)K * s->F;
  float *x = randoms(nx, 1), *w = randoms(nw, 2), *bias = randoms((size_t)s->F, 3);
  float *dy = randoms(ny, 4), *col = calloc((size_t)M * K + 1, sizeof(float));
  float *y = calloc(ny + 1, sizeof(float)), *y_ref = calloc(ny + 1, sizeof(float));
  float *dw = calloc(nw, sizeof(float)), *dw_ref = calloc(nw, sizeof(float));
  float *dx = calloc(nx, sizeof(float)), *dx_ref = calloc(nx, sizeof(float));
  ASSERT(col && y && y_ref && dw && dw_ref && dx && dx_ref);
  ASSERT(o->conv_direct(k, &g, s->F));
  /* the patches path, as dmodel_cnn.c runs it */
  ASSERT_OK(o->im2col(k, &g, x, col));
  ASSERT_OK(o->bias_fill(k, y_ref, bias, M, s->F));
  ASSERT_OK(o->gemm(k, 0, 0, M, s->F, K, 1.0f, col, K, w, s->F, 1.0f, y_ref, s->F));
  ASSERT_OK(o->gemm(k, 1, 0, K, s->F, M, 1.0f, col, K, dy, s->F, 0.0f, dw_ref, s->F));
  ASSERT_OK(o->gemm(k, 0, 1, M, K, s->F, 1.0f, dy, s->F, w, s->F, 0.0f, col, K));
  ASSERT_OK(o->col2im(k, &g, col, dx_ref));
  /* the direct path, onto buffers that hold garbage (each op overwrites) */
  memset(dw, 0x7f, nw * sizeof(float));
  memset(dx, 0x7f, nx * sizeof(float));
  y[ny] = 12345.0f; /* a sentinel past the end: a masked store must not reach it */
  ASSERT_OK(o->conv_fwd(k, &g, x, w, bias, s->F, 0, y));
  ASSERT_OK(o->conv_dw(k, &g, x, dy, s->F, dw));
  ASSERT_OK(o->conv_dx(k, &g, dy, w, s->F, dx));
  ASSERT(y[ny] == 12345.0f);
  near("forward", s, y, y_ref, ny, K + 1);
  /* ReLU as it is stored: act_fwd's floats, -0 and all */
  float *yr = calloc(ny + 1, sizeof(float));
  ASSERT(yr);
  ASSERT_OK(o->conv_fwd(k, &g, x, w, bias, s->F, 1, yr));
  ASSERT_OK(o->act_fwd(k, MODEL_RELU, y, ny));
  ASSERT(memcmp(y, yr, ny * sizeof(float)) == 0);
  free(yr);
  ASSERT_OK(o->conv_fwd(k, &g, x, w, bias, s->F, 0, y));
  near("dw", s, dw, dw_ref, nw, M);
  near("dx", s, dx, dx_ref, nx, s->kh * s->kw * s->F);
  /* without a bias: 0 where the bias was */
  ASSERT_OK(o->conv_fwd(k, &g, x, w, NULL, s->F, 0, y));
  for (size_t i = 0; i < ny; i++)
    y_ref[i] -= bias[i % (size_t)s->F];
  near("forward without bias", s, y, y_ref, ny, K + 2);
  free(x), free(w), free(bias), free(dy), free(col), free(y), free(y_ref);
  free(dw), free(dw_ref), free(dx), free(dx_ref);
}

static kern_t *direct_backend(void) {
  kern_t *k = NULL;
  kern_cpu_blas_threads(1); /* the direct path is the one-thread path */
  ASSERT_OK(kern_cpu_create(&k));
  kern_win g = {1, 3, 3, 1, 3, 3, 1, 1, 1, 1, 3, 3};
  if (!k->ops->conv_direct || !k->ops->conv_direct(k, &g, 1)) {
    kern_free(k);
    TEST_SKIP("no direct convolution on this CPU (it needs AVX-512): Conv2D takes im2col + GEMM");
  }
  return k;
}

TEST(matches_the_patches_path) {
  kern_t *k = direct_backend();
  static const conv_shape shapes[] = {
      {2, 28, 28, 1, 32, 3, 3, 1},  /* the example's first layer */
      {2, 14, 14, 32, 64, 3, 3, 1}, /* and its second */
      {1, 5, 7, 3, 1, 3, 3, 1},     /* one filter: one masked vector */
      {3, 6, 29, 2, 17, 3, 3, 1},   /* 16 + 1 filters; a 29-pixel row: tiles of 10, 10, 9 */
      {1, 9, 13, 5, 48, 2, 3, 0},   /* three vectors, valid, an uneven kernel */
      {2, 8, 8, 35, 70, 3, 3, 1},   /* two groups of filters (64 + 6) */
      {1, 4, 1, 4, 16, 1, 1, 0},    /* 1x1 kernel, rows of one pixel */
      {2, 7, 9, 3, 20, 5, 5, 1},    /* 5x5 same: two rows and columns of padding */
      {1, 6, 6, 1, 130, 5, 5, 0},   /* three groups; valid 5x5 leaves 2x2 */
      {1, 12, 26, 8, 64, 3, 3, 0},  /* 24-pixel rows in tiles of 6 */
  };
  for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
    check_shape(k, &shapes[i]);
  kern_free(k);
}

/* The ops split their outputs over the GEMM thread budget; each output is
 * summed in the same order on any number of threads: the same bits on two
 * threads (where the machine has them) as on one. */
TEST(threads_change_nothing) {
  conv_shape s = {3, 14, 14, 32, 64, 3, 3, 1};
  kern_win g = window(&s);
  size_t nx = (size_t)s.B * s.H * s.W * s.C, ny = (size_t)s.B * g.OH * g.OW * s.F;
  size_t nw = (size_t)s.kh * s.kw * s.C * s.F, n = ny + nw + nx;
  float *x = randoms(nx, 1), *w = randoms(nw, 2), *bias = randoms((size_t)s.F, 3);
  float *dy = randoms(ny, 4), *out[2];
  int threads[2];
  for (int r = 0; r < 2; r++) {
    kern_t *k = NULL;
    threads[r] = kern_cpu_blas_threads(r ? 1 : 64); /* first the most, then one */
    ASSERT_OK(kern_cpu_create(&k));
    if (!k->ops->conv_direct(k, &g, s.F))
      TEST_SKIP("no direct convolution on this CPU (it needs AVX-512)");
    ASSERT((out[r] = calloc(n, sizeof(float))));
    ASSERT_OK(k->ops->conv_fwd(k, &g, x, w, bias, s.F, 1, out[r]));
    ASSERT_OK(k->ops->conv_dw(k, &g, x, dy, s.F, out[r] + ny));
    ASSERT_OK(k->ops->conv_dx(k, &g, dy, w, s.F, out[r] + ny + nw));
    kern_free(k);
  }
  printf("# %d threads against %d\n", threads[0], threads[1]);
  ASSERT_EQ(threads[1], 1);
  ASSERT(memcmp(out[0], out[1], n * sizeof(float)) == 0);
  free(x), free(w), free(bias), free(dy), free(out[0]), free(out[1]);
}

/* A window the direct path does not take (strides, padding wider than the
 * kernel allows) says so, so that the layer takes the patches path. */
TEST(declines_strides) {
  kern_t *k = direct_backend();
  kern_win strided = {1, 6, 6, 2, 3, 3, 2, 2, 1, 1, 3, 3};
  ASSERT(!k->ops->conv_direct(k, &strided, 4));
  kern_free(k);
}

/* The model's gradients through the direct path equal those through the
 * patches path within float rounding (two conv layers, pooling between;
 * the second conv's dx reaches the first). */
TEST(model_gradients_match) {
  kern_free(direct_backend());
  cpu_model c;
  enum { B = 4 };
  cpu_open(&c,
           build("{\"input_shape\":[10,9,3],\"layers\":["
                 "{\"type\":\"Conv2D\",\"filters\":8,\"kernel_size\":3,\"padding\":\"same\","
                 "\"activation\":\"relu\"},{\"type\":\"MaxPooling2D\"},"
                 "{\"type\":\"Conv2D\",\"filters\":20,\"kernel_size\":[2,3],"
                 "\"activation\":\"tanh\"},"
                 "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":3}]}"),
           B);
  model_init(c.m, 4);
  float *x = calloc((size_t)B * c.m->input_dim, sizeof(float));
  int32_t *y = calloc(B, sizeof(int32_t));
  float *a = calloc(c.m->n_params, sizeof(float)), *b = calloc(c.m->n_params, sizeof(float));
  ASSERT(x && y && a && b);
  random_batch(c.m, B, 6, x, y);
  c.d->conv_gemm = 1;
  double la = loss_at(&c, x, y, B, 1, a);
  c.d->conv_gemm = 0;
  double lb = loss_at(&c, x, y, B, 1, b);
  ASSERT_NEAR(lb, la, 1e-5 * fabs(la));
  size_t differ = 0;
  for (size_t i = 0; i < c.m->n_params; i++) {
    differ += a[i] != b[i];
    if (!(fabs(a[i] - b[i]) <= 1e-4 * (fabs(a[i]) + 1e-3)))
      TEST_FAIL_("param %zu: patches %.9g, direct %.9g", i, a[i], b[i]);
  }
  printf("# %zu of %zu gradients differ in their last bits\n", differ, c.m->n_params);
  ASSERT_GT(differ, 0); /* the two paths did run (a different order of summation) */
  free(x), free(y), free(a), free(b);
  cpu_close(&c);
}

TEST_MAIN(T(matches_the_patches_path), T(threads_change_nothing), T(declines_strides),
          T(model_gradients_match))
