/* fuzz_model_config.c - model_from_json on arbitrary bytes: never crashes;
 * an error comes with a message and no model; a model it accepts has
 * unique, non-empty layer names (they key the safetensors tensors), layer
 * sizes that chain, and parameter offsets inside one allocation.
 *
 * A config may ask for up to 2^30 parameters: two 4 GiB callocs, untouched
 * (no RSS) until model_init. LLVMFuzzerInitialize raises libFuzzer's malloc
 * limit to fit them, as the first flag, so a flag given on the command line
 * still wins. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/model.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  static char limit[] = "-malloc_limit_mb=9000";
  static char *args[256];
  if (*argc < 1 || *argc >= (int)(sizeof(args) / sizeof(args[0])) - 1)
    return 0;
  args[0] = (*argv)[0];
  args[1] = limit;
  for (int i = 1; i < *argc; i++)
    args[i + 1] = (*argv)[i];
  args[*argc + 1] = NULL;
  (*argc)++;
  *argv = args;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s)
    return 0;
  memcpy(s, data, size);
  s[size] = 0;
  model_t *m = NULL;
  char err[256] = "";
  if (model_from_json(s, &m, err, sizeof(err)) == CTRAIN_OK) {
    if (!m || m->n_layers < 1 || m->input_dim < 1 || m->n_classes < 2 || !m->params)
      abort();
    int feat = m->input_dim;
    for (int i = 0; i < m->n_layers; i++) {
      const model_layer *L = &m->layers[i];
      if (!L->name[0] || L->in != feat || L->out < 1)
        abort();
      for (int j = 0; j < i; j++)
        if (!strcmp(L->name, m->layers[j].name))
          abort();
      if (L->kind == MODEL_DENSE && (L->b_off != L->w_off + (size_t)L->in * (size_t)L->out ||
                                     L->b_off + (size_t)L->out > m->n_params))
        abort();
      feat = L->out;
    }
    if (feat != m->n_classes)
      abort();
  } else if (m || !err[0]) {
    abort();
  }
  model_free(m);
  free(s);
  return 0;
}
