/* test_kernels.c - the compute backends (kernels.h) and the model step on
 * them (dmodel.h), against the CPU reference.
 *
 * The CPU backend is the reference (training runs it; test_model.c checks
 * its gradients against finite differences). Here: the replica contract on
 * the CPU (two dmodels from one model_t step identically; gradients written
 * back with dmodel_grads_from_host drive the update). CUDA: every op, then
 * whole training steps, against the CPU backend within
 * stated fp32 tolerances. Without a GPU (or a CUDA build) the CUDA tests end
 * with TEST_SKIP ("# SKIP no GPU: <reason>"), and ctest reports the file as
 * skipped, its CPU cases' "ok" lines in its output.
 *
 * Tolerances (|gpu - cpu| <= abs + rel * |cpu|), and why:
 *   exact (0)          bias_fill, relu fwd/bwd, mul, copy, argmax/correct:
 *                      one rounding or none, the same on both;
 *   gemm  1e-5 * K     cuBLAS sums K products in another order (and may use
 *                      FMA): error grows with K, inputs here are in [-1, 1];
 *   bias_grad 1e-6*rows same sum, same order, but FMA-free adds may differ;
 *   tanh/sigmoid 4e-7  CUDA's tanhf/expf are within 2 ulp of glibc's;
 *   softmax_ce 1e-6    expf ulps and the double row sum; loss rel 1e-6;
 *   sgd/adam 1e-6 rel  nvcc contracts a*b+c into FMA (one rounding less);
 *   training step      5 Adam steps of an MLP with dropout: params within
 *                      1e-4 abs, loss within 1e-4 rel (errors above compound). */
#include "test.h"
#include "test_gpu.h"

#include "worker/devinfo.h"
#include "worker/model/dmodel.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"

static model_t *build(const char *json) {
  model_t *m = NULL;
  char err[256] = "";
  if (model_from_json(json, &m, err, sizeof(err)))
    TEST_FAIL_("model_from_json: %s", err);
  return m;
}

static optim_t *make_opt(const char *name, size_t n, float mom, int nesterov) {
  optim_t *o = NULL;
  char err[256] = "";
  if (optim_create(name, n, mom, nesterov, &o, err, sizeof(err)))
    TEST_FAIL_("optim_create: %s", err);
  return o;
}

static void fill(float *x, size_t n, uint64_t seed) {
  rng_t r;
  rng_seed(&r, seed, 9);
  for (size_t i = 0; i < n; i++)
    x[i] = rng_uniform(&r) * 2 - 1;
}

static const char *const MLP = "{\"input_shape\":[4,5],\"layers\":[{\"type\":\"Flatten\"},"
                               "{\"type\":\"Dense\",\"units\":32,\"activation\":\"relu\"},"
                               "{\"type\":\"Dropout\",\"rate\":0.25},"
                               "{\"type\":\"Dense\",\"units\":16,\"activation\":\"tanh\"},"
                               "{\"type\":\"Dense\",\"units\":12},"
                               "{\"type\":\"Activation\",\"activation\":\"sigmoid\"},"
                               "{\"type\":\"Dense\",\"units\":5,\"activation\":\"softmax\"}]}";

/* `steps` training steps of dmodel on the CPU reference backend (ref) and on
 * k (dev), same data and dropout stream; compares per step and at the end.
 * tol < 0: bitwise. */
static void run_steps(kern_t *k, const char *json, const char *opt_name, float mom, int nesterov,
                      int steps, double tol) {
  enum { B = 7 };
  model_t *ref = build(json), *dev = build(json);
  optim_t *oref = make_opt(opt_name, ref->n_params, mom, nesterov);
  optim_t *odev = make_opt(opt_name, dev->n_params, mom, nesterov);
  kern_t *cpu = NULL;
  dmodel_t *dr = NULL, *d = NULL;
  char err[512] = "";
  model_init(ref, 5);
  model_init(dev, 5);
  ASSERT_OK(kern_cpu_create(&cpu));
  if (dmodel_create(cpu, ref, oref, B, &dr, err, sizeof(err)) ||
      dmodel_create(k, dev, odev, B, &d, err, sizeof(err)))
    TEST_FAIL_("dmodel_create: %s", err);
  ASSERT_OK(dmodel_push(dr, ref, oref));
  ASSERT_OK(dmodel_push(d, dev, odev));
  float *gref = calloc(ref->n_params, sizeof(float)), *gdev = calloc(ref->n_params, sizeof(float));
  ASSERT(gref && gdev);
  rng_t rr, rd;
  rng_seed(&rr, 77, 3);
  rng_seed(&rd, 77, 3);
  float x[B * 20];
  int32_t y[B];
  for (int s = 0; s < steps; s++) {
    fill(x, B * 20, 100 + (uint64_t)s);
    for (int i = 0; i < B; i++)
      y[i] = (i * 3 + s) % 5;
    long cref = 0, cdev = 0;
    double lref, ldev;
    if (dmodel_step(dr, x, y, B, 1, &rr, 1.0f / B, 1) || dmodel_update(dr, oref, 0.05f) ||
        dmodel_stats(dr, &lref, &cref))
      TEST_FAIL_("cpu step %d: %s", s, dmodel_errmsg(dr));
    if (dmodel_step(d, x, y, B, 1, &rd, 1.0f / B, 1) || dmodel_update(d, odev, 0.05f) ||
        dmodel_stats(d, &ldev, &cdev))
      TEST_FAIL_("dmodel step %d: %s", s, dmodel_errmsg(d));
    if (tol < 0) {
      ASSERT(lref == ldev);
      ASSERT_EQ(cref, cdev);
      ASSERT_OK(dmodel_grads_to_host(dr, gref));
      ASSERT_OK(dmodel_grads_to_host(d, gdev));
      ASSERT_OK(memcmp(gref, gdev, ref->n_params * sizeof(float)));
    } else {
      ASSERT_NEAR(ldev, lref, tol * fabs(lref));
    }
  }
  ASSERT_EQ(oref->iterations, odev->iterations);
  ASSERT_OK(dmodel_pull(dr, ref, oref));
  ASSERT_OK(dmodel_pull(d, dev, odev));
  if (tol < 0) {
    ASSERT_OK(memcmp(ref->params, dev->params, ref->n_params * sizeof(float)));
    if (oref->n_slots)
      ASSERT_OK(
          memcmp(oref->state, odev->state, (size_t)oref->n_slots * oref->n_params * sizeof(float)));
  } else {
    for (size_t i = 0; i < ref->n_params; i++)
      ASSERT_NEAR(dev->params[i], ref->params[i], tol);
  }
  /* Both drew the same dropout masks: the streams stand at the same place. */
  ASSERT_EQ(rng_next(&rr), rng_next(&rd));
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

TEST(cpu_replicas_step_identically) {
  /* Two replicas (two backends, one model_t) given the same batch and
   * dropout stream stay bitwise equal: what the train loop's "same update on
   * every replica" rests on. */
  kern_t *k = NULL;
  ASSERT_OK(kern_cpu_create(&k));
  ASSERT_STR_EQ(k->ops->name, "cpu");
  run_steps(k, MLP, "sgd", 0.9f, 1, 4, -1);
  run_steps(k, MLP, "adam", 0, 0, 4, -1);
  kern_free(k);
}

TEST(cpu_grads_from_host_drive_the_update) {
  /* The train loop replaces each replica's gradients by the all-reduced sum
   * (dmodel_grads_from_host); the update must use exactly those. */
  model_t *m = build(MLP);
  optim_t *o = make_opt("sgd", m->n_params, 0, 0);
  kern_t *k = NULL;
  dmodel_t *d = NULL;
  char err[256];
  enum { B = 3 };
  float x[B * 20];
  int32_t y[B] = {0, 1, 2};
  fill(x, B * 20, 42);
  model_init(m, 1);
  ASSERT_OK(kern_cpu_create(&k));
  ASSERT_OK(dmodel_create(k, m, o, B, &d, err, sizeof(err)));
  ASSERT_OK(dmodel_push(d, m, o));
  float *g = malloc(m->n_params * sizeof(float)), *w0 = malloc(m->n_params * sizeof(float));
  ASSERT(g && w0);
  memcpy(w0, m->params, m->n_params * sizeof(float));
  ASSERT_OK(dmodel_step(d, x, y, B, 0, NULL, 1, 1));
  for (size_t i = 0; i < m->n_params; i++)
    g[i] = (float)(i % 7) - 3.0f;
  ASSERT_OK(dmodel_grads_from_host(d, g));
  ASSERT_OK(dmodel_update(d, o, 0.5f));
  ASSERT_OK(dmodel_pull(d, m, o));
  for (size_t i = 0; i < m->n_params; i++)
    ASSERT(m->params[i] == w0[i] - 0.5f * g[i]);
  ASSERT_EQ(o->iterations, 1);
  free(g);
  free(w0);
  dmodel_free(d);
  kern_free(k);
  optim_free(o);
  model_free(m);
}

TEST(cuda_unavailable_is_reported) {
  kern_t *k = NULL;
  char err[256] = "";
  devinfo di;
  ASSERT_OK(devinfo_probe(&di));
  if (di.gpu_count > 0) {
    printf("# %d GPU(s): the CUDA tests below run\n", di.gpu_count);
    return;
  }
  ctrain_err rc = kern_cuda_create(0, &k, err, sizeof(err));
  ASSERT_NE(rc, CTRAIN_OK);
  ASSERT_NULL(k);
  ASSERT(strlen(err) > 0);
  printf("# kern_cuda_create without a GPU: %s: %s\n", ctrain_strerror(rc), err);
}

/* Device copy of host floats. */
static void *up(kern_t *k, const void *h, size_t bytes) {
  void *p = NULL;
  if (k->ops->alloc(k, &p, bytes) || k->ops->h2d(k, p, h, bytes))
    TEST_FAIL_("upload: %s", kern_errmsg(k));
  return p;
}

static void down(kern_t *k, void *h, const void *dptr, size_t bytes) {
  if (k->ops->sync(k) || k->ops->d2h(k, h, dptr, bytes))
    TEST_FAIL_("download: %s", kern_errmsg(k));
}

static void assert_close(const char *what, const float *got, const float *want, size_t n,
                         double abs_tol, double rel_tol) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)want[i]);
    if (!(e <= abs_tol + rel_tol * fabs((double)want[i])))
      TEST_FAIL_("%s[%zu]: gpu %.9g vs cpu %.9g (|diff| %.3g > %.3g + %.3g*|cpu|)", what, i, got[i],
                 want[i], e, abs_tol, rel_tol);
    if (e > worst)
      worst = e;
  }
  printf("# %-12s n=%-6zu max |gpu-cpu| %.3g (tolerance %.3g + %.3g*|cpu|)\n", what, n, worst,
         abs_tol, rel_tol);
}

TEST(cuda_ops_match_cpu) {
  kern_t *g = gpu_or_skip();
  if (!g)
    return;
  kern_t *c = NULL;
  ASSERT_OK(kern_cpu_create(&c));
  enum { M = 37, N = 53, K = 129, C = 10, R = 257 };
  static float A[K * K], Bm[K * K], Cm[M * N], ref[M * N], got[M * N];
  fill(A, K * K, 1);
  fill(Bm, K * K, 2);
  fill(Cm, M * N, 3);
  float *dA = up(g, A, sizeof(A)), *dB = up(g, Bm, sizeof(Bm));
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int lda = ta ? M : K, ldb = tb ? K : N;
      memcpy(ref, Cm, sizeof(Cm));
      ASSERT_OK(c->ops->gemm(c, ta, tb, M, N, K, 0.75f, A, lda, Bm, ldb, 1.0f, ref, N));
      float *dC = up(g, Cm, sizeof(Cm));
      ASSERT_OK(g->ops->gemm(g, ta, tb, M, N, K, 0.75f, dA, lda, dB, ldb, 1.0f, dC, N));
      down(g, got, dC, sizeof(got));
      char name[32];
      snprintf(name, sizeof(name), "gemm %c%c", ta ? 'T' : 'N', tb ? 'T' : 'N');
      assert_close(name, got, ref, M * N, 1e-5 * K, 0);
      g->ops->free(g, dC);
    }

  /* bias_fill, bias_grad */
  static float b[N], gb_ref[N], gb[N], Y[R * N], Yref[R * N];
  fill(b, N, 4);
  float *db = up(g, b, sizeof(b)), *dY = up(g, Y, sizeof(Y));
  ASSERT_OK(c->ops->bias_fill(c, Yref, b, R, N));
  ASSERT_OK(g->ops->bias_fill(g, dY, db, R, N));
  down(g, Y, dY, sizeof(Y));
  assert_close("bias_fill", Y, Yref, R * N, 0, 0);
  fill(Yref, R * N, 5);
  g->ops->free(g, dY);
  dY = up(g, Yref, sizeof(Yref));
  ASSERT_OK(c->ops->bias_grad(c, gb_ref, Yref, R, N));
  ASSERT_OK(g->ops->bias_grad(g, db, dY, R, N));
  down(g, gb, db, sizeof(gb));
  assert_close("bias_grad", gb, gb_ref, N, 1e-6 * R, 0);

  /* activations forward and backward, mul, copy */
  static const char *const act_names[] = {"linear", "relu", "tanh", "sigmoid"};
  static float x[R * N], dyv[R * N], y_ref[R * N], dy_ref[R * N], out[R * N];
  for (int a = MODEL_LINEAR; a <= MODEL_SIGMOID; a++) {
    fill(x, R * N, 10 + (uint64_t)a);
    fill(dyv, R * N, 20 + (uint64_t)a);
    memcpy(y_ref, x, sizeof(x));
    memcpy(dy_ref, dyv, sizeof(dyv));
    ASSERT_OK(c->ops->act_fwd(c, (model_act)a, y_ref, R * N));
    ASSERT_OK(c->ops->act_bwd(c, (model_act)a, y_ref, dy_ref, R * N));
    float *dx = up(g, x, sizeof(x)), *ddy = up(g, dyv, sizeof(dyv));
    ASSERT_OK(g->ops->act_fwd(g, (model_act)a, dx, R * N));
    down(g, out, dx, sizeof(out));
    char name[32];
    double tol = a == MODEL_TANH || a == MODEL_SIGMOID ? 4e-7 : 0;
    snprintf(name, sizeof(name), "%s fwd", act_names[a]);
    assert_close(name, out, y_ref, R * N, tol, 0);
    /* Backward from the CPU's y, so only the backward rounding is measured. */
    g->ops->free(g, dx);
    dx = up(g, y_ref, sizeof(y_ref));
    ASSERT_OK(g->ops->act_bwd(g, (model_act)a, dx, ddy, R * N));
    down(g, out, ddy, sizeof(out));
    snprintf(name, sizeof(name), "%s bwd", act_names[a]);
    assert_close(name, out, dy_ref, R * N, 0, a == MODEL_RELU || a == MODEL_LINEAR ? 0 : 1e-6);
    g->ops->free(g, dx);
    g->ops->free(g, ddy);
  }
  fill(x, R * N, 30);
  for (size_t i = 0; i < (size_t)R * N; i++)
    dyv[i] = (i % 3) ? 1.25f : 0.0f;
  ASSERT_OK(c->ops->mul(c, y_ref, x, dyv, R * N));
  {
    float *dx = up(g, x, sizeof(x)), *dm = up(g, dyv, sizeof(dyv)), *dyo = up(g, x, sizeof(x));
    ASSERT_OK(g->ops->mul(g, dyo, dx, dm, R * N));
    down(g, out, dyo, sizeof(out));
    assert_close("mul", out, y_ref, R * N, 0, 0);
    ASSERT_OK(g->ops->copy(g, dyo, dm, R * N));
    down(g, out, dyo, sizeof(out));
    assert_close("copy", out, dyv, R * N, 0, 0);
    g->ops->free(g, dx);
    g->ops->free(g, dm);
    g->ops->free(g, dyo);
  }

  /* softmax cross-entropy and its gradient; one label out of range */
  static float logits[R * C], probs_ref[R * C], probs[R * C], dref[R * C], dgot[R * C];
  static int32_t lab[R];
  fill(logits, R * C, 40);
  for (int i = 0; i < R * C; i++)
    logits[i] *= 4;
  for (int i = 0; i < R; i++)
    lab[i] = i == 5 ? C : (i * 7) % C;
  double st_ref[2], st[2];
  ASSERT_OK(c->ops->softmax_ce(c, logits, lab, R, C, probs_ref, st_ref));
  ASSERT_OK(c->ops->ce_grad(c, probs_ref, lab, R, C, 0.125f, dref));
  {
    float *dl = up(g, logits, sizeof(logits)), *dp = up(g, probs, sizeof(probs));
    float *dd = up(g, dgot, sizeof(dgot));
    int32_t *dlab = up(g, lab, sizeof(lab));
    double *dst = up(g, st, sizeof(st));
    ASSERT_OK(g->ops->softmax_ce(g, dl, dlab, R, C, dp, dst));
    down(g, probs, dp, sizeof(probs));
    down(g, st, dst, sizeof(st));
    assert_close("softmax", probs, probs_ref, R * C, 1e-6, 0);
    ASSERT_NEAR(st[0], st_ref[0], 1e-6 * fabs(st_ref[0]));
    ASSERT(st[1] == st_ref[1]);
    printf("# softmax_ce   loss %.9g vs %.9g, correct %.0f\n", st[0], st_ref[0], st[1]);
    /* ce_grad from the CPU's probs: measures ce_grad alone (exact). */
    g->ops->free(g, dp);
    dp = up(g, probs_ref, sizeof(probs_ref));
    ASSERT_OK(g->ops->ce_grad(g, dp, dlab, R, C, 0.125f, dd));
    down(g, dgot, dd, sizeof(dgot));
    assert_close("ce_grad", dgot, dref, R * C, 0, 0);
    g->ops->free(g, dl);
    g->ops->free(g, dp);
    g->ops->free(g, dd);
    g->ops->free(g, dlab);
    g->ops->free(g, dst);
  }

  /* optimizers: 3 updates each */
  enum { P = 4099 };
  static float w_ref[P], w[P], gr[P], s_ref[2 * P], s[2 * P];
  for (int kind = 0; kind < 4; kind++) {
    fill(w_ref, P, 50);
    fill(gr, P, 51);
    memset(s_ref, 0, sizeof(s_ref));
    float *dw = up(g, w_ref, sizeof(w_ref)), *dg = up(g, gr, sizeof(gr));
    float *ds = up(g, s_ref, sizeof(s_ref));
    for (int it = 1; it <= 3; it++) {
      float alpha = (float)(0.01 * sqrt(1.0 - pow(0.999, it)) / (1.0 - pow(0.9, it)));
      switch (kind) {
      case 0:
        ASSERT_OK(c->ops->sgd(c, w_ref, gr, NULL, P, 0.1f, 0, 0));
        ASSERT_OK(g->ops->sgd(g, dw, dg, NULL, P, 0.1f, 0, 0));
        break;
      case 1:
      case 2:
        ASSERT_OK(c->ops->sgd(c, w_ref, gr, s_ref, P, 0.1f, 0.9f, kind == 2));
        ASSERT_OK(g->ops->sgd(g, dw, dg, ds, P, 0.1f, 0.9f, kind == 2));
        break;
      default:
        ASSERT_OK(c->ops->adam(c, w_ref, gr, s_ref, s_ref + P, P, alpha, 0.9f, 0.999f, 1e-7f));
        ASSERT_OK(g->ops->adam(g, dw, dg, ds, ds + P, P, alpha, 0.9f, 0.999f, 1e-7f));
      }
    }
    down(g, w, dw, sizeof(w));
    down(g, s, ds, sizeof(s));
    static const char *const on[] = {"sgd", "sgd mom", "sgd nesterov", "adam"};
    assert_close(on[kind], w, w_ref, P, 1e-7, 1e-6);
    assert_close("  state", s, s_ref, 2 * P, 1e-7, 1e-6);
    g->ops->free(g, dw);
    g->ops->free(g, dg);
    g->ops->free(g, ds);
  }
  g->ops->free(g, dA);
  g->ops->free(g, dB);
  g->ops->free(g, db);
  g->ops->free(g, dY);
  kern_free(c);
  kern_free(g);
}

TEST(cuda_training_steps_match_cpu) {
  kern_t *g = gpu_or_skip();
  if (!g)
    return;
  run_steps(g, MLP, "adam", 0, 0, 5, 1e-4);
  run_steps(g, MLP, "sgd", 0.9f, 1, 5, 1e-4);
  printf("# 5 Adam and 5 Nesterov steps on the GPU within 1e-4 of the CPU reference\n");
  kern_free(g);
}

TEST(cuda_bad_device_is_named) {
  kern_t *k = NULL;
  char err[256] = "";
  devinfo di;
  ASSERT_OK(devinfo_probe(&di));
  if (di.gpu_count == 0) {
    TEST_SKIP("no GPU: %s", di.why_none);
  }
  ASSERT_EQ(kern_cuda_create(di.gpu_count + 3, &k, err, sizeof(err)), CTRAIN_E_CUDA);
  ASSERT_STR_CONTAINS(err, "cudaSetDevice");
  printf("# %s\n", err);
}

TEST_MAIN(T(cpu_replicas_step_identically), T(cpu_grads_from_host_drive_the_update),
          T(cuda_unavailable_is_reported), T(cuda_ops_match_cpu), T(cuda_training_steps_match_cpu),
          T(cuda_bad_device_is_named))
