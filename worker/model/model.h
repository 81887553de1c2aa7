/* worker/model/model.h - a Keras-Sequential-like MLP on the CPU.
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
 * Parameters and gradients each live in ONE allocation (`params`, `grads`,
 * n_params floats) so one all-reduce covers every gradient; a Dense kernel is
 * (in, out) row-major as in Keras, followed by its bias (out). GEMMs go
 * through cblas_sgemm. */
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
  float *y;      /* (cap, out) output of the last forward; may alias the input */
  float *mask;   /* (cap, out) dropout mask, scaled by 1/(1-rate) */
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
  float *grads;      /* (n_params) matching gradients, one allocation */
  int cap;           /* batch capacity of the activation buffers */
  float *acts;       /* one allocation for every layer's y and mask */
  float *d0, *d1;    /* (cap, max features) backward scratch */
  float *probs;      /* (cap, n_classes) softmax of the last forward */
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

/* Grows the activation buffers to hold `batch` samples; CTRAIN_E_NOMEM
 * when they cannot be allocated (or their size does not fit size_t). */
ctrain_err model_reserve(model_t *m, int batch);

/* Forward pass of x (B, input_dim) into logits (B, n_classes), borrowed from
 * the model until the next call. training: dropout active, drawing from rng. */
const float *model_forward(model_t *m, const float *x, int B, int training, rng_t *rng);

/* Sparse softmax cross-entropy of the last forward against labels (B):
 * returns the summed loss, adds the number of correct argmaxes to *correct.
 * A label outside [0, n_classes) counts as wrong with loss 0 (callers check). */
double model_loss(model_t *m, const int32_t *labels, int B, long *correct);

/* The loss of model_loss on raw arrays: probs (rows, C) = softmax of logits
 * (rows, C); returns the summed cross-entropy against labels (rows) and adds
 * the correct argmaxes to *correct. Shared with the CPU kernel backend. */
double model_softmax_ce_rows(const float *logits, const int32_t *labels, int rows, int C,
                             float *probs, long *correct);

/* Backward pass after model_forward + model_loss: grads = d(scale * summed
 * loss)/d(params) (overwritten, not accumulated). */
void model_backward(model_t *m, const float *x, const int32_t *labels, int B, float scale);

#endif
