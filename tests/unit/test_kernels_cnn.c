/* test_kernels_cnn.c - the CUDA backend's CNN ops (im2col, col2im, pooling,
 * batch normalization; kernels.h) against the CPU reference
 * (kernels_cpu_cnn.c), op by op on random inputs of several shapes, then a
 * whole CNN training step through dmodel. Without a GPU (or a CUDA build)
 * the GPU tests end with TEST_SKIP and ctest reports the file as skipped.
 *
 * Tolerances (|gpu - cpu| <= abs + rel * |cpu|), and why:
 *   bitwise   im2col, col2im, pool_fwd and pool_bwd (max and mean), bn_fwd,
 *             bn_bwd: the GPU computes each element with the CPU's
 *             operations in the CPU's order (col2im and pool_bwd gather
 *             their contributions in the CPU's window order; max pooling
 *             routes to the same first maximum, ties included) and never
 *             fuses a multiply and an add (__f*_rn), as the CPU build
 *             (x86-64, no -march) does not;
 *   chan_sums rel 2.5e-7 + abs 1e-7: float partials of 64 rows summed in
 *             double, as the CPU does (equal today; the tolerance covers a
 *             change of the CPU's blocking, printed when not bitwise);
 *   bn_bwd_sums rel 2.5e-7 + abs 1e-9 * rows: double sums in another
 *             association than the CPU's one running sum (at most an ulp
 *             of the float result, or double rounding on cancellation);
 *   CNN steps Conv2D + BatchNormalization + MaxPooling2D + Dense (and one
 *             with AveragePooling2D, GlobalAveragePooling2D): the GEMMs are
 *             cuBLAS's (test_kernels.c: 1e-5 * K), so the first step's
 *             loss within 1e-5 rel and gradients within 1e-4 + 1e-3 rel,
 *             the next steps' loss within 1e-4 rel and the parameters after
 *             5 Adam steps within 1e-4 abs (errors compound). A near tie in
 *             a max window or a value near ReLU's kink could route a
 *             gradient differently: the seeds are fixed, so such a failure
 *             would be repeatable, not flaky.
 * Every GPU op also runs twice: the two results must be bitwise equal (no
 * atomics: deterministic run to run). */
#include "test.h"
#include "test_gpu.h"

#include "worker/devinfo.h"
#include "worker/model/dmodel.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"

static void fill(float *x, size_t n, uint64_t seed) {
  rng_t r;
  rng_seed(&r, seed, 11);
  for (size_t i = 0; i < n; i++)
    x[i] = rng_uniform(&r) * 2 - 1;
}

/* Values in {-1, -0.5, -0, 0, 0.5, 1}: max pooling windows full of ties
 * (signed zeros among them). */
static void fill_ties(float *x, size_t n, uint64_t seed) {
  fill(x, n, seed);
  for (size_t i = 0; i < n; i++)
    x[i] = rintf(x[i] * 2) / 2;
}

static float *fmalloc(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  ASSERT(p);
  return p;
}

static float *up(kern_t *k, const float *h, size_t n) {
  void *p = NULL;
  if (k->ops->alloc(k, &p, (n ? n : 1) * sizeof(float)) ||
      (n && k->ops->h2d(k, p, h, n * sizeof(float))))
    TEST_FAIL_("upload: %s", kern_errmsg(k));
  return p;
}

static float *dev_zeros(kern_t *k, size_t n) {
  void *p = NULL;
  if (k->ops->alloc(k, &p, (n ? n : 1) * sizeof(float)) ||
      k->ops->memset0(k, p, (n ? n : 1) * sizeof(float)))
    TEST_FAIL_("alloc: %s", kern_errmsg(k));
  return p;
}

static void down(kern_t *k, float *h, const float *dptr, size_t n) {
  if (k->ops->sync(k) || (n && k->ops->d2h(k, h, dptr, n * sizeof(float))))
    TEST_FAIL_("download: %s (%s)", kern_errmsg(k), "a kernel failed or faulted");
}

static void op_ok(kern_t *k, ctrain_err rc, const char *what) {
  if (rc)
    TEST_FAIL_("%s: %s: %s", what, ctrain_strerror(rc), kern_errmsg(k));
}

/* Bitwise equality (the sign of zero and NaN payloads included). */
static void assert_bitwise(const char *what, const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float)))
      TEST_FAIL_("%s[%zu]: gpu %.9g vs cpu %.9g (bitwise equality expected)", what, i, got[i],
                 want[i]);
}

/* Returns whether all were bitwise equal. */
static int assert_close(const char *what, const float *got, const float *want, size_t n,
                        double abs_tol, double rel_tol) {
  double worst = 0;
  int same = 1;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)want[i]);
    if (!(e <= abs_tol + rel_tol * fabs((double)want[i])))
      TEST_FAIL_("%s[%zu]: gpu %.9g vs cpu %.9g (|diff| %.3g > %.3g + %.3g*|cpu|)", what, i, got[i],
                 want[i], e, abs_tol, rel_tol);
    worst = e > worst ? e : worst;
    same &= !memcmp(&got[i], &want[i], sizeof(float));
  }
  printf("# %-24s n=%-7zu max |gpu-cpu| %.3g%s\n", what, n, worst, same ? " (bitwise)" : "");
  return same;
}

/* A window as the model builds one (model.c): TensorFlow's 'same' (output
 * ceil(in / stride), the odd padding pixel below/right) or 'valid'. */
typedef struct {
  int B, H, W, C, kh, kw, sh, sw, same;
} win_case;

static kern_win win_of(const win_case *c) {
  kern_win g = {c->B, c->H, c->W, c->C, c->kh, c->kw, c->sh, c->sw, 0, 0, 0, 0};
  if (c->same) {
    g.OH = (c->H + c->sh - 1) / c->sh;
    g.OW = (c->W + c->sw - 1) / c->sw;
    int ph = (g.OH - 1) * c->sh + c->kh - c->H, pw = (g.OW - 1) * c->sw + c->kw - c->W;
    g.pt = ph > 0 ? ph / 2 : 0;
    g.pl = pw > 0 ? pw / 2 : 0;
  } else {
    g.OH = (c->H - c->kh) / c->sh + 1;
    g.OW = (c->W - c->kw) / c->sw + 1;
  }
  return g;
}

static const win_case WINDOWS[] = {
    {2, 7, 5, 3, 3, 3, 1, 1, 1},   /* odd sizes, same, stride 1 */
    {3, 9, 8, 1, 3, 2, 2, 1, 1},   /* C = 1, strides 2 x 1, same */
    {2, 7, 7, 4, 2, 2, 2, 2, 0},   /* valid drops the last row and column */
    {1, 6, 11, 5, 3, 3, 2, 2, 1},  /* same, stride 2, odd padding */
    {2, 9, 10, 6, 3, 3, 2, 2, 0},  /* overlapping windows, valid */
    {2, 5, 5, 2, 5, 5, 1, 1, 0},   /* one window over the image (GAP) */
    {2, 5, 6, 3, 2, 3, 1, 1, 1},   /* same, stride 1, windows cut by the border */
    {4, 8, 6, 17, 1, 1, 1, 1, 0},  /* 1 x 1 */
    {3, 13, 13, 1, 4, 4, 3, 3, 1}, /* C = 1, kernel > stride, same */
    {8, 28, 28, 8, 3, 3, 1, 1, 1}, /* a real layer's size: grid-stride loops */
};

/* One GPU op's output twice: the second run must equal the first bitwise. */
static void twice(kern_t *g, const char *what, float *host, float *first, const float *dev,
                  size_t n) {
  down(g, host, dev, n);
  if (first) {
    for (size_t i = 0; i < n; i++)
      if (memcmp(&host[i], &first[i], sizeof(float)))
        TEST_FAIL_("%s[%zu]: run 2 gave %.9g, run 1 %.9g (not deterministic)", what, i, host[i],
                   first[i]);
  }
}

TEST(cuda_window_ops_match_cpu) {
  kern_t *g = gpu_or_skip();
  kern_t *c = NULL;
  ASSERT_OK(kern_cpu_create(&c));
  for (size_t wi = 0; wi < sizeof(WINDOWS) / sizeof(WINDOWS[0]); wi++) {
    const win_case *wc = &WINDOWS[wi];
    kern_win w = win_of(wc);
    size_t nx = (size_t)w.B * w.H * w.W * w.C, ny = (size_t)w.B * w.OH * w.OW * w.C;
    size_t ncol = (size_t)w.B * w.OH * w.OW * w.kh * w.kw * w.C;
    printf("# B=%d H=%d W=%d C=%d k=%dx%d s=%dx%d %s: OH=%d OW=%d pad %d,%d\n", w.B, w.H, w.W, w.C,
           w.kh, w.kw, w.sh, w.sw, wc->same ? "same" : "valid", w.OH, w.OW, w.pt, w.pl);
    float *x = fmalloc(nx), *col = fmalloc(ncol), *ref = fmalloc(ncol > nx ? ncol : nx);
    float *got = fmalloc(ncol > nx ? ncol : nx), *run1 = fmalloc(ncol > nx ? ncol : nx);
    float *dy = fmalloc(ny);
    char name[64];

    /* im2col, then col2im of random col entries */
    fill(x, nx, 100 + wi);
    fill(col, ncol, 200 + wi);
    fill(dy, ny, 300 + wi);
    float *dx_ = up(g, x, nx), *dcol = dev_zeros(g, ncol), *ddy = up(g, dy, ny);
    float *dout = dev_zeros(g, nx > ny ? nx : ny);
    op_ok(c, c->ops->im2col(c, &w, x, ref), "cpu im2col");
    for (int r = 0; r < 2; r++) {
      op_ok(g, g->ops->im2col(g, &w, dx_, dcol), "gpu im2col");
      twice(g, "im2col", got, r ? run1 : NULL, dcol, ncol);
      memcpy(run1, got, ncol * sizeof(float));
    }
    assert_bitwise("im2col", got, ref, ncol);
    printf("# %-24s n=%-7zu bitwise\n", "im2col", ncol);
    g->ops->free(g, dcol);
    dcol = up(g, col, ncol);
    op_ok(c, c->ops->col2im(c, &w, col, ref), "cpu col2im");
    for (int r = 0; r < 2; r++) {
      op_ok(g, g->ops->col2im(g, &w, dcol, dout), "gpu col2im");
      twice(g, "col2im", got, r ? run1 : NULL, dout, nx);
      memcpy(run1, got, nx * sizeof(float));
    }
    assert_bitwise("col2im", got, ref, nx);
    printf("# %-24s n=%-7zu bitwise\n", "col2im", nx);

    /* pooling forward and backward, max and mean, on continuous x and on x
     * full of ties */
    for (int ties = 0; ties < 2; ties++) {
      if (ties) {
        fill_ties(x, nx, 400 + wi);
        g->ops->free(g, dx_);
        dx_ = up(g, x, nx);
      }
      for (int max = 1; max >= 0; max--) {
        op_ok(c, c->ops->pool_fwd(c, &w, max, x, ref), "cpu pool_fwd");
        for (int r = 0; r < 2; r++) {
          op_ok(g, g->ops->pool_fwd(g, &w, max, dx_, dout), "gpu pool_fwd");
          twice(g, "pool_fwd", got, r ? run1 : NULL, dout, ny);
          memcpy(run1, got, ny * sizeof(float));
        }
        snprintf(name, sizeof(name), "pool_fwd %s%s", max ? "max" : "mean", ties ? " ties" : "");
        assert_bitwise(name, got, ref, ny);
        printf("# %-24s n=%-7zu bitwise\n", name, ny);
        op_ok(c, c->ops->pool_bwd(c, &w, max, x, dy, ref), "cpu pool_bwd");
        for (int r = 0; r < 2; r++) {
          op_ok(g, g->ops->pool_bwd(g, &w, max, dx_, ddy, dout), "gpu pool_bwd");
          twice(g, "pool_bwd", got, r ? run1 : NULL, dout, nx);
          memcpy(run1, got, nx * sizeof(float));
        }
        snprintf(name, sizeof(name), "pool_bwd %s%s", max ? "max" : "mean", ties ? " ties" : "");
        assert_bitwise(name, got, ref, nx);
        printf("# %-24s n=%-7zu bitwise\n", name, nx);
      }
    }
    g->ops->free(g, dx_);
    g->ops->free(g, dcol);
    g->ops->free(g, ddy);
    g->ops->free(g, dout);
    free(x);
    free(col);
    free(ref);
    free(got);
    free(run1);
    free(dy);
  }
  kern_free(c);
  kern_free(g);
}

TEST(cuda_batchnorm_ops_match_cpu) {
  kern_t *g = gpu_or_skip();
  kern_t *c = NULL;
  ASSERT_OK(kern_cpu_create(&c));
  /* rows x C: around the 64-row blocks, C = 1, a BN after a 28 x 28 conv */
  static const int shapes[][2] = {{1, 1},     {63, 1},   {64, 3},    {65, 7},
                                  {1000, 16}, {4097, 5}, {6272, 32}, {129, 130}};
  for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
    int rows = shapes[si][0], C = shapes[si][1];
    size_t n = (size_t)rows * C;
    printf("# rows=%d C=%d\n", rows, C);
    float *x = fmalloc(n), *dy = fmalloc(n), *ref = fmalloc(n), *got = fmalloc(n);
    float *run1 = fmalloc(n), *par = fmalloc(4 * (size_t)C), *sref = fmalloc(2 * (size_t)C);
    float *sgot = fmalloc(2 * (size_t)C);
    fill(x, n, 500 + si);
    for (size_t i = 0; i < n; i++)
      x[i] = x[i] * 3 + 0.75f; /* a mean far from 0 */
    fill(dy, n, 600 + si);
    fill(par, 4 * (size_t)C, 700 + si);
    float *mean = par, *inv = par + C, *gamma = par + 2 * C, *beta = par + 3 * C;
    float *dx_ = up(g, x, n), *ddy = up(g, dy, n), *dout = dev_zeros(g, n);
    float *dsum = dev_zeros(g, 2 * (size_t)C);

    /* chan_sums, then the mean and inv from them as dmodel computes them */
    op_ok(c, c->ops->chan_sums(c, x, NULL, rows, C, sref), "cpu chan_sums");
    for (int r = 0; r < 2; r++) {
      op_ok(g, g->ops->chan_sums(g, dx_, NULL, rows, C, dsum), "gpu chan_sums");
      twice(g, "chan_sums", sgot, r ? run1 : NULL, dsum, (size_t)C);
      memcpy(run1, sgot, (size_t)C * sizeof(float));
    }
    assert_close("chan_sums", sgot, sref, (size_t)C, 1e-7, 2.5e-7);
    for (int k = 0; k < C; k++)
      mean[k] = sref[k] / (float)rows;
    float *dpar = up(g, par, 4 * (size_t)C);
    op_ok(c, c->ops->chan_sums(c, x, mean, rows, C, sref), "cpu chan_sums center");
    for (int r = 0; r < 2; r++) {
      op_ok(g, g->ops->chan_sums(g, dx_, dpar, rows, C, dsum), "gpu chan_sums center");
      twice(g, "chan_sums center", sgot, r ? run1 : NULL, dsum, (size_t)C);
      memcpy(run1, sgot, (size_t)C * sizeof(float));
    }
    assert_close("chan_sums center", sgot, sref, (size_t)C, 1e-7, 2.5e-7);
    for (int k = 0; k < C; k++)
      inv[k] = 1.0f / sqrtf(sref[k] / (float)rows + 1e-3f);
    g->ops->free(g, dpar);
    dpar = up(g, par, 4 * (size_t)C);
    float *dmean = dpar, *dinv = dpar + C, *dgamma = dpar + 2 * C, *dbeta = dpar + 3 * C;

    /* bn_fwd with and without gamma/beta; in place on the GPU too */
    for (int affine = 0; affine < 2; affine++) {
      op_ok(c,
            c->ops->bn_fwd(c, x, rows, C, mean, inv, affine ? gamma : NULL, affine ? beta : NULL,
                           ref),
            "cpu bn_fwd");
      op_ok(g,
            g->ops->bn_fwd(g, dx_, rows, C, dmean, dinv, affine ? dgamma : NULL,
                           affine ? dbeta : NULL, dout),
            "gpu bn_fwd");
      down(g, got, dout, n);
      assert_bitwise(affine ? "bn_fwd gamma beta" : "bn_fwd", got, ref, n);
      printf("# %-24s n=%-7zu bitwise\n", affine ? "bn_fwd gamma beta" : "bn_fwd", n);
    }
    op_ok(g, g->ops->copy(g, dout, dx_, n), "gpu copy");
    op_ok(g, g->ops->bn_fwd(g, dout, rows, C, dmean, dinv, dgamma, dbeta, dout), "gpu bn_fwd");
    down(g, got, dout, n);
    assert_bitwise("bn_fwd in place", got, ref, n);

    /* bn_bwd_sums, then bn_bwd from the CPU's sums (n = rows) */
    op_ok(c, c->ops->bn_bwd_sums(c, x, dy, rows, C, mean, inv, sref), "cpu bn_bwd_sums");
    for (int r = 0; r < 2; r++) {
      op_ok(g, g->ops->bn_bwd_sums(g, dx_, ddy, rows, C, dmean, dinv, dsum), "gpu bn_bwd_sums");
      twice(g, "bn_bwd_sums", sgot, r ? run1 : NULL, dsum, 2 * (size_t)C);
      memcpy(run1, sgot, 2 * (size_t)C * sizeof(float));
    }
    assert_close("bn_bwd_sums", sgot, sref, 2 * (size_t)C, 1e-9 * rows, 2.5e-7);
    g->ops->free(g, dsum);
    dsum = up(g, sref, 2 * (size_t)C);
    for (int affine = 0; affine < 2; affine++) {
      op_ok(c,
            c->ops->bn_bwd(c, x, dy, rows, C, mean, inv, affine ? gamma : NULL, sref, (float)rows,
                           ref),
            "cpu bn_bwd");
      op_ok(g,
            g->ops->bn_bwd(g, dx_, ddy, rows, C, dmean, dinv, affine ? dgamma : NULL, dsum,
                           (float)rows, dout),
            "gpu bn_bwd");
      down(g, got, dout, n);
      assert_bitwise(affine ? "bn_bwd gamma" : "bn_bwd", got, ref, n);
      printf("# %-24s n=%-7zu bitwise\n", affine ? "bn_bwd gamma" : "bn_bwd", n);
    }
    /* dx aliasing dy */
    op_ok(g, g->ops->bn_bwd(g, dx_, ddy, rows, C, dmean, dinv, dgamma, dsum, (float)rows, ddy),
          "gpu bn_bwd in place");
    down(g, got, ddy, n);
    assert_bitwise("bn_bwd in place", got, ref, n);

    g->ops->free(g, dx_);
    g->ops->free(g, ddy);
    g->ops->free(g, dout);
    g->ops->free(g, dsum);
    g->ops->free(g, dpar);
    free(x);
    free(dy);
    free(ref);
    free(got);
    free(run1);
    free(par);
    free(sref);
    free(sgot);
  }
  kern_free(c);
  kern_free(g);
}

static model_t *build(const char *json) {
  model_t *m = NULL;
  char err[256] = "";
  if (model_from_json(json, &m, err, sizeof(err)))
    TEST_FAIL_("model_from_json: %s", err);
  return m;
}

/* Conv2D + BatchNormalization + MaxPooling2D ('same' on an odd size) + a
 * strided Conv2D + Dense. */
static const char *const CNN =
    "{\"input_shape\":[11,9,2],\"layers\":["
    "{\"type\":\"Conv2D\",\"filters\":6,\"kernel_size\":3,\"padding\":\"same\","
    "\"use_bias\":false},"
    "{\"type\":\"BatchNormalization\",\"momentum\":0.9},"
    "{\"type\":\"Activation\",\"activation\":\"relu\"},"
    "{\"type\":\"MaxPooling2D\",\"pool_size\":2,\"padding\":\"same\"},"
    "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":[3,2],\"strides\":2,"
    "\"activation\":\"tanh\"},"
    "{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":5,\"activation\":\"softmax\"}]}";

/* AveragePooling2D (stride 1, 'same'), BatchNormalization without gamma and
 * beta, GlobalAveragePooling2D. */
static const char *const CNN_AVG =
    "{\"input_shape\":[8,7,3],\"layers\":["
    "{\"type\":\"Conv2D\",\"filters\":5,\"kernel_size\":3,\"strides\":[2,1],"
    "\"padding\":\"same\",\"activation\":\"relu\"},"
    "{\"type\":\"AveragePooling2D\",\"pool_size\":[2,3],\"strides\":1,\"padding\":\"same\"},"
    "{\"type\":\"BatchNormalization\",\"center\":false,\"scale\":false},"
    "{\"type\":\"Conv2D\",\"filters\":4,\"kernel_size\":2,\"activation\":\"tanh\"},"
    "{\"type\":\"GlobalAveragePooling2D\"},{\"type\":\"Dense\",\"units\":5}]}";

/* The same model on the CPU reference and on k: one forward + backward
 * (loss, correct, every gradient), then `steps` Adam steps (the parameters,
 * the BN moving statistics among them). */
static void cnn_steps(kern_t *k, const char *json, int steps) {
  enum { B = 6 };
  model_t *ref = build(json), *dev = build(json);
  optim_t *oref = NULL, *odev = NULL;
  char err[512] = "";
  ASSERT_OK(optim_create("adam", ref->n_params, 0, 0, &oref, err, sizeof(err)));
  ASSERT_OK(optim_create("adam", dev->n_params, 0, 0, &odev, err, sizeof(err)));
  kern_t *cpu = NULL;
  dmodel_t *dr = NULL, *d = NULL;
  model_init(ref, 9);
  model_init(dev, 9);
  ASSERT_OK(kern_cpu_create(&cpu));
  if (dmodel_create(cpu, ref, oref, B, &dr, err, sizeof(err)))
    TEST_FAIL_("dmodel_create on the CPU: %s", err);
  if (dmodel_create(k, dev, odev, B, &d, err, sizeof(err)))
    TEST_FAIL_("dmodel_create on the GPU: %s", err);
  ASSERT_OK(dmodel_push(dr, ref, oref));
  ASSERT_OK(dmodel_push(d, dev, odev));
  size_t nin = (size_t)B * ref->input_dim;
  float *x = fmalloc(nin), *gref = fmalloc(ref->n_params), *gdev = fmalloc(ref->n_params);
  int32_t y[B];
  for (int s = 0; s < steps; s++) {
    fill(x, nin, 800 + (uint64_t)s);
    for (int i = 0; i < B; i++)
      y[i] = (i * 3 + s) % 5;
    double lref, ldev;
    long cref, cdev;
    if (dmodel_step(dr, x, y, B, 1, NULL, 1.0f / B, 1) || dmodel_stats(dr, &lref, &cref))
      TEST_FAIL_("cpu step %d: %s", s, dmodel_errmsg(dr));
    if (dmodel_step(d, x, y, B, 1, NULL, 1.0f / B, 1) || dmodel_stats(d, &ldev, &cdev))
      TEST_FAIL_("gpu step %d: %s", s, dmodel_errmsg(d));
    ASSERT_NEAR(ldev, lref, (s ? 1e-4 : 1e-5) * fabs(lref));
    if (s == 0) {
      ASSERT_EQ(cdev, cref);
      ASSERT_OK(dmodel_grads_to_host(dr, gref));
      ASSERT_OK(dmodel_grads_to_host(d, gdev));
      printf("# step 0: loss gpu %.9g cpu %.9g\n", ldev, lref);
      assert_close("step 0 gradients", gdev, gref, ref->n_params, 1e-4, 1e-3);
    }
    if (dmodel_update(dr, oref, 0.01f))
      TEST_FAIL_("cpu update: %s", dmodel_errmsg(dr));
    if (dmodel_update(d, odev, 0.01f))
      TEST_FAIL_("gpu update: %s", dmodel_errmsg(d));
  }
  ASSERT_OK(dmodel_pull(dr, ref, oref));
  ASSERT_OK(dmodel_pull(d, dev, odev));
  char name[48];
  snprintf(name, sizeof(name), "params after %d steps", steps);
  assert_close(name, dev->params, ref->params, ref->n_params, 1e-4, 0);
  free(x);
  free(gref);
  free(gdev);
  dmodel_free(dr);
  dmodel_free(d);
  kern_free(cpu);
  optim_free(oref);
  optim_free(odev);
  model_free(ref);
  model_free(dev);
}

TEST(cuda_cnn_steps_match_cpu) {
  kern_t *g = gpu_or_skip();
  cnn_steps(g, CNN, 5);
  cnn_steps(g, CNN_AVG, 5);
  kern_free(g);
}

/* The CPU backend has every CNN op (the reference): dmodel_create takes the
 * models above there, whatever the build. */
TEST(cpu_has_the_cnn_ops) {
  kern_t *c = NULL;
  ASSERT_OK(kern_cpu_create(&c));
  const kern_ops *o = c->ops;
  ASSERT(o->im2col && o->col2im && o->pool_fwd && o->pool_bwd && o->chan_sums && o->bn_fwd &&
         o->bn_bwd_sums && o->bn_bwd);
  kern_free(c);
}

TEST_MAIN(T(cpu_has_the_cnn_ops), T(cuda_window_ops_match_cpu), T(cuda_batchnorm_ops_match_cpu),
          T(cuda_cnn_steps_match_cpu))
