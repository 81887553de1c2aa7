/* worker/evaluate.h - `ctrain-worker evaluate`: loads a saved model (the
 * model.json + model.safetensors pair that training writes with --output)
 * and reports loss and accuracy on a data set. One process, no collective;
 * the model runs through dmodel on GPU 0 when --device resolves to the GPU,
 * else on the CPU reference backend (--device gpu without one: exit 64). */
#ifndef CTRAIN_EVALUATE_H
#define CTRAIN_EVALUATE_H

#include <stddef.h>

#include "ctrain/err.h"
#include "worker/options.h"

typedef struct {
  size_t samples;
  double loss;     /* mean sparse softmax cross-entropy */
  double accuracy; /* fraction of argmax == label */
} eval_result;

/* o->model is a model directory (with model.json and model.safetensors) or
 * a config file (then o->weights names the weights). Errors: CTRAIN_E_CONFIG
 * for a config or weights that do not load or match (exit 78), CTRAIN_E_DATA
 * for bad data (exit 65), naming the file in errbuf. */
CTRAIN_NODISCARD ctrain_err eval_run(const wk_options *o, eval_result *out, char *errbuf,
                                     size_t errlen);

#endif
