/* worker/checkpoint/safetensors.h - writes a model's parameters as a safetensors file
 * (8-byte little-endian header length, JSON header padded with spaces to a
 * multiple of 8, then the raw little-endian float32 data), readable by the
 * `safetensors` Python package. Tensor names are Keras': "<layer>/<weight>"
 * in the order of the layer's get_weights(): Dense kernel (in, out) and bias;
 * Conv2D kernel HWIO (kh, kw, in channels, filters) and bias (when use_bias);
 * BatchNormalization gamma, beta (when scale, center), moving_mean,
 * moving_variance (docs/models.md). */
#ifndef CTRAIN_SAFETENSORS_H
#define CTRAIN_SAFETENSORS_H

#include <stddef.h>

#include "ctrain/err.h"
#include "worker/model/model.h"

/* Writes `dir`/model.safetensors and `dir`/model.json (the config), each
 * through ctrain/fileio.h (temp file created O_EXCL|O_NOFOLLOW, fsync,
 * rename, directory fsync), creating `dir` if needed. The model is borrowed.
 * CTRAIN_E_IO (CTRAIN_E_NOSPACE when the disk is full) naming the path on
 * failure; a failed write leaves the previous file in place. */
CTRAIN_NODISCARD ctrain_err safetensors_save_model(const char *dir, const model_t *m, char *errbuf,
                                                   size_t errlen);

/* Reads back the parameters written by safetensors_save_model into m->params; the
 * tensors must match the model's layout and the file must hold them
 * (CTRAIN_E_CORRUPT otherwise). Anything but a regular file is CTRAIN_E_IO,
 * without blocking on a FIFO. */
CTRAIN_NODISCARD ctrain_err safetensors_load_params(const char *path, model_t *m, char *errbuf,
                                                    size_t errlen);

#endif
