/* model.c - Sequential MLP: config parsing, parameter layout, init. The math
 * runs in dmodel.c over the kernels table (kernels_cpu.c is the reference). */
#include "worker/model/model.h"

#include <errno.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/tfconfig.h"

#define MODEL_MAX_LAYERS 64
#define MODEL_MAX_UNITS  (1 << 20)
#define MODEL_MAX_PARAMS ((size_t)1 << 30)

void model_free(model_t *m) {
  if (!m)
    return;
  free(m->layers);
  free(m->params);
  free(m->config_json);
  free(m);
}

static int parse_act(const char *s, model_act *a) {
  static const char *const names[] = {"linear", "relu", "tanh", "sigmoid", "softmax"};
  if (!s) {
    *a = MODEL_LINEAR;
    return 0;
  }
  for (int i = 0; i <= MODEL_SOFTMAX; i++)
    if (!strcmp(s, names[i])) {
      *a = (model_act)i;
      return 0;
    }
  return -1;
}

/* a * b + c in size_t; 0 on overflow. */
static int size_muladd(size_t a, size_t b, size_t c, size_t *out) {
  size_t p;
  return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(p, c, out);
}

/* Keras refuses a Sequential model whose layers share a name, and the
 * safetensors file keys tensors by it ("<name>/kernel"): two layers of one
 * name would write repeated keys, and readers would see half the tensors.
 * Generated names (dense, dense_1, ...) can collide with explicit ones. */
static ctrain_err check_unique_names(const model_t *m, const int *explicit_name, char *errbuf,
                                     size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  for (int i = 1; i < m->n_layers; i++)
    for (int j = 0; j < i; j++)
      if (!strcmp(m->layers[i].name, m->layers[j].name))
        CTRAIN_FAIL(CTRAIN_E_CONFIG,
                    "model config: layers[%d] (name %s) and layers[%d] (name %s) are both named "
                    "'%s'; layer names must be unique",
                    j, explicit_name[j] ? "given" : "generated", i,
                    explicit_name[i] ? "given" : "generated", m->layers[i].name);
out:
  return result;
}

/* input_shape: 1 to 4 positive integers whose product fits MODEL_MAX_UNITS. */
static ctrain_err parse_input_shape(model_t *m, const cJSON *shape, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  m->input_rank = cJSON_GetArraySize(shape);
  size_t input_dim = 1;
  for (int i = 0; i < m->input_rank; i++) {
    const cJSON *d = cJSON_GetArrayItem(shape, i);
    if (!cJSON_IsNumber(d) || !(d->valuedouble >= 1 && d->valuedouble <= MODEL_MAX_UNITS) ||
        d->valuedouble != floor(d->valuedouble))
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: input_shape[%d] is not a positive integer", i);
    m->input_shape[i] = (int)d->valuedouble;
    if (!size_muladd(input_dim, (size_t)m->input_shape[i], 0, &input_dim) ||
        input_dim > MODEL_MAX_UNITS)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: input_shape has more than %d features",
                  MODEL_MAX_UNITS);
  }
  m->input_dim = (int)input_dim;
out:
  return result;
}

/* The type and type-specific fields of layers[i] (jl), with `feat` features
 * coming in: fills m->layers[i] but its name, grows m->n_params for Dense,
 * sets *flat after a Flatten; *cfg_out is the object holding the layer's
 * fields (jl, or its Keras "config"). */
static ctrain_err parse_layer_kind(model_t *m, int i, const cJSON *jl, int feat, int *flat,
                                   const cJSON **cfg_out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  model_layer *L = &m->layers[i];
  const cJSON *jt = cJSON_GetObjectItemCaseSensitive(jl, "type");
  const cJSON *cfg = jl;
  if (!jt) {
    jt = cJSON_GetObjectItemCaseSensitive(jl, "class_name");
    cfg = cJSON_GetObjectItemCaseSensitive(jl, "config");
    if (!cfg)
      cfg = jl;
  }
  if (!cJSON_IsString(jt))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers[%d]: missing \"type\"", i);
  const char *t = jt->valuestring;
  const cJSON *ja = cJSON_GetObjectItemCaseSensitive(cfg, "activation");
  if (ja && !cJSON_IsString(ja))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers[%d].activation is not a string", i);
  L->in = feat;
  if (!strcmp(t, "Dense")) {
    const cJSON *ju = cJSON_GetObjectItemCaseSensitive(cfg, "units");
    if (!cJSON_IsNumber(ju) || !(ju->valuedouble >= 1 && ju->valuedouble <= MODEL_MAX_UNITS) ||
        ju->valuedouble != floor(ju->valuedouble))
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "model config: layers[%d] (Dense).units is not a positive integer", i);
    if (!*flat)
      CTRAIN_FAIL(
          CTRAIN_E_CONFIG,
          "model config: layers[%d] (Dense) needs a flat input: add a Flatten layer before it", i);
    L->kind = MODEL_DENSE;
    L->out = (int)ju->valuedouble;
    if (parse_act(ja ? ja->valuestring : NULL, &L->act))
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers[%d].activation: unknown activation '%s'",
                  i, ja->valuestring);
    /* kernel (in, out) then bias (out), after every earlier layer's */
    L->w_off = m->n_params;
    if (!size_muladd((size_t)L->in, (size_t)L->out, L->w_off, &L->b_off) ||
        !size_muladd((size_t)L->out, 1, L->b_off, &m->n_params) || m->n_params > MODEL_MAX_PARAMS)
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "model config: layers[%d] (Dense, %d x %d): more than %zu parameters in all", i,
                  L->in, L->out, MODEL_MAX_PARAMS);
  } else if (!strcmp(t, "Activation") || !strcmp(t, "ReLU")) {
    L->kind = MODEL_ACTIVATION;
    L->out = feat;
    if (!strcmp(t, "ReLU"))
      L->act = MODEL_RELU;
    else if (!ja || parse_act(ja->valuestring, &L->act))
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers[%d].activation: unknown activation '%s'",
                  i, ja ? ja->valuestring : "(missing)");
  } else if (!strcmp(t, "Flatten")) {
    L->kind = MODEL_FLATTEN;
    L->out = feat;
    *flat = 1;
  } else if (!strcmp(t, "Dropout")) {
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(cfg, "rate");
    if (!cJSON_IsNumber(jr) || !(jr->valuedouble >= 0 && jr->valuedouble < 1))
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "model config: layers[%d] (Dropout).rate is not a number in [0, 1)", i);
    L->kind = MODEL_DROPOUT;
    L->out = feat;
    L->rate = (float)jr->valuedouble;
  } else {
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: layers[%d]: unknown layer type '%s' (known: Dense, Activation, "
                "Flatten, Dropout)",
                i, t);
  }
  if (L->act == MODEL_SOFTMAX && i != m->n_layers - 1)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: layers[%d]: softmax is only supported on the last layer", i);
  *cfg_out = cfg;
out:
  return result;
}

ctrain_err model_from_json(const char *json, model_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *root = NULL;
  model_t *m = NULL;
  int counts[4] = {0};
  int explicit_name[MODEL_MAX_LAYERS] = {0};
  static const char *const base[] = {"dense", "activation", "flatten", "dropout"};
  *out = NULL;
  root = cJSON_Parse(json);
  if (!root)
    CTRAIN_FAIL(CTRAIN_E_PARSE, "model config: malformed JSON near offset %ld",
                cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - json) : -1L);
  /* A repeated key would be read as its first occurrence here and perhaps
   * as another by whatever else reads the config we save with the model. */
  result = tfconfig_json_unique_keys(root, "model config", errbuf, errlen);
  if (result)
    goto out;
  m = calloc(1, sizeof(*m));
  if (!m || !(m->config_json = strdup(json)))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "model config: out of memory");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(root, "input_shape");
  const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
  if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) < 1 || cJSON_GetArraySize(shape) > 4)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: input_shape must be a list of 1 to 4 positive integers");
  result = parse_input_shape(m, shape, errbuf, errlen);
  if (result)
    goto out;
  if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) < 1 ||
      cJSON_GetArraySize(layers) > MODEL_MAX_LAYERS)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers must be a list of 1 to %d layers",
                MODEL_MAX_LAYERS);
  m->n_layers = cJSON_GetArraySize(layers);
  m->layers = calloc((size_t)m->n_layers, sizeof(model_layer));
  if (!m->layers)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "model config: out of memory");
  int feat = m->input_dim, i = 0, flat = m->input_rank == 1;
  const cJSON *jl;
  cJSON_ArrayForEach(jl, layers) {
    model_layer *L = &m->layers[i];
    const cJSON *cfg = NULL;
    result = parse_layer_kind(m, i, jl, feat, &flat, &cfg, errbuf, errlen);
    if (result)
      goto out;
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(cfg, "name");
    if (cJSON_IsNull(jn)) /* as Keras: name=None generates one */
      jn = NULL;
    if (jn &&
        !(cJSON_IsString(jn) && jn->valuestring[0] && strlen(jn->valuestring) < sizeof(L->name)))
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "model config: layers[%d].name must be a non-empty string of at most %zu bytes",
                  i, sizeof(L->name) - 1);
    explicit_name[i] = jn != NULL;
    if (jn)
      snprintf(L->name, sizeof(L->name), "%s", jn->valuestring);
    else if (counts[L->kind] == 0)
      snprintf(L->name, sizeof(L->name), "%s", base[L->kind]);
    else
      snprintf(L->name, sizeof(L->name), "%s_%d", base[L->kind], counts[L->kind]);
    counts[L->kind]++;
    feat = L->out;
    i++;
  }
  if (m->layers[m->n_layers - 1].kind != MODEL_DENSE &&
      m->layers[m->n_layers - 1].kind != MODEL_ACTIVATION)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: the last layer must be Dense (the logits)");
  if (feat < 2)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: the last layer has %d units, a classifier needs >= 2", feat);
  if (counts[MODEL_DENSE] == 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: no Dense layer, nothing to train");
  result = check_unique_names(m, explicit_name, errbuf, errlen);
  if (result)
    goto out;
  m->n_classes = feat;
  m->params = calloc(m->n_params, sizeof(float));
  if (!m->params)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "model: out of memory for %zu parameters", m->n_params);
  *out = m;
  m = NULL;
out:
  cJSON_Delete(root);
  model_free(m);
  return result;
}

ctrain_err model_load_file(const char *path, model_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  FILE *f = NULL;
  char *text = NULL;
  *out = NULL;
  f = fopen(path, "rb");
  if (!f)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config %s: %s", path, strerror(errno));
  if (fseek(f, 0, SEEK_END) || ftell(f) < 0 || ftell(f) > (1 << 20))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config %s: unreadable or larger than 1 MiB", path);
  long n = ftell(f);
  rewind(f);
  text = malloc((size_t)n + 1);
  if (!text)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "model config %s: out of memory", path);
  if (fread(text, 1, (size_t)n, f) != (size_t)n)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config %s: read error", path);
  text[n] = 0;
  result = model_from_json(text, out, errbuf, errlen);
  if (result) {
    /* Prefix the file name to the message. */
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s", errbuf);
    snprintf(errbuf, errlen, "%s: %s", path, tmp);
  }
out:
  if (f)
    fclose(f);
  free(text);
  return result;
}

void model_init(model_t *m, uint64_t seed) {
  rng_t r;
  rng_seed(&r, seed, 0x6c61796572ull /* "layer" */);
  memset(m->params, 0, m->n_params * sizeof(float));
  for (int i = 0; i < m->n_layers; i++) {
    model_layer *L = &m->layers[i];
    if (L->kind != MODEL_DENSE)
      continue;
    float limit = sqrtf(6.0f / (float)(L->in + L->out));
    float *w = m->params + L->w_off;
    for (size_t k = 0; k < (size_t)L->in * (size_t)L->out; k++)
      w[k] = (2.0f * rng_uniform(&r) - 1.0f) * limit;
  }
}

int model_has_dropout(const model_t *m) {
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == MODEL_DROPOUT && m->layers[i].rate > 0)
      return 1;
  return 0;
}
