/* worker/model/model.h - a Keras-Sequential-like MLP: config, parameter layout
 * and init. The math (forward, loss, backward) runs in dmodel.h over the
 * kernels table, on the CPU reference backend or CUDA: one model path.
 *
 * Config (JSON), either form per layer:
 *   {"name": "m", "input_shape": [28, 28], "layers": [
 *     {"type": "Flatten"},
 *     {"type": "Dense", "units": 128, "activation": "relu"},
 *     {"class_name": "Dropout", "config": {"rate": 0.2}},
 *     {"type": "Dense", "units": 10}]}
 * Layers: Dense (bias, activation linear|relu|tanh|sigmoid, or softmax on the
 * last layer, which the loss then treats as logits), Activation, Flatten,
 * Dropout. Loss: sparse softmax cross-entropy from logits.
 *
 * Parameters live in ONE allocation (`params`, n_params floats), as do the
 * gradients of every replica (dmodel.h), so one all-reduce covers every
 * gradient; a Dense kernel is (in, out) row-major as in Keras, followed by its
 * bias (out). */
#ifndef CTRAIN_MODEL_H
#define CTRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "worker/model/rng.h"

typedef enum { MODEL_DENSE = 0, MODEL_ACTIVATION, MODEL_FLATTEN, MODEL_DROPOUT } model_kind;
typedef enum { MODEL_LINEAR = 0, MODEL_RELU, MODEL_TANH, MODEL_SIGMOID, MODEL_SOFTMAX } model_act;

typedef struct {
  model_kind kind;
  model_act act;
  char name[64]; /* Keras-style: dense, dense_1, ... */
  int in, out;   /* features in and out */
  float rate;    /* dropout */
  size_t w_off;  /* kernel (in, out) offset into params */
  size_t b_off;  /* bias (out) offset into params */
} model_layer;

typedef struct {
  int n_layers;
  model_layer *layers; /* (n_layers) */
  int input_rank;
  int input_shape[4];
  int input_dim; /* product of input_shape */
  int n_classes; /* units of the last layer */
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
ctrain_err model_from_json(const char *json, model_t **out, char *errbuf, size_t errlen);

/* Reads the file and calls model_from_json; an unreadable file is
 * CTRAIN_E_CONFIG naming it. */
ctrain_err model_load_file(const char *path, model_t **out, char *errbuf, size_t errlen);

void model_free(model_t *m);

/* Glorot-uniform kernels (limit sqrt(6/(in+out))), zero biases, from seed. */
void model_init(model_t *m, uint64_t seed);

/* 1 when some Dropout layer has a rate > 0 (training then draws from an RNG
 * per replica, so results depend on the replica layout). */
int model_has_dropout(const model_t *m);

#endif
