/* worker/model/model_keras.h - one layer of a model config, in our short
 * form or as Keras' to_json() writes it (tf-keras 2.x and Keras 3): every
 * field is either read, checked against the one value we implement (a
 * regularizer must be null, dilation_rate 1, data_format channels_last, ...),
 * or refused as unknown, so nothing in a config is silently ignored. */
#ifndef CTRAIN_MODEL_KERAS_H
#define CTRAIN_MODEL_KERAS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "ctrain/err.h"
#include "worker/model/model.h"

/* Fills L (but its name and parameter offsets) from layer i of class `cls`
 * whose fields are the members of cfg (borrowed); L->rank, ih, iw, ic and in
 * hold the input's shape on entry. `last` is 1 for the last layer. Errors are
 * CTRAIN_E_CONFIG naming the layer (index, class, name) and the field. */
CTRAIN_NODISCARD ctrain_err model_keras_layer(model_layer *L, int i, const char *cls,
                                              const cJSON *cfg, int last, char *errbuf,
                                              size_t errlen);

/* The input shape from a Keras InputLayer's (input_layer 1: its fields are
 * checked too) or first layer's config: batch_shape (Keras 3) or
 * batch_input_shape (tf-keras 2.x), the batch axis first and null.
 * *shape_out is borrowed from cfg, NULL when neither is there; a malformed
 * one is CTRAIN_E_CONFIG naming it. */
CTRAIN_NODISCARD ctrain_err model_keras_input(const cJSON *cfg, int i, int input_layer,
                                              const cJSON **shape_out, char *errbuf, size_t errlen);

#endif
