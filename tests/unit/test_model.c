/* test_model.c - config parsing and errors, Glorot init, and every layer's
 * gradient (through the loss, on the CPU reference backend: the path training
 * runs) against central finite differences. */
#include "test.h"

#include "worker/model/dmodel.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"

#include "test_cpu_model.h"

static void check_gradients(const char *json) {
  enum { B = 5 };
  cpu_model c;
  cpu_open(&c, build(json), B);
  model_t *m = c.m;
  float x[B * 6];
  int32_t y[B] = {0, 2, 1, 2, 0};
  rng_t r;
  rng_seed(&r, 3, 0);
  for (int i = 0; i < B * 6; i++)
    x[i] = rng_uniform(&r) * 2 - 1;
  model_init(m, 11);
  for (size_t k = 0; k < m->n_params; k++) /* non-zero biases too */
    m->params[k] += (rng_uniform(&r) - 0.5f) * 0.2f;
  float *grads = calloc(m->n_params, sizeof(float));
  ASSERT_NOT_NULL(grads);
  loss_at(&c, x, y, B, 0.5f, grads);
  int checked = 0;
  for (size_t k = 0; k < m->n_params; k++) {
    float save = m->params[k], h = 1e-2f;
    m->params[k] = save + h;
    double lp = loss_at(&c, x, y, B, 1, NULL);
    m->params[k] = save - h;
    double lm = loss_at(&c, x, y, B, 1, NULL);
    m->params[k] = save;
    double num = 0.5 * (lp - lm) / (2.0 * h);
    ASSERT_NEAR(grads[k], num, 2e-3 + 2e-2 * fabs(num));
    checked++;
  }
  ASSERT_EQ((size_t)checked, m->n_params);
  free(grads);
  cpu_close(&c);
}

TEST(grad_dense_relu) {
  check_gradients("{\"input_shape\":[2,3],\"layers\":[{\"type\":\"Flatten\"},"
                  "{\"type\":\"Dense\",\"units\":4,\"activation\":\"relu\"},"
                  "{\"type\":\"Dense\",\"units\":3}]}");
}

TEST(grad_dense_tanh_sigmoid) {
  check_gradients("{\"input_shape\":[6],\"layers\":["
                  "{\"type\":\"Dense\",\"units\":4,\"activation\":\"tanh\"},"
                  "{\"type\":\"Dense\",\"units\":5,\"activation\":\"sigmoid\"},"
                  "{\"type\":\"Dense\",\"units\":3,\"activation\":\"softmax\"}]}");
}

TEST(grad_activation_dropout) {
  check_gradients("{\"input_shape\":[6],\"layers\":["
                  "{\"class_name\":\"Dense\",\"config\":{\"units\":8}},"
                  "{\"type\":\"Activation\",\"activation\":\"tanh\"},"
                  "{\"type\":\"Dropout\",\"rate\":0.5},"
                  "{\"type\":\"Dense\",\"units\":3}]}");
}

/* Layers below the first Dense need no gradient: the backward pass stops
 * at it, and the parameters' gradients are still right. */
TEST(grad_below_first_dense) {
  check_gradients("{\"input_shape\":[2,3],\"layers\":[{\"type\":\"Flatten\"},"
                  "{\"type\":\"Dropout\",\"rate\":0.5},"
                  "{\"type\":\"Activation\",\"activation\":\"tanh\"},"
                  "{\"type\":\"Dense\",\"units\":4,\"activation\":\"relu\"},"
                  "{\"type\":\"Dense\",\"units\":3}]}");
}

TEST(loss_and_accuracy) {
  cpu_model c;
  cpu_open(&c, build("{\"input_shape\":[2],\"layers\":[{\"type\":\"Dense\",\"units\":2}]}"), 2);
  model_t *m = c.m;
  /* W = identity, b = 0: logits = x. */
  m->params[0] = 1;
  m->params[3] = 1;
  float x[4] = {2, 0, 0, 1};
  int32_t y[2] = {0, 0};
  long correct = 0;
  double l = 0;
  ASSERT_OK(dmodel_push(c.d, m, NULL));
  ASSERT_OK(dmodel_step(c.d, x, y, 2, 0, NULL, 1, 0));
  ASSERT_OK(dmodel_stats(c.d, &l, &correct));
  ASSERT_EQ(correct, 1);
  ASSERT_NEAR(l, log(1 + exp(-2.0)) + log(1 + exp(1.0)), 1e-6);
  /* A batch past the capacity is refused, naming it. */
  ASSERT_EQ(dmodel_step(c.d, x, y, 3, 0, NULL, 1, 0), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(dmodel_errmsg(c.d), "batch 3");
  ASSERT(!model_has_dropout(m));
  cpu_close(&c);
}

TEST(layout_and_init) {
  model_t *m = build("{\"input_shape\":[28,28],\"layers\":[{\"type\":\"Flatten\"},"
                     "{\"type\":\"Dense\",\"units\":128,\"activation\":\"relu\"},"
                     "{\"type\":\"Dense\",\"units\":10}]}");
  ASSERT_EQ(m->n_params, 784 * 128 + 128 + 128 * 10 + 10);
  ASSERT_EQ(m->input_dim, 784);
  ASSERT_EQ(m->n_classes, 10);
  ASSERT_STR_EQ(m->layers[1].name, "dense");
  ASSERT_STR_EQ(m->layers[2].name, "dense_1");
  ASSERT_EQ(m->layers[2].w_off, 784 * 128 + 128);
  model_init(m, 42);
  float limit = sqrtf(6.0f / (784 + 128)), mx = 0;
  double sum = 0;
  for (size_t k = 0; k < 784 * 128; k++) {
    mx = fmaxf(mx, fabsf(m->params[k]));
    sum += m->params[k];
  }
  ASSERT(mx <= limit);
  ASSERT(mx > 0.99f * limit);
  ASSERT_NEAR(sum / (784 * 128), 0, limit * 0.01);
  for (int c = 0; c < 128; c++)
    ASSERT_EQ(m->params[784 * 128 + c], 0);
  float first = m->params[0];
  model_init(m, 42);
  ASSERT_EQ(m->params[0], first);
  model_init(m, 43);
  ASSERT(m->params[0] != first);
  model_free(m);
}

static void expect_err(const char *json, ctrain_err code, const char *needle) {
  model_t *m = NULL;
  char err[256] = "";
  ASSERT_EQ(model_from_json(json, &m, err, sizeof(err)), code);
  ASSERT_NULL(m);
  ASSERT_STR_CONTAINS(err, needle);
}

TEST(config_errors) {
  expect_err("{\"input_shape\":[2],", CTRAIN_E_PARSE, "malformed JSON");
  expect_err("{\"layers\":[]}", CTRAIN_E_CONFIG, "input_shape");
  expect_err("{\"input_shape\":[2],\"layers\":[{\"type\":\"Conv3D\"}]}", CTRAIN_E_CONFIG,
             "layers[0]: unknown layer type 'Conv3D'");
  expect_err("{\"input_shape\":[2],\"layers\":[{\"type\":\"Dense\",\"units\":0}]}", CTRAIN_E_CONFIG,
             "layers[0] (Dense).units");
  expect_err("{\"input_shape\":[2],\"layers\":[{\"type\":\"Dense\",\"units\":3,"
             "\"activation\":\"gelu\"}]}",
             CTRAIN_E_CONFIG, "unknown activation 'gelu'");
  expect_err("{\"input_shape\":[2,2],\"layers\":[{\"type\":\"Dense\",\"units\":3}]}",
             CTRAIN_E_CONFIG, "add a Flatten");
  expect_err("{\"input_shape\":[2],\"layers\":[{\"type\":\"Dense\",\"units\":3},"
             "{\"type\":\"Dropout\",\"rate\":1.5},{\"type\":\"Dense\",\"units\":3}]}",
             CTRAIN_E_CONFIG, "layers[1] (Dropout).rate");
  model_t *m = NULL;
  char err[256] = "";
  ASSERT_EQ(model_load_file("/nonexistent/model.json", &m, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "/nonexistent/model.json");
}

/* cJSON keeps a repeated key as a second member and a
 * lookup takes the first, so the model built and the config saved beside it
 * could disagree. Any object level is refused, naming the path and key. */
TEST(duplicate_keys_are_config_errors) {
  expect_err("{\"input_shape\":[2],\"layers\":[{\"type\":\"Dense\",\"units\":3,\"units\":2}]}",
             CTRAIN_E_CONFIG, "model config: layers[0]: duplicate key 'units'");
  expect_err("{\"input_shape\":[2],\"layers\":[{\"type\":\"Dense\",\"units\":3},"
             "{\"type\":\"Dense\",\"type\":\"Dropout\",\"units\":2,\"rate\":0.1}]}",
             CTRAIN_E_CONFIG, "model config: layers[1]: duplicate key 'type'");
  expect_err("{\"input_shape\":[2],\"layers\":[{\"class_name\":\"Dense\",\"config\":"
             "{\"units\":3,\"activation\":\"relu\",\"activation\":\"softmax\"}}]}",
             CTRAIN_E_CONFIG, "model config: layers[0].config: duplicate key 'activation'");
  expect_err("{\"input_shape\":[2],\"layers\":[{\"type\":\"Dense\",\"units\":3}],"
             "\"layers\":[{\"type\":\"Dense\",\"units\":30}]}",
             CTRAIN_E_CONFIG, "model config: duplicate key 'layers'");
  expect_err("{\"input_shape\":[2],\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\","
             "\"units\":3}]}",
             CTRAIN_E_CONFIG, "model config: duplicate key 'input_shape'");
  expect_err("{\"name\":\"a\",\"name\":\"b\",\"input_shape\":[2],\"layers\":[{\"type\":"
             "\"Dense\",\"units\":3}]}",
             CTRAIN_E_CONFIG, "model config: duplicate key 'name'");
  model_t *m = NULL;
  char err[256] = "";
  ASSERT_EQ(model_load_file(CTRAIN_SOURCE_DIR "/tests/fuzz/corpus/fuzz_model_config/dup_units.json",
                            &m, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "dup_units.json: model config: layers[1]: duplicate key 'units'");
  /* The same key in different objects is fine. */
  m = build("{\"input_shape\":[2],\"layers\":[{\"type\":\"Dense\",\"units\":3,\"name\":\"a\"},"
            "{\"type\":\"Dense\",\"units\":3,\"name\":\"b\"}]}");
  model_free(m);
}

/* Two layers of one name wrote repeated safetensors keys
 * ("d/kernel" twice; readers saw half the tensors) and exited 0. Refused at
 * parse time naming both layers, whether the names were given or generated. */
TEST(duplicate_layer_names_are_config_errors) {
  expect_err("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3,\"name\":\"d\"},"
             "{\"type\":\"Dense\",\"units\":3,\"name\":\"d\"}]}",
             CTRAIN_E_CONFIG,
             "layers[0] (name given) and layers[1] (name given) are both named 'd'");
  /* A given name that a later generated one repeats (generated names count
   * every layer of the type, named or not: dense, dense_1, ...)... */
  expect_err("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3,"
             "\"name\":\"dense_1\"},{\"type\":\"Dense\",\"units\":3}]}",
             CTRAIN_E_CONFIG,
             "layers[0] (name given) and layers[1] (name generated) are both named 'dense_1'");
  /* ...and a generated name that a later given one repeats. */
  expect_err("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3},"
             "{\"class_name\":\"Dense\",\"config\":{\"units\":3,\"name\":\"dense\"}}]}",
             CTRAIN_E_CONFIG,
             "layers[0] (name generated) and layers[1] (name given) are both named 'dense'");
  /* Layers without weights share the one namespace, as in Keras. */
  expect_err("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dropout\",\"rate\":0.1,"
             "\"name\":\"x\"},{\"type\":\"Dense\",\"units\":3,\"name\":\"x\"}]}",
             CTRAIN_E_CONFIG, "layers[0] (name given) and layers[1] (name given)");
  /* A name that cannot be kept is an error, not silently replaced by a
   * generated one (which could then collide). */
  char big[512];
  snprintf(big, sizeof(big),
           "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3,\"name\":\"%064d\"}]}",
           0);
  expect_err(big, CTRAIN_E_CONFIG, "layers[0].name must be a non-empty string of at most 63");
  expect_err("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3,\"name\":\"\"}]}",
             CTRAIN_E_CONFIG, "layers[0].name");
  expect_err("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3,\"name\":7}]}",
             CTRAIN_E_CONFIG, "layers[0].name");
  /* Unique names, given, generated and null (generate), all build. */
  snprintf(big, sizeof(big),
           "{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3,\"name\":\"%063d\"},"
           "{\"type\":\"Dense\",\"units\":3,\"name\":null},{\"type\":\"Dense\",\"units\":3}]}",
           0);
  model_t *m = build(big);
  ASSERT_EQ(strlen(m->layers[0].name), 63);
  ASSERT_STR_EQ(m->layers[1].name, "dense_1");
  ASSERT_STR_EQ(m->layers[2].name, "dense_2");
  model_free(m);
}

/* Sizes, model side (test_data.c has the data side): every size is computed in size_t with
 * overflow checks and capped, the message naming the layer. */
TEST(sizes_are_checked) {
  /* 2^20 x 2^20 kernel: 2^40 parameters. */
  expect_err("{\"input_shape\":[1048576],\"layers\":[{\"type\":\"Dense\",\"units\":1048576}]}",
             CTRAIN_E_CONFIG, "layers[0] (Dense, 1048576 x 1048576): more than 1073741824");
  /* Over the cap across layers: 1024 x 1047552 + 1047552 = 2^30 - 1024, then
   * 1047552 x 2 + 2 more. */
  expect_err("{\"input_shape\":[1024],\"layers\":[{\"type\":\"Dense\",\"units\":1047552},"
             "{\"type\":\"Dense\",\"units\":2}]}",
             CTRAIN_E_CONFIG, "layers[1] (Dense, 1047552 x 2): more than");
  expect_err("{\"input_shape\":[1024,1024,2],\"layers\":[{\"type\":\"Flatten\"},"
             "{\"type\":\"Dense\",\"units\":2}]}",
             CTRAIN_E_CONFIG, "input_shape has more than 1048576 features");
  expect_err("{\"input_shape\":[1e300],\"layers\":[{\"type\":\"Dense\",\"units\":2}]}",
             CTRAIN_E_CONFIG, "input_shape[0] is not a positive integer");
  expect_err("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":4294967298}]}",
             CTRAIN_E_CONFIG, "layers[0] (Dense).units is not a positive integer");
  /* A large batch is only as big as it asks (no wrapped small buffer): a
   * whole batch of 1000 runs through buffers sized for it. */
  enum { B = 1000 };
  cpu_model c;
  cpu_open(&c, build("{\"input_shape\":[4],\"layers\":[{\"type\":\"Dense\",\"units\":3}]}"), B);
  static float x[B * 4];
  static int32_t y[B];
  for (int i = 0; i < B; i++)
    y[i] = i % 3;
  double l = -1;
  long correct = 0;
  ASSERT_OK(dmodel_push(c.d, c.m, NULL));
  ASSERT_OK(dmodel_step(c.d, x, y, B, 0, NULL, 1, 1));
  ASSERT_OK(dmodel_stats(c.d, &l, &correct));
  ASSERT_NEAR(l, B * log(3.0), 1e-3); /* zero weights: uniform softmax */
  cpu_close(&c);
}

TEST_MAIN(T(grad_dense_relu), T(grad_dense_tanh_sigmoid), T(grad_activation_dropout),
          T(grad_below_first_dense), T(loss_and_accuracy), T(layout_and_init), T(config_errors),
          T(duplicate_keys_are_config_errors), T(duplicate_layer_names_are_config_errors),
          T(sizes_are_checked))
