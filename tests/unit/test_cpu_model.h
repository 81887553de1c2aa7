/* test_cpu_model.h - a model from JSON on the CPU reference backend and
 * its loss (and gradient) at the current parameters, for the model unit
 * tests (one copy, header-only like test.h). */
#ifndef CTRAIN_TEST_CPU_MODEL_H
#define CTRAIN_TEST_CPU_MODEL_H

#include "test.h"
#include "ctrain/rng.h"
#include "worker/model/dmodel.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"

__attribute__((unused)) static model_t *build(const char *json) {
  model_t *m = NULL;
  char err[256] = "";
  ctrain_err rc = model_from_json(json, &m, err, sizeof(err));
  if (rc)
    TEST_FAIL_("model_from_json: %s", err);
  return m;
}

/* A small CNN with two BatchNormalization layers (after a Conv2D and after
 * a Dense), for the synchronized-statistics tests. */
#define SYNC_MODEL                                                                                 \
  "{\"input_shape\":[5,5,1],\"layers\":[{\"type\":\"Conv2D\",\"filters\":3,\"kernel_size\":3,"     \
  "\"padding\":\"same\"},{\"type\":\"BatchNormalization\"},{\"type\":\"ReLU\"},"                   \
  "{\"type\":\"MaxPooling2D\"},{\"type\":\"Flatten\"},{\"type\":\"Dense\",\"units\":4},"           \
  "{\"type\":\"BatchNormalization\",\"momentum\":0.5},{\"type\":\"Dense\",\"units\":3}]}"

/* The model's one math path: a dmodel on the CPU reference backend. */
typedef struct {
  model_t *m;
  kern_t *k;
  dmodel_t *d;
} cpu_model;

__attribute__((unused)) static void cpu_open(cpu_model *c, model_t *m, int B) {
  char err[256] = "";
  c->m = m;
  ASSERT_OK(kern_cpu_create(&c->k));
  if (dmodel_create(c->k, m, NULL, B, &c->d, err, sizeof(err)))
    TEST_FAIL_("dmodel_create: %s", err);
}

__attribute__((unused)) static void cpu_close(cpu_model *c) {
  dmodel_free(c->d);
  kern_free(c->k);
  model_free(c->m);
}

/* Summed loss at m->params, dropout masks from a fixed seed; with `grads`,
 * also d(scale * loss)/d(params) into it. */
__attribute__((unused)) static double loss_at(cpu_model *c, const float *x, const int32_t *y, int B,
                                              float scale, float *grads) {
  rng_t r;
  rng_seed(&r, 7, 1);
  long correct = 0;
  double loss = 0;
  ASSERT_OK(dmodel_push(c->d, c->m, NULL));
  ASSERT_OK(dmodel_step(c->d, x, y, B, 1, &r, scale, grads != NULL));
  ASSERT_OK(dmodel_stats(c->d, &loss, &correct));
  if (grads)
    ASSERT_OK(dmodel_grads_to_host(c->d, grads));
  return loss;
}

/* Random inputs in [-1, 1] and labels for B samples of m. */
__attribute__((unused)) static void random_batch(const model_t *m, int B, uint64_t seed, float *x,
                                                 int32_t *y) {
  rng_t r;
  rng_seed(&r, seed, 0);
  for (int i = 0; i < B * m->input_dim; i++)
    x[i] = rng_uniform(&r) * 2 - 1;
  for (int b = 0; b < B; b++)
    y[b] = (int32_t)(rng_uniform(&r) * (float)m->n_classes) % m->n_classes;
}

/* The synchronized tests' reference: SYNC_MODEL (weights from seed 2) as one
 * replica at batch B on a random batch from `seed` (into x, y); its loss,
 * and d(0.1 * loss)/d(params) into *g (owned by the caller). */
__attribute__((unused)) static double sync_reference(cpu_model *whole, int B, uint64_t seed,
                                                     float *x, int32_t *y, float **g) {
  cpu_open(whole, build(SYNC_MODEL), B);
  model_init(whole->m, 2);
  random_batch(whole->m, B, seed, x, y);
  *g = calloc(whole->m->n_params, sizeof(float));
  ASSERT_NOT_NULL(*g);
  return loss_at(whole, x, y, B, 0.1f, *g);
}

#endif
