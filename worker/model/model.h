/* worker/model/model.h - a Keras Sequential model (MLP or CNN): config,
 * parameter layout and init. The math (forward, loss, backward) runs in dmodel.h over the
 * kernels table, on the CPU reference backend or CUDA: one model path.
 *
 * Config (JSON), either form per layer:
 *   {"name": "m", "input_shape": [28, 28], "layers": [
 *     {"type": "Flatten"},
 *     {"type": "Dense", "units": 128, "activation": "relu"},
 *     {"class_name": "Dropout", "config": {"rate": 0.2}},
 *     {"type": "Dense", "units": 10}]}
 * or what Keras' model.to_json() writes for a Sequential model (tf-keras 2.x
 * and Keras 3; model_keras.c checks every field, docs/models.md lists them).
 * Layers: Dense (bias, activation linear|relu|tanh|sigmoid, or softmax on the
 * last layer, which the loss then treats as logits), Activation, Flatten,
 * Dropout, and on NHWC images Conv2D, MaxPooling2D, AveragePooling2D,
 * GlobalAveragePooling2D, BatchNormalization (last axis), Reshape.
 * Loss: sparse softmax cross-entropy from logits.
 *
 * Parameters live in ONE allocation (`params`, n_params floats), as do the
 * gradients of every replica (dmodel.h), so one all-reduce covers every
 * gradient; a Dense kernel is (in, out) row-major as in Keras, followed by its
 * bias (out); a Conv2D kernel is HWIO (kh, kw, in channels, filters), then
 * its bias (filters) when use_bias; a BatchNormalization layer holds gamma,
 * beta (when scale, center), then moving_mean and moving_variance (C each):
 * the moving statistics are parameters whose gradient is always 0, so they
 * travel with the weights into backups and the safetensors file, and every
 * replica updates them alike from the synchronized batch statistics. */
#ifndef CTRAIN_MODEL_H
#define CTRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "ctrain/rng.h"

typedef enum {
  MODEL_DENSE = 0,
  MODEL_ACTIVATION,
  MODEL_FLATTEN,
  MODEL_DROPOUT,
  MODEL_CONV2D,
  MODEL_MAXPOOL,
  MODEL_AVGPOOL,
  MODEL_GAP,
  MODEL_BATCHNORM,
  MODEL_RESHAPE,
  MODEL_N_KINDS
} model_kind;
typedef enum { MODEL_LINEAR = 0, MODEL_RELU, MODEL_TANH, MODEL_SIGMOID, MODEL_SOFTMAX } model_act;

typedef struct {
  model_kind kind;
  model_act act;
  char name[64];      /* Keras-style: dense, dense_1, ... */
  int in, out;        /* features in and out (per sample) */
  int rank;           /* of the output: 1 flat (out), 2 or 3 (h, w, c) */
  int h, w, c;        /* output shape; c is the last axis (rank 1: 1, 1, out) */
  int ih, iw, ic;     /* input shape, likewise */
  float rate;         /* dropout */
  size_t w_off;       /* kernel offset into params: Dense (in, out), Conv2D (kh, kw, ic, c) */
  size_t b_off;       /* bias (out or c) offset into params */
  int use_bias;       /* Conv2D; Dense always has a bias */
  int kh, kw, sh, sw; /* Conv2D kernel or pooling window, and strides */
  int pt, pl;         /* padding above and to the left ('same'), else 0 */
  /* BatchNormalization over the last axis (c channels, in*1/c rows per sample) */
  float momentum, epsilon;
  int center, scale;
  size_t gamma_off, beta_off, mean_off, var_off; /* (c) each; gamma/beta when scale/center */
} model_layer;

typedef struct {
  int n_layers;
  model_layer *layers; /* (n_layers) */
  int input_rank;
  int input_shape[4]; /* (h, w, c) for an image */
  int input_dim;      /* product of input_shape */
  int n_classes;      /* units of the last layer */
  size_t n_params;
  float *params;     /* (n_params) every weight, one allocation */
  char *config_json; /* the config as given, owned */
} model_t;

/* Builds a model from config JSON (borrowed). CTRAIN_E_PARSE for malformed
 * JSON, CTRAIN_E_CONFIG naming the layer/field otherwise, among them: a key
 * repeated in any object; a "name" that is not a non-empty string of at most
 * 63 bytes (null means "generate one"); two layers of one name, given or
 * generated (dense, dense_1, ... count per type), naming both layers; sizes
 * past the caps (checked without overflow). *out is owned by the caller
 * (model_free). Parameters are zero until model_init. */
CTRAIN_NODISCARD ctrain_err model_from_json(const char *json, model_t **out, char *errbuf,
                                            size_t errlen);

/* Reads the file and calls model_from_json; an unreadable file is
 * CTRAIN_E_CONFIG naming it. */
CTRAIN_NODISCARD ctrain_err model_load_file(const char *path, model_t **out, char *errbuf,
                                            size_t errlen);

void model_free(model_t *m);

/* Glorot-uniform kernels (limit sqrt(6/(fan_in+fan_out)); a Conv2D's fans
 * are kh*kw*ic and kh*kw*filters), zero biases, BatchNormalization gamma 1,
 * beta 0, moving mean 0, moving variance 1, from seed. */
void model_init(model_t *m, uint64_t seed);

/* 1 when some layer is BatchNormalization (training then needs the batch
 * statistics of every replica: dmodel_set_bn_sync). */
int model_has_batchnorm(const model_t *m);

/* The number of parameters that layer i holds (0 for most kinds). */
size_t model_layer_params(const model_layer *L);
/* Where a layer's parameters start in params (meaningful when it has any:
 * they lie in layer order, so a layer's end is the next one's start). */
size_t model_layer_first_param(const model_layer *L);

/* 1 when some Dropout layer has a rate > 0 (training then draws from an RNG
 * per replica, so results depend on the replica layout). */
int model_has_dropout(const model_t *m);

#endif
