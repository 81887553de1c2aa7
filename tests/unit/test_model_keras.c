/* test_model_keras.c - model configs as Keras writes them: the JSON that
 * model.to_json() of real tf-keras 2.21 and Keras 3.15 wrote for the same
 * two Sequential CNNs (tests/data/keras/, make_fixtures.py) builds the same
 * model; variants with a field we do not implement are refused, naming the
 * layer and the field. */
#include "test.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "worker/model/model.h"

#define FIXTURES CTRAIN_SOURCE_DIR "/tests/data/keras/"

static model_t *load(const char *file) {
  model_t *m = NULL;
  char err[512] = "";
  if (model_load_file(file, &m, err, sizeof(err)))
    TEST_FAIL_("model_load_file: %s", err);
  return m;
}

/* The fixture's text, owned by the caller. */
static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  ASSERT_NOT_NULL(f);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  return strdup(buf);
}

static void same_model(const model_t *a, const model_t *b) {
  ASSERT_EQ(a->n_layers, b->n_layers);
  ASSERT_EQ(a->n_params, b->n_params);
  ASSERT_EQ(a->input_dim, b->input_dim);
  for (int i = 0; i < a->n_layers; i++) {
    const model_layer *x = &a->layers[i], *y = &b->layers[i];
    ASSERT_STR_EQ(x->name, y->name);
    ASSERT_EQ(x->kind, y->kind);
    ASSERT_EQ(x->act, y->act);
    ASSERT_EQ(x->out, y->out);
    ASSERT_EQ(x->w_off, y->w_off);
    ASSERT_EQ(x->mean_off, y->mean_off);
    ASSERT_NEAR(x->momentum, y->momentum, 0);
    ASSERT_NEAR(x->rate, y->rate, 0);
  }
}

/* Input(28, 28, 1), Conv2D(32, 3, same, relu), BN, MaxPool(2), Conv2D(64),
 * BN, MaxPool, Flatten, Dropout(0.3), Dense(128, relu), Dense(10): Keras'
 * count_params() says 422026 (make_fixtures.py printed it). */
TEST(cnn_from_tf_keras_and_keras3) {
  model_t *a = load(FIXTURES "cnn-tf_keras.json"), *b = load(FIXTURES "cnn-keras3.json");
  same_model(a, b);
  ASSERT_EQ(a->n_params, 422026);
  ASSERT_EQ(a->n_layers, 10);
  ASSERT_EQ(a->input_dim, 784);
  ASSERT_EQ(a->n_classes, 10);
  static const model_kind kinds[] = {MODEL_CONV2D,    MODEL_BATCHNORM, MODEL_MAXPOOL, MODEL_CONV2D,
                                     MODEL_BATCHNORM, MODEL_MAXPOOL,   MODEL_FLATTEN, MODEL_DROPOUT,
                                     MODEL_DENSE,     MODEL_DENSE};
  for (int i = 0; i < 10; i++)
    ASSERT_EQ(a->layers[i].kind, kinds[i]);
  ASSERT_STR_EQ(a->layers[0].name, "conv2d");
  ASSERT_STR_EQ(a->layers[4].name, "batch_normalization_1");
  ASSERT_EQ(a->layers[3].h * a->layers[3].w * a->layers[3].c, 14 * 14 * 64);
  ASSERT_EQ(a->layers[5].out, 7 * 7 * 64);
  ASSERT_EQ(a->layers[0].act, MODEL_RELU);
  ASSERT_NEAR(a->layers[1].momentum, 0.99f, 0);
  ASSERT_NEAR(a->layers[1].epsilon, 1e-3f, 0);
  model_free(a);
  model_free(b);
}

/* Input(28, 28), Reshape((28, 28, 1)), Conv2D(8, (5, 3), strides 2, no
 * bias), BN(center=False, momentum 0.9), ReLU, AveragePooling2D(2, same),
 * GlobalAveragePooling2D, Dense(10, softmax): 234 parameters. */
TEST(small_cnn_from_tf_keras_and_keras3) {
  model_t *a = load(FIXTURES "small-tf_keras.json"), *b = load(FIXTURES "small-keras3.json");
  same_model(a, b);
  ASSERT_EQ(a->n_params, 234);
  const model_layer *conv = &a->layers[1], *bn = &a->layers[2], *pool = &a->layers[4];
  ASSERT_EQ(conv->kind, MODEL_CONV2D);
  ASSERT_EQ(conv->use_bias, 0);
  ASSERT_EQ(conv->h, 12); /* (28 - 5) / 2 + 1 */
  ASSERT_EQ(conv->w, 13); /* (28 - 3) / 2 + 1 */
  ASSERT_EQ(bn->center, 0);
  ASSERT_EQ(bn->scale, 1);
  ASSERT_NEAR(bn->momentum, 0.9f, 0);
  ASSERT_EQ(pool->kind, MODEL_AVGPOOL);
  ASSERT_EQ(pool->h, 6);
  ASSERT_EQ(pool->w, 7); /* 'same': ceil(13 / 2) */
  ASSERT_EQ(a->layers[5].kind, MODEL_GAP);
  ASSERT_EQ(a->layers[6].act, MODEL_SOFTMAX);
  model_free(a);
  model_free(b);
}

/* The real Keras 3 fixture with layers[at].config[key] = value (JSON):
 * refused with CTRAIN_E_CONFIG, the message containing each needle. */
static void refuse_variant(const char *file, int at, const char *key, const char *value,
                           const char *needle) {
  char *text = slurp(file);
  cJSON *root = cJSON_Parse(text), *v = cJSON_Parse(value);
  ASSERT(root && v);
  cJSON *layer = cJSON_GetArrayItem(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "config"), "layers"),
      at);
  cJSON *cfg = cJSON_GetObjectItemCaseSensitive(layer, "config");
  ASSERT_NOT_NULL(cfg);
  if (!strcmp(key, "class_name"))
    cJSON_ReplaceItemInObjectCaseSensitive(layer, key, v);
  else if (cJSON_GetObjectItemCaseSensitive(cfg, key))
    cJSON_ReplaceItemInObjectCaseSensitive(cfg, key, v);
  else
    cJSON_AddItemToObject(cfg, key, v);
  char *json = cJSON_PrintUnformatted(root);
  model_t *m = NULL;
  char err[512] = "";
  ASSERT_EQ(model_from_json(json, &m, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_NULL(m);
  ASSERT_STR_CONTAINS(err, needle);
  free(json);
  cJSON_Delete(root);
  free(text);
}

TEST(unsupported_fields_are_refused) {
  const char *k3 = FIXTURES "cnn-keras3.json", *k2 = FIXTURES "cnn-tf_keras.json";
  refuse_variant(k3, 1, "dilation_rate", "[2, 2]",
                 "layers[1] (Conv2D 'conv2d').dilation_rate: only 1 is supported");
  refuse_variant(k2, 4, "groups", "2", "layers[4] (Conv2D 'conv2d_1').groups: only 1");
  refuse_variant(k3, 1, "kernel_regularizer",
                 "{\"module\": \"keras.regularizers\", \"class_name\": \"L2\", "
                 "\"config\": {\"l2\": 0.01}, \"registered_name\": null}",
                 "(Conv2D 'conv2d').kernel_regularizer: only null");
  refuse_variant(k2, 3, "data_format", "\"channels_first\"",
                 "(MaxPooling2D 'max_pooling2d').data_format: only \"channels_last\"");
  refuse_variant(k3, 1, "class_name", "\"DepthwiseConv2D\"",
                 "layers[1]: unknown layer type 'DepthwiseConv2D'");
  refuse_variant(k3, 2, "axis", "1", "(BatchNormalization 'batch_normalization').axis");
  refuse_variant(k3, 2, "renorm", "true", "'batch_normalization').renorm: only false");
  refuse_variant(k2, 9, "kernel_initializer", "\"he_normal\"",
                 "(Dense 'dense').kernel_initializer: only GlorotUniform");
  refuse_variant(k3, 8, "noise_shape", "[null, 1]", "(Dropout 'dropout').noise_shape: only null");
  refuse_variant(k3, 1, "lora_rank", "4", "(Conv2D 'conv2d').lora_rank");
  refuse_variant(k3, 1, "padding", "\"causal\"", "(Conv2D 'conv2d').padding");
  refuse_variant(k3, 1, "some_new_option", "1", "(Conv2D 'conv2d').some_new_option: unsupported");
  refuse_variant(k3, 1, "trainable", "false", "(Conv2D 'conv2d').trainable: only true");
  refuse_variant(k3, 1, "dtype", "\"float16\"", "(Conv2D 'conv2d').dtype: only \"float32\"");
  refuse_variant(k3, 0, "sparse", "true", "layers[0] (InputLayer).sparse: only false");
}

/* Not a Sequential, or no input shape: refused with what to do. */
TEST(model_level_errors) {
  model_t *m = NULL;
  char err[512] = "";
  ASSERT_EQ(model_from_json("{\"class_name\":\"Functional\",\"config\":{}}", &m, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "only Sequential models");
  ASSERT_EQ(model_from_json("{\"class_name\":\"Sequential\",\"config\":{\"layers\":["
                            "{\"class_name\":\"Dense\",\"config\":{\"units\":3}}]}}",
                            &m, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "no batch_shape or batch_input_shape");
  /* tf-keras's legacy form: the first layer carries batch_input_shape. */
  ASSERT_OK(model_from_json("{\"class_name\":\"Sequential\",\"config\":{\"layers\":["
                            "{\"class_name\":\"Dense\",\"config\":{\"units\":3,"
                            "\"batch_input_shape\":[null,4]}}]}}",
                            &m, err, sizeof(err)));
  ASSERT_EQ(m->input_dim, 4);
  model_free(m);
  ASSERT_EQ(model_from_json("{\"class_name\":\"Sequential\",\"config\":{\"layers\":["
                            "{\"class_name\":\"InputLayer\",\"config\":{\"batch_shape\":[null,4]}},"
                            "{\"class_name\":\"Dense\",\"config\":{\"units\":3}},"
                            "{\"class_name\":\"Dense\",\"config\":{\"units\":3,"
                            "\"batch_input_shape\":[null,3]}}]}}",
                            &m, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "only the first layer takes an input shape");
  ASSERT_EQ(model_from_json("{\"input_shape\":[4,4],\"layers\":[{\"type\":\"Conv2D\","
                            "\"filters\":2,\"kernel_size\":3},{\"type\":\"Flatten\"},"
                            "{\"type\":\"Dense\",\"units\":2}]}",
                            &m, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "(Conv2D): needs an image input (height, width, channels), got rank 2");
}

TEST_MAIN(T(cnn_from_tf_keras_and_keras3), T(small_cnn_from_tf_keras_and_keras3),
          T(unsupported_fields_are_refused), T(model_level_errors))
