/* test_train_lr.c - the learning rate of each global step (train_lr): the
 * linear warm-up, then constant, or Keras' CosineDecay (alpha 0) over the
 * rest of the run's steps; and the backup config hash, which a cosine
 * schedule's run length joins (a constant rate's hash is unchanged). */
#include "test.h"

#include <math.h>
#include <string.h>

#include "worker/train_internal.h"

static train_ctx ctx(wk_options *o, int epochs, size_t steps, int warmup, wk_lr_schedule s) {
  memset(o, 0, sizeof(*o));
  o->epochs = epochs;
  o->warmup_steps = warmup;
  o->lr_schedule = s;
  train_ctx x;
  memset(&x, 0, sizeof(x));
  x.o = o;
  x.steps = steps;
  x.lr = 0.002;
  return x;
}

TEST(constant_after_warmup) {
  wk_options o;
  train_ctx x = ctx(&o, 3, 100, 10, WK_LR_CONSTANT);
  ASSERT_NEAR(train_lr(&x, 0), 0.0002, 1e-15);
  ASSERT_NEAR(train_lr(&x, 9), 0.002, 1e-15);
  ASSERT_NEAR(train_lr(&x, 10), 0.002, 1e-15);
  ASSERT_NEAR(train_lr(&x, 299), 0.002, 1e-15);
  x = ctx(&o, 3, 100, 0, WK_LR_CONSTANT);
  ASSERT_NEAR(train_lr(&x, 0), 0.002, 1e-15);
}

/* Keras: lr * 0.5 * (1 + cos(pi * step / decay_steps)), step from 0 at the
 * first step after the warm-up, decay_steps the steps left after it. */
TEST(cosine_is_keras_cosine_decay) {
  wk_options o;
  train_ctx x = ctx(&o, 4, 50, 0, WK_LR_COSINE);
  for (uint64_t g = 0; g < 200; g++)
    ASSERT_NEAR(train_lr(&x, g), 0.002 * 0.5 * (1 + cos(M_PI * (double)g / 200.0)), 1e-15);
  ASSERT_NEAR(train_lr(&x, 0), 0.002, 1e-15);
  ASSERT_NEAR(train_lr(&x, 100), 0.001, 1e-15);
  ASSERT(train_lr(&x, 199) < 0.002 * 1e-3);
  ASSERT_NEAR(train_lr(&x, 200), 0.0, 1e-18); /* past the end (never run): 0, not rising */
  ASSERT_NEAR(train_lr(&x, 1000), 0.0, 1e-18);
  /* With a warm-up: linear to lr, then the decay over the 190 steps left. */
  x = ctx(&o, 4, 50, 10, WK_LR_COSINE);
  ASSERT_NEAR(train_lr(&x, 4), 0.001, 1e-15);
  ASSERT_NEAR(train_lr(&x, 9), 0.002, 1e-15);
  ASSERT_NEAR(train_lr(&x, 10), 0.002, 1e-15);
  ASSERT_NEAR(train_lr(&x, 105), 0.001, 1e-15);
  /* A warm-up as long as the run: warm-up only. */
  x = ctx(&o, 1, 10, 10, WK_LR_COSINE);
  ASSERT_NEAR(train_lr(&x, 9), 0.002, 1e-15);
}

TEST(cosine_joins_the_config_hash_constant_does_not_change_it) {
  const char *json = "{\"name\":\"t\",\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\","
                     "\"units\":2}]}";
  model_t *m = NULL;
  char err[256];
  ASSERT_OK(model_from_json(json, &m, err, sizeof(err)));
  data_set ds;
  memset(&ds, 0, sizeof(ds));
  wk_options o;
  memset(&o, 0, sizeof(o));
  o.optimizer = "adam";
  o.lr = 0.001;
  o.batch = 32;
  o.epochs = 10;
  uint8_t constant[CKPT_HASH_BYTES], constant20[CKPT_HASH_BYTES], cos10[CKPT_HASH_BYTES],
      cos20[CKPT_HASH_BYTES];
  train_config_hash(&o, m, &ds, NULL, 2, 1, constant);
  o.epochs = 20;
  train_config_hash(&o, m, &ds, NULL, 2, 1, constant20);
  o.lr_schedule = WK_LR_COSINE;
  train_config_hash(&o, m, &ds, NULL, 2, 1, cos20);
  o.epochs = 10;
  train_config_hash(&o, m, &ds, NULL, 2, 1, cos10);
  ASSERT_EQ(memcmp(constant, constant20, sizeof(constant)), 0); /* more epochs resume */
  ASSERT_NE(memcmp(constant, cos10, sizeof(constant)), 0);
  ASSERT_NE(memcmp(cos10, cos20, sizeof(constant)), 0);
  model_free(m);
}

TEST_MAIN(T(constant_after_warmup), T(cosine_is_keras_cosine_decay),
          T(cosine_joins_the_config_hash_constant_does_not_change_it))
