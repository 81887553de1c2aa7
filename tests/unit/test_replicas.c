/* test_replicas.c - a worker's local replicas (replicas.h) on the CPU
 * reference backend: the local reduce is the sum of the replicas' gradients,
 * every replica applies the same update and stays bitwise equal to the
 * others, and R replicas x batch B step where one model with batch R*B does
 * (within fp32 summation-order error). */
#include "test.h"

#include "worker/devinfo.h"
#include "worker/model/dmodel.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/model/optim.h"
#include "worker/model/replicas.h"

static const char *const MLP = "{\"input_shape\":[12],\"layers\":["
                               "{\"type\":\"Dense\",\"units\":16,\"activation\":\"relu\"},"
                               "{\"type\":\"Dense\",\"units\":8,\"activation\":\"tanh\"},"
                               "{\"type\":\"Dense\",\"units\":4}]}";

static model_t *build(const char *json) {
  model_t *m = NULL;
  char err[256] = "";
  if (model_from_json(json, &m, err, sizeof(err)))
    TEST_FAIL_("model_from_json: %s", err);
  model_init(m, 3);
  return m;
}

static optim_t *make_opt(size_t n) {
  optim_t *o = NULL;
  char err[256] = "";
  if (optim_create("adam", n, 0, 0, &o, err, sizeof(err)))
    TEST_FAIL_("optim_create: %s", err);
  return o;
}

static void fill(float *x, int32_t *y, int B, int dim, uint64_t seed) {
  rng_t r;
  rng_seed(&r, seed, 5);
  for (int i = 0; i < B * dim; i++)
    x[i] = rng_uniform(&r) * 2 - 1;
  for (int i = 0; i < B; i++)
    y[i] = (int32_t)(rng_next(&r) % 4);
}

TEST(reduce_is_the_sum_and_replicas_stay_equal) {
  enum { R = 3, B = 4, D = 12, STEPS = 5 };
  model_t *m = build(MLP);
  optim_t *o = make_opt(m->n_params);
  replica_set *rs = NULL;
  char err[512] = "";
  if (replicas_create(m, o, R, 0, B, 1, &rs, err, sizeof(err)))
    TEST_FAIL_("replicas_create: %s", err);
  ASSERT_EQ(rs->n, R);
  ASSERT_OK(replicas_push(rs, m, o, err, sizeof(err)));
  float x[R][B * D], *g = malloc(R * m->n_params * sizeof(float));
  int32_t y[R][B];
  ASSERT_NOT_NULL(g);
  for (int s = 0; s < STEPS; s++) {
    for (int r = 0; r < R; r++) {
      fill(x[r], y[r], B, D, 100 * (uint64_t)s + (uint64_t)r);
      ASSERT_OK(replicas_step(rs, r, x[r], y[r], B, 1, 1.0f / (R * B), 1, err, sizeof(err)));
    }
    ASSERT_OK(replicas_wait(rs, err, sizeof(err)));
    /* What each replica computed, read before the reduce (on the CPU,
     * replica 0 writes its gradients into the reduce's buffer). */
    for (int r = 0; r < R; r++)
      ASSERT_OK(dmodel_grads_to_host(rs->d[r], g + (size_t)r * m->n_params));
    ASSERT_OK(replicas_reduce(rs, err, sizeof(err)));
    /* The sum, in replica order, of what each replica computed. */
    for (size_t i = 0; i < m->n_params; i++) {
      float want = g[i];
      for (int r = 1; r < R; r++)
        want += g[(size_t)r * m->n_params + i];
      ASSERT(rs->sum[i] == want);
    }
    ASSERT_OK(replicas_apply(rs, o, 0.01f, err, sizeof(err)));
    ASSERT_EQ(o->iterations, (uint64_t)s + 1); /* one update, not R */
  }
  /* Every replica holds the same weights and optimizer state, bit for bit. */
  model_t *other = build(MLP);
  optim_t *oo = make_opt(m->n_params);
  ASSERT_OK(replicas_pull(rs, m, o, err, sizeof(err)));
  for (int r = 1; r < R; r++) {
    ASSERT_OK(dmodel_pull(rs->d[r], other, oo));
    ASSERT_OK(memcmp(other->params, m->params, m->n_params * sizeof(float)));
    ASSERT_OK(memcmp(oo->state, o->state, 2 * m->n_params * sizeof(float)));
  }
  free(g);
  replicas_free(rs);
  optim_free(o);
  optim_free(oo);
  model_free(m);
  model_free(other);
}

TEST(two_replicas_step_like_one_model_with_twice_the_batch) {
  enum { R = 2, B = 5, D = 12, STEPS = 6 };
  model_t *m = build(MLP), *big = build(MLP);
  optim_t *o = make_opt(m->n_params), *ob = make_opt(m->n_params);
  replica_set *rs = NULL, *one = NULL;
  char err[512] = "";
  ASSERT_OK(replicas_create(m, o, R, 0, B, 1, &rs, err, sizeof(err)));
  ASSERT_OK(replicas_create(big, ob, 1, 0, R * B, 1, &one, err, sizeof(err)));
  ASSERT_OK(replicas_push(rs, m, o, err, sizeof(err)));
  ASSERT_OK(replicas_push(one, big, ob, err, sizeof(err)));
  float x[R * B * D];
  int32_t y[R * B];
  for (int s = 0; s < STEPS; s++) {
    fill(x, y, R * B, D, 7 + (uint64_t)s);
    /* Replica r takes the contiguous slice r of the step's batch. */
    for (int r = 0; r < R; r++)
      ASSERT_OK(replicas_step(rs, r, x + r * B * D, y + r * B, B, 1, 1.0f / (R * B), 1, err,
                              sizeof(err)));
    ASSERT_OK(replicas_step(one, 0, x, y, R * B, 1, 1.0f / (R * B), 1, err, sizeof(err)));
    ASSERT_OK(replicas_wait(rs, err, sizeof(err)));
    ASSERT_OK(replicas_wait(one, err, sizeof(err)));
    ASSERT_NEAR(rs->loss[0] + rs->loss[1], one->loss[0], 1e-5 * one->loss[0]);
    ASSERT_EQ(rs->correct[0] + rs->correct[1], one->correct[0]);
    ASSERT_OK(replicas_reduce(rs, err, sizeof(err)));
    ASSERT_OK(replicas_reduce(one, err, sizeof(err)));
    ASSERT_OK(replicas_apply(rs, o, 0.01f, err, sizeof(err)));
    ASSERT_OK(replicas_apply(one, ob, 0.01f, err, sizeof(err)));
  }
  ASSERT_OK(replicas_pull(rs, m, o, err, sizeof(err)));
  ASSERT_OK(replicas_pull(one, big, ob, err, sizeof(err)));
  double worst = 0;
  for (size_t i = 0; i < m->n_params; i++) {
    double e = fabs((double)m->params[i] - (double)big->params[i]);
    worst = e > worst ? e : worst;
  }
  printf("# 2 x batch %d vs 1 x batch %d after %d Adam steps: max |diff| %.3g\n", B, R * B, STEPS,
         worst);
  ASSERT(worst <= 1e-5);
  replicas_free(rs);
  replicas_free(one);
  optim_free(o);
  optim_free(ob);
  model_free(m);
  model_free(big);
}

/* CPU replicas step on their pool's threads (replicas_step_all), their
 * gradients are summed in slices on those threads and each applies its own
 * update there: the same bits as stepping them one after another on this
 * thread, for 3 replicas and 380 parameters (slices of 128, 128 and 124). */
TEST(threaded_steps_are_the_steps_in_turn) {
  enum { R = 3, B = 4, D = 12, STEPS = 4 };
  model_t *m = build(MLP), *m2 = build(MLP);
  optim_t *o = make_opt(m->n_params), *o2 = make_opt(m->n_params);
  replica_set *rs = NULL, *turn = NULL;
  char err[512] = "";
  ASSERT_EQ(m->n_params, (size_t)380);
  ASSERT_OK(replicas_create(m, o, R, 0, B, 1, &rs, err, sizeof(err)));
  ASSERT_OK(replicas_create(m2, o2, R, 0, B, 1, &turn, err, sizeof(err)));
  ASSERT_OK(replicas_push(rs, m, o, err, sizeof(err)));
  ASSERT_OK(replicas_push(turn, m2, o2, err, sizeof(err)));
  float x[R * B * D];
  int32_t y[R * B];
  for (int s = 0; s < STEPS; s++) {
    fill(x, y, R * B, D, 31 + (uint64_t)s);
    ASSERT_OK(replicas_step_all(rs, x, y, B, 1, 1.0f / (R * B), 1, err, sizeof(err)));
    for (int r = 0; r < R; r++)
      ASSERT_OK(replicas_step(turn, r, x + r * B * D, y + r * B, B, 1, 1.0f / (R * B), 1, err,
                              sizeof(err)));
    ASSERT_OK(replicas_wait(rs, err, sizeof(err)));
    ASSERT_OK(replicas_wait(turn, err, sizeof(err)));
    for (int r = 0; r < R; r++)
      ASSERT(rs->loss[r] == turn->loss[r]);
    ASSERT_OK(replicas_reduce(rs, err, sizeof(err)));
    ASSERT_OK(replicas_reduce(turn, err, sizeof(err)));
    ASSERT_OK(memcmp(rs->sum, turn->sum, m->n_params * sizeof(float)));
    ASSERT_OK(replicas_apply(rs, o, 0.01f, err, sizeof(err)));
    ASSERT_OK(replicas_apply(turn, o2, 0.01f, err, sizeof(err)));
  }
  model_t *other = build(MLP);
  optim_t *oo = make_opt(m->n_params);
  ASSERT_OK(replicas_pull(turn, m2, o2, err, sizeof(err)));
  for (int r = 0; r < R; r++) { /* every threaded replica: the in-turn one's bits */
    ASSERT_OK(dmodel_pull(rs->d[r], other, oo));
    ASSERT_OK(memcmp(other->params, m2->params, m->n_params * sizeof(float)));
    ASSERT_OK(memcmp(oo->state, o2->state, 2 * m->n_params * sizeof(float)));
  }
  ASSERT_EQ(o->iterations, (uint64_t)STEPS);
  replicas_free(rs);
  replicas_free(turn);
  optim_free(o);
  optim_free(o2);
  optim_free(oo);
  model_free(m);
  model_free(m2);
  model_free(other);
}

/* On a GPU machine: min(2, visible) GPU replicas train like as many CPU
 * replicas (within the fp32 tolerance test_kernels.c states for whole steps),
 * one host thread driving every device. */
TEST(gpu_replicas_match_cpu_replicas) {
  devinfo di;
  ASSERT_OK(devinfo_probe(&di));
  if (di.gpu_count == 0) {
    TEST_SKIP("no GPU: %s", di.why_none);
  }
  enum { B = 6, D = 12, STEPS = 5 };
  int R = di.gpu_count >= 2 ? 2 : 1;
  model_t *mc = build(MLP), *mg = build(MLP);
  optim_t *oc = make_opt(mc->n_params), *og = make_opt(mg->n_params);
  replica_set *cpu = NULL, *gpu = NULL;
  char err[512] = "";
  ASSERT_OK(replicas_create(mc, oc, R, 0, B, 1, &cpu, err, sizeof(err)));
  if (replicas_create(mg, og, R, 1, B, 1, &gpu, err, sizeof(err)))
    TEST_FAIL_("replicas_create on %d GPU(s): %s", R, err);
  ASSERT_OK(replicas_push(cpu, mc, oc, err, sizeof(err)));
  ASSERT_OK(replicas_push(gpu, mg, og, err, sizeof(err)));
  float x[B * D];
  int32_t y[B];
  for (int s = 0; s < STEPS; s++) {
    for (int r = 0; r < R; r++) {
      fill(x, y, B, D, 50 + 10 * (uint64_t)s + (uint64_t)r);
      ASSERT_OK(replicas_step(cpu, r, x, y, B, 1, 1.0f / (R * B), 1, err, sizeof(err)));
      ASSERT_OK(replicas_step(gpu, r, x, y, B, 1, 1.0f / (R * B), 1, err, sizeof(err)));
    }
    ASSERT_OK(replicas_wait(cpu, err, sizeof(err)));
    ASSERT_OK(replicas_wait(gpu, err, sizeof(err)));
    ASSERT_OK(replicas_reduce(cpu, err, sizeof(err)));
    ASSERT_OK(replicas_reduce(gpu, err, sizeof(err)));
    ASSERT_OK(replicas_apply(cpu, oc, 0.01f, err, sizeof(err)));
    ASSERT_OK(replicas_apply(gpu, og, 0.01f, err, sizeof(err)));
  }
  ASSERT_OK(replicas_pull(cpu, mc, oc, err, sizeof(err)));
  model_t *other = build(MLP);
  double worst = 0;
  for (int r = 0; r < R; r++) {
    ASSERT_OK(dmodel_pull(gpu->d[r], other, NULL));
    for (size_t i = 0; i < mc->n_params; i++) {
      double e = fabs((double)other->params[i] - (double)mc->params[i]);
      worst = e > worst ? e : worst;
    }
  }
  printf("# %d GPU replica(s) vs CPU after %d Adam steps: max |diff| %.3g\n", R, STEPS, worst);
  ASSERT(worst <= 1e-4);
  replicas_free(cpu);
  replicas_free(gpu);
  optim_free(oc);
  optim_free(og);
  model_free(mc);
  model_free(mg);
  model_free(other);
}

TEST(create_errors_are_named) {
  model_t *m = build(MLP);
  replica_set *rs = NULL;
  char err[512] = "";
  ASSERT_EQ(replicas_create(m, NULL, 0, 0, 4, 0, &rs, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NULL(rs);
  ASSERT_STR_CONTAINS(err, "replicas: 0");
#ifndef CTRAIN_HAVE_CUDA
  ASSERT_EQ(replicas_create(m, NULL, 1, 1, 4, 0, &rs, err, sizeof(err)), CTRAIN_E_UNSUPPORTED);
  ASSERT_NULL(rs);
  ASSERT_STR_CONTAINS(err, "replica 0: CUDA backend: built without the CUDA path");
#endif
  model_free(m);
}

TEST_MAIN(T(reduce_is_the_sum_and_replicas_stay_equal),
          T(two_replicas_step_like_one_model_with_twice_the_batch),
          T(threaded_steps_are_the_steps_in_turn), T(gpu_replicas_match_cpu_replicas),
          T(create_errors_are_named))
