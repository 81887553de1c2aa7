/* test_optim.c - optimizer updates (issued on the CPU reference backend)
 * against values computed by hand from Keras's formulas. */
#include "test.h"

#include "worker/model/optim.h"

static optim_t *make(const char *name, size_t n, float mom, int nesterov) {
  optim_t *o = NULL;
  char err[256] = "";
  ASSERT_OK(optim_create(name, n, mom, nesterov, &o, err, sizeof(err)));
  return o;
}

/* One optim_update on the CPU backend, whose memory is the host's: the
 * optimizer's own state array serves as the backend state. */
static void step(optim_t *o, float *w, const float *g, float lr) {
  kern_t *k = NULL;
  ASSERT_OK(kern_cpu_create(&k));
  ASSERT_OK(optim_update(o, k, w, g, o->state, lr));
  kern_free(k);
}

TEST(sgd_plain) {
  optim_t *o = make("sgd", 2, 0, 0);
  float w[2] = {1, -1}, g[2] = {0.5f, -2};
  step(o, w, g, 0.1f);
  ASSERT_NEAR(w[0], 0.95, 1e-7);
  ASSERT_NEAR(w[1], -0.8, 1e-7);
  ASSERT_NULL(o->state);
  optim_free(o);
}

TEST(sgd_momentum) {
  optim_t *o = make("sgd", 1, 0.9f, 0);
  float w = 1, g = 1;
  step(o, &w, &g, 0.1f); /* v = -0.1, w = 0.9 */
  ASSERT_NEAR(w, 0.9, 1e-7);
  step(o, &w, &g, 0.1f); /* v = -0.09 - 0.1 = -0.19, w = 0.71 */
  ASSERT_NEAR(w, 0.71, 1e-6);
  optim_free(o);
}

TEST(sgd_nesterov) {
  optim_t *o = make("sgd", 1, 0.9f, 1);
  float w = 1, g = 1;
  step(o, &w, &g, 0.1f); /* v = -0.1; w += 0.9*-0.1 - 0.1 = -0.19 */
  ASSERT_NEAR(w, 0.81, 1e-6);
  step(o, &w, &g, 0.1f); /* v = -0.19; w += -0.171 - 0.1 */
  ASSERT_NEAR(w, 0.539, 1e-6);
  optim_free(o);
}

TEST(adam_keras_defaults) {
  optim_t *o = make("adam", 1, 0, 0);
  ASSERT_NEAR(o->beta1, 0.9, 1e-7);
  ASSERT_NEAR(o->beta2, 0.999, 1e-7);
  ASSERT_NEAR(o->epsilon, 1e-7, 1e-12);
  float w = 1, g = 0.5f;
  /* t=1: m = 0.05, v = 0.00025, alpha = 0.001*sqrt(0.001)/0.1;
   * w -= alpha*m/(sqrt(v)+eps) = 0.001 * 0.05/0.1 * sqrt(.001)/sqrt(.00025) ~ 0.001 */
  step(o, &w, &g, 0.001f);
  double alpha = 0.001 * sqrt(1 - 0.999) / (1 - 0.9);
  double want = 1 - alpha * 0.05 / (sqrt(0.00025) + 1e-7);
  ASSERT_NEAR(w, want, 1e-7);
  /* t=2 with g=-1: m = 0.045 - 0.1 = -0.055; v = 0.00024975 + 0.001 */
  float g2 = -1;
  step(o, &w, &g2, 0.001f);
  double m2 = 0.9 * 0.05 + 0.1 * -1, v2 = 0.999 * 0.00025 + 0.001 * 1;
  double a2 = 0.001 * sqrt(1 - 0.999 * 0.999) / (1 - 0.81);
  want = want - a2 * m2 / (sqrt(v2) + 1e-7);
  ASSERT_NEAR(w, want, 1e-6);
  ASSERT_EQ(o->iterations, 2);
  optim_free(o);
}

TEST(unknown_name) {
  optim_t *o = NULL;
  char err[256] = "";
  ASSERT_EQ(optim_create("rmsprop", 3, 0, 0, &o, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_NULL(o);
  ASSERT_STR_CONTAINS(err, "'rmsprop'");
}

/* The update flushes denormal floats to zero (as TensorFlow's CPU kernels
 * do): denormal moments (a weight whose gradient has been 0 for long) read
 * as 0 and stay 0, normal values are those of the plain formulas, and the
 * caller's floating-point mode is as it was. 20 elements: the vector loop
 * and the scalar tail. */
TEST(adam_flushes_denormal_moments) {
  enum { N = 20 };
  optim_t *o = make("adam", N, 0, 0);
  float w[N], g[N], *m = o->state, *v = m + N;
  for (int i = 0; i < N; i++) {
    w[i] = 1;
    g[i] = i % 2 ? 0.5f : 0.0f;
    m[i] = v[i] = i % 2 ? 0.0f : 1e-39f; /* denormal: 0.9 and 0.999 of it would be too */
  }
  step(o, w, g, 0.001f);
  for (int i = 0; i < N; i++) {
    if (i % 2) {
      ASSERT_NEAR(m[i], 0.05, 1e-7);
      ASSERT_NEAR(v[i], 0.00025, 1e-8);
      ASSERT(w[i] < 1);
    } else {
      ASSERT(m[i] == 0.0f);
      ASSERT(v[i] == 0.0f);
      ASSERT(w[i] == 1.0f);
    }
  }
  volatile float tiny = 1e-38f; /* the caller's mode: denormals still there */
  ASSERT(tiny / 4 != 0.0f);
  optim_free(o);
}

TEST_MAIN(T(sgd_plain), T(sgd_momentum), T(sgd_nesterov), T(adam_keras_defaults),
          T(adam_flushes_denormal_moments), T(unknown_name))
