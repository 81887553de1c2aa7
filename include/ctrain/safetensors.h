/* ctrain/safetensors.h - writes a model's parameters as a safetensors file
 * (8-byte little-endian header length, JSON header padded with spaces to a
 * multiple of 8, then the raw little-endian float32 data), readable by the
 * `safetensors` Python package. Tensor names are Keras-like:
 * "<layer>/kernel" (in, out) and "<layer>/bias" (out). */
#ifndef CTRAIN_SAFETENSORS_H
#define CTRAIN_SAFETENSORS_H

#include <stddef.h>

#include "ctrain/err.h"
#include "ctrain/model.h"

/* Writes `dir`/model.safetensors and `dir`/model.json (the config) through
 * temp files renamed into place, creating `dir` if needed. The model is
 * borrowed. CTRAIN_E_IO naming the path on failure. */
ctrain_err st_save_model(const char *dir, const model_t *m, char *errbuf, size_t errlen);

/* Reads back the parameters written by st_save_model into m->params; the
 * tensors must match the model's layout (CTRAIN_E_CORRUPT otherwise). */
ctrain_err st_load_params(const char *path, model_t *m, char *errbuf, size_t errlen);

#endif
