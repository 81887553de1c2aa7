/* model.c - Sequential MLP: config parsing, parameter layout, init. The math
 * runs in dmodel.c over the kernels table (kernels_cpu.c is the reference). */
#include "worker/model/model.h"

#include <errno.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"
#include "worker/model/model_keras.h"

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

/* input_shape: 1 to 4 positive integers (from index `skip` of the list)
 * whose product fits MODEL_MAX_UNITS. */
static ctrain_err parse_input_shape(model_t *m, const cJSON *shape, int skip, char *errbuf,
                                    size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  m->input_rank = cJSON_GetArraySize(shape) - skip;
  if (!cJSON_IsArray(shape) || m->input_rank < 1 || m->input_rank > 4)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: input_shape must be a list of 1 to 4 positive integers");
  size_t input_dim = 1;
  for (int i = 0; i < m->input_rank; i++) {
    const cJSON *d = cJSON_GetArrayItem(shape, i + skip);
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

/* Where the layers and the input shape are: our short form ({"input_shape",
 * "layers"}) or Keras' Sequential to_json() ({"class_name": "Sequential",
 * "config": {"layers": [InputLayer, ...]}}). *first is the index of the
 * first real layer (1 past a Keras InputLayer). */
static ctrain_err find_layers(model_t *m, const cJSON *root, const cJSON **layers, int *first,
                              char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *cn = cJSON_GetObjectItemCaseSensitive(root, "class_name");
  *first = 0;
  if (!cn) {
    *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    result = parse_input_shape(m, cJSON_GetObjectItemCaseSensitive(root, "input_shape"), 0, errbuf,
                               errlen);
    goto out;
  }
  if (!cJSON_IsString(cn) || strcmp(cn->valuestring, "Sequential"))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: class_name '%s': only Sequential models are supported",
                cJSON_IsString(cn) ? cn->valuestring : "?");
  *layers =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "config"), "layers");
  const cJSON *l0 = cJSON_GetArrayItem(*layers, 0);
  const cJSON *c0 = cJSON_GetObjectItemCaseSensitive(l0, "class_name");
  int input_layer = cJSON_IsString(c0) && !strcmp(c0->valuestring, "InputLayer");
  const cJSON *shape = NULL;
  result = model_keras_input(cJSON_GetObjectItemCaseSensitive(l0, "config"), 0, input_layer, &shape,
                             errbuf, errlen);
  if (result)
    goto out;
  if (!shape)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers[0]: no batch_shape or batch_input_shape "
                                 "(build the model with keras.Input(shape=...))");
  *first = input_layer;
  result = parse_input_shape(m, shape, 1, errbuf, errlen);
out:
  return result;
}

/* Layer j of the list: its class name and the object holding its fields,
 * short form ({"type": ..., fields}) or Keras ({"class_name", "config"}). */
static ctrain_err layer_class(const cJSON *jl, int j, const char **cls, const cJSON **cfg,
                              char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *jt = cJSON_GetObjectItemCaseSensitive(jl, "type");
  *cfg = jl;
  if (!jt) {
    jt = cJSON_GetObjectItemCaseSensitive(jl, "class_name");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(jl, "config");
    if (c && !cJSON_IsObject(c))
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers[%d].config is not an object", j);
    *cfg = c ? c : jl;
  }
  if (!cJSON_IsString(jt))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers[%d]: missing \"type\"", j);
  *cls = jt->valuestring;
out:
  return result;
}

/* The input shape of the first layer as (rank, h, w, c): rank 1 is (1, 1,
 * n), rank 2 (1, a, b), rank 4 keeps the last axis as channels. */
static void input_as_hwc(const model_t *m, model_layer *L) {
  const int *s = m->input_shape;
  L->rank = m->input_rank > 3 ? 4 : m->input_rank;
  L->ic = s[m->input_rank - 1];
  L->iw = m->input_rank >= 2 ? s[m->input_rank - 2] : 1;
  L->ih = m->input_rank >= 3 ? m->input_dim / (L->ic * L->iw) : 1;
  L->in = m->input_dim;
}

size_t model_layer_first_param(const model_layer *L) {
  return L->kind == MODEL_BATCHNORM ? L->gamma_off : L->w_off;
}

size_t model_layer_params(const model_layer *L) {
  size_t c = (size_t)L->c;
  switch (L->kind) {
  case MODEL_DENSE:
    return (size_t)L->in * c + c;
  case MODEL_CONV2D:
    return (size_t)L->kh * L->kw * L->ic * c + (L->use_bias ? c : 0);
  case MODEL_BATCHNORM:
    return c * (size_t)(2 + L->center + L->scale);
  default:
    return 0;
  }
}

/* Every layer's offsets into params, in layer order: kernel then bias;
 * gamma, beta, moving_mean, moving_variance. */
static ctrain_err layout_params(model_t *m, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  for (int i = 0; i < m->n_layers; i++) {
    model_layer *L = &m->layers[i];
    size_t c = (size_t)L->c, n = model_layer_params(L), at = m->n_params;
    if (n > MODEL_MAX_PARAMS || m->n_params + n > MODEL_MAX_PARAMS) {
      char dims[64];
      if (L->kind == MODEL_CONV2D)
        snprintf(dims, sizeof(dims), "Conv2D, %d x %d x %d x %d", L->kh, L->kw, L->ic, L->c);
      else
        snprintf(dims, sizeof(dims), "%s, %d x %d", L->kind == MODEL_DENSE ? "Dense" : "layer",
                 L->in, L->c);
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "model config: layers[%d] (%s): more than %zu parameters in all (layer %s)", i,
                  dims, MODEL_MAX_PARAMS, L->name);
    }
    m->n_params += n;
    if (L->kind == MODEL_DENSE || L->kind == MODEL_CONV2D) {
      L->w_off = at;
      L->b_off = at + n - c; /* past the end for a Conv2D without a bias */
    } else if (L->kind == MODEL_BATCHNORM) {
      L->gamma_off = at;
      L->beta_off = at + c * (size_t)L->scale;
      L->mean_off = L->beta_off + c * (size_t)L->center;
      L->var_off = L->mean_off + c;
    }
  }
out:
  return result;
}

/* Names and the checks over the whole list: unique names, a Dense (or an
 * Activation) last with >= 2 units, something to train. */
static ctrain_err name_layers(model_t *m, const int *explicit_name, const char **given,
                              char *errbuf, size_t errlen) {
  static const char *const base[MODEL_N_KINDS] = {"dense",
                                                  "activation",
                                                  "flatten",
                                                  "dropout",
                                                  "conv2d",
                                                  "max_pooling2d",
                                                  "average_pooling2d",
                                                  "global_average_pooling2d",
                                                  "batch_normalization",
                                                  "reshape"};
  ctrain_err result = CTRAIN_OK;
  int counts[MODEL_N_KINDS] = {0}, trainable = 0;
  for (int i = 0; i < m->n_layers; i++) {
    model_layer *L = &m->layers[i];
    if (explicit_name[i])
      snprintf(L->name, sizeof(L->name), "%s", given[i]);
    else if (counts[L->kind] == 0)
      snprintf(L->name, sizeof(L->name), "%s", base[L->kind]);
    else
      snprintf(L->name, sizeof(L->name), "%s_%d", base[L->kind], counts[L->kind]);
    counts[L->kind]++;
    trainable += L->kind == MODEL_DENSE || L->kind == MODEL_CONV2D;
  }
  const model_layer *last = &m->layers[m->n_layers - 1];
  if (last->kind != MODEL_DENSE && last->kind != MODEL_ACTIVATION)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: the last layer must be Dense (the logits)");
  if (last->rank != 1 || last->out < 2)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: the last layer has %d outputs (rank %d), a classifier needs a flat "
                ">= 2",
                last->out, last->rank);
  if (!trainable)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: no Dense or Conv2D layer, nothing to train");
  result = check_unique_names(m, explicit_name, errbuf, errlen);
out:
  return result;
}

/* Layer j of the list into m->layers[i], its input the previous layer's
 * output; the name it was given (borrowed from jl) into *given. */
static ctrain_err parse_layer(model_t *m, int i, int j, const cJSON *jl, const char **given,
                              char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  model_layer *L = &m->layers[i];
  const char *cls = NULL;
  const cJSON *cfg = NULL;
  if ((result = layer_class(jl, j, &cls, &cfg, errbuf, errlen)))
    goto out;
  if (i == 0) {
    input_as_hwc(m, L);
  } else {
    const model_layer *P = &m->layers[i - 1];
    L->rank = P->rank, L->ih = P->h, L->iw = P->w, L->ic = P->c, L->in = P->out;
  }
  result = model_keras_layer(L, j, cls, cfg, i == m->n_layers - 1, errbuf, errlen);
  if (result)
    goto out;
  const cJSON *jn = cJSON_GetObjectItemCaseSensitive(cfg, "name");
  *given = NULL;
  if (cJSON_IsNull(jn) || !jn) /* as Keras: name=None generates one */
    goto out;
  if (!(cJSON_IsString(jn) && jn->valuestring[0] && strlen(jn->valuestring) < sizeof(L->name)))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: layers[%d].name must be a non-empty string of at most %zu bytes", j,
                sizeof(L->name) - 1);
  *given = jn->valuestring;
out:
  return result;
}

ctrain_err model_from_json(const char *json, model_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *root = NULL;
  model_t *m = NULL;
  int explicit_name[MODEL_MAX_LAYERS] = {0}, first = 0;
  const char *given[MODEL_MAX_LAYERS] = {0};
  const cJSON *layers = NULL;
  *out = NULL;
  root = cJSON_Parse(json);
  if (!root)
    CTRAIN_FAIL(CTRAIN_E_PARSE, "model config: malformed JSON near offset %ld",
                cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - json) : -1L);
  /* A repeated key would be read as its first occurrence here and perhaps
   * as another by whatever else reads the config we save with the model. */
  result = ctrain_json_unique_keys(root, "model config", errbuf, errlen);
  if (result)
    goto out;
  m = calloc(1, sizeof(*m));
  if (!m || !(m->config_json = strdup(json)))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "model config: out of memory");
  if ((result = find_layers(m, root, &layers, &first, errbuf, errlen)))
    goto out;
  int n = cJSON_GetArraySize(layers) - first;
  if (!cJSON_IsArray(layers) || n < 1 || n > MODEL_MAX_LAYERS)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: layers must be a list of 1 to %d layers",
                MODEL_MAX_LAYERS);
  m->n_layers = n;
  m->layers = calloc((size_t)n, sizeof(model_layer));
  if (!m->layers)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "model config: out of memory");
  for (int i = 0; i < n; i++) {
    result = parse_layer(m, i, i + first, cJSON_GetArrayItem(layers, i + first), &given[i], errbuf,
                         errlen);
    if (result)
      goto out;
    explicit_name[i] = given[i] != NULL;
  }
  if ((result = name_layers(m, explicit_name, given, errbuf, errlen)) ||
      (result = layout_params(m, errbuf, errlen)))
    goto out;
  m->n_classes = m->layers[n - 1].out;
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

/* Glorot-uniform from r into w (n = fan_in * fan_out / receptive). */
static void glorot(rng_t *r, float *w, size_t n, double fan_in, double fan_out) {
  float limit = (float)sqrt(6.0 / (fan_in + fan_out));
  for (size_t k = 0; k < n; k++)
    w[k] = (2.0f * rng_uniform(r) - 1.0f) * limit;
}

void model_init(model_t *m, uint64_t seed) {
  rng_t r;
  rng_seed(&r, seed, 0x6c61796572ull /* "layer" */);
  memset(m->params, 0, m->n_params * sizeof(float));
  for (int i = 0; i < m->n_layers; i++) {
    const model_layer *L = &m->layers[i];
    double rf = (double)L->kh * L->kw; /* a Conv2D's receptive field */
    if (L->kind == MODEL_DENSE)
      glorot(&r, m->params + L->w_off, (size_t)L->in * L->c, L->in, L->c);
    else if (L->kind == MODEL_CONV2D)
      glorot(&r, m->params + L->w_off, (size_t)(rf * L->ic) * L->c, rf * L->ic, rf * L->c);
    if (L->kind != MODEL_BATCHNORM)
      continue;
    for (int c = 0; c < L->c; c++) {
      if (L->scale)
        m->params[L->gamma_off + c] = 1.0f;
      m->params[L->var_off + c] = 1.0f;
    }
  }
}

int model_has_batchnorm(const model_t *m) {
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == MODEL_BATCHNORM)
      return 1;
  return 0;
}

int model_has_dropout(const model_t *m) {
  for (int i = 0; i < m->n_layers; i++)
    if (m->layers[i].kind == MODEL_DROPOUT && m->layers[i].rate > 0)
      return 1;
  return 0;
}
