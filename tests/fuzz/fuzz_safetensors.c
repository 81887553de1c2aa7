/* fuzz_safetensors.c - the safetensors reader (safetensors_load_params,
 * worker/checkpoint/safetensors.h) on arbitrary bytes as the file: `ctrain-worker
 * evaluate` and a resumed export read a model.safetensors from shared storage.
 * The model has a layer of each kind with weights (Conv2D, BatchNormalization
 * with its moving statistics, Dense), so every name and shape is checked.
 * Never crashes or reads past the file (ASan), and a refusal says why. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/checkpoint/safetensors.h"
#include "worker/model/model.h"

static const char *const MODEL =
    "{\"input_shape\":[4,4,1],\"layers\":["
    "{\"type\":\"Conv2D\",\"filters\":2,\"kernel_size\":3,\"padding\":\"same\"},"
    "{\"type\":\"BatchNormalization\"},{\"type\":\"Flatten\"},"
    "{\"type\":\"Dense\",\"units\":3}]}";

static model_t *model;
static char path[64];

/* The model and the one file each input is written to, made once. */
static int setup(void) {
  char err[256];
  if (model)
    return 0;
  if (model_from_json(MODEL, &model, err, sizeof(err))) {
    fprintf(stderr, "fuzz_safetensors: model: %s\n", err);
    abort();
  }
  snprintf(path, sizeof(path), "/tmp/fuzz_safetensors.%d", (int)getpid());
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  setup();
  FILE *f = fopen(path, "wb");
  if (!f)
    abort();
  if (size && fwrite(data, 1, size, f) != size)
    abort();
  if (fclose(f))
    abort();
  model_init(model, 1);
  char err[512] = "";
  ctrain_err r = safetensors_load_params(path, model, err, sizeof(err));
  unlink(path);
  if (r && (!err[0] || !memchr(err, '\0', sizeof(err))))
    abort();
  return 0;
}
