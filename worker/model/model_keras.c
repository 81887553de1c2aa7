/* model_keras.c - one layer's fields, short form or Keras to_json(); see
 * model_keras.h. The field tables say, per class, what each key may hold. */
#include "worker/model/model_keras.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MODEL_MAX_UNITS (1 << 20)

typedef enum {
  F_READ,   /* the layer's parser reads it */
  F_NULL,   /* regularizers, constraints, ...: only null */
  F_TRUE,   /* only true */
  F_FALSE,  /* only false */
  F_ONE,    /* 1 or a list of 1s (dilation_rate, groups) */
  F_ZERO,   /* 0 */
  F_LAST,   /* data_format: channels_last or null */
  F_F32,    /* dtype: "float32", null, or a float32 DTypePolicy */
  F_GLOROT, /* initializers: the ones model_init implements */
  F_ZEROS,
  F_ONES,
  F_ANY /* no effect on what we compute (documented in docs/models.md) */
} field_rule;

typedef struct {
  const char *key;
  field_rule rule;
} field;

#define END                                                                                        \
  { NULL, F_READ }

static const field f_common[] = {{"name", F_READ},
                                 {"trainable", F_TRUE},
                                 {"dtype", F_F32},
                                 {"type", F_READ},
                                 {"batch_shape", F_READ},
                                 {"batch_input_shape", F_READ},
                                 END};
/* What Dense and Conv2D share (check_fields adds it to theirs): their
 * weights' initializers (the ones model_init implements) and nothing that
 * regularizes or constrains them. */
static const field f_weights[] = {{"kernel_initializer", F_GLOROT},
                                  {"bias_initializer", F_ZEROS},
                                  {"kernel_regularizer", F_NULL},
                                  {"bias_regularizer", F_NULL},
                                  {"activity_regularizer", F_NULL},
                                  {"kernel_constraint", F_NULL},
                                  {"bias_constraint", F_NULL},
                                  {"lora_rank", F_NULL},
                                  END};
static const field f_dense[] = {{"units", F_READ},
                                {"activation", F_READ},
                                {"use_bias", F_TRUE},
                                {"quantization_config", F_NULL},
                                END};
static const field f_conv[] = {{"filters", F_READ},     {"kernel_size", F_READ},
                               {"strides", F_READ},     {"padding", F_READ},
                               {"data_format", F_LAST}, {"dilation_rate", F_ONE},
                               {"groups", F_ONE},       {"activation", F_READ},
                               {"use_bias", F_READ},    END};
static const field f_pool[] = {
    {"pool_size", F_READ}, {"strides", F_READ}, {"padding", F_READ}, {"data_format", F_LAST}, END};
static const field f_gap[] = {{"data_format", F_LAST}, {"keepdims", F_FALSE}, END};
static const field f_bn[] = {{"axis", F_READ},
                             {"momentum", F_READ},
                             {"epsilon", F_READ},
                             {"center", F_READ},
                             {"scale", F_READ},
                             {"beta_initializer", F_ZEROS},
                             {"gamma_initializer", F_ONES},
                             {"moving_mean_initializer", F_ZEROS},
                             {"moving_variance_initializer", F_ONES},
                             {"beta_regularizer", F_NULL},
                             {"gamma_regularizer", F_NULL},
                             {"beta_constraint", F_NULL},
                             {"gamma_constraint", F_NULL},
                             {"synchronized", F_ANY},
                             {"renorm", F_FALSE},
                             {"renorm_clipping", F_NULL},
                             {"renorm_momentum", F_ANY},
                             {"fused", F_ANY},
                             {"virtual_batch_size", F_NULL},
                             {"adjustment", F_NULL},
                             END};
static const field f_flatten[] = {{"data_format", F_LAST}, END};
static const field f_dropout[] = {{"rate", F_READ}, {"noise_shape", F_NULL}, {"seed", F_NULL}, END};
static const field f_activation[] = {{"activation", F_READ}, END};
static const field f_relu[] = {
    {"max_value", F_NULL}, {"negative_slope", F_ZERO}, {"threshold", F_ZERO}, END};
static const field f_reshape[] = {{"target_shape", F_READ}, END};
static const field f_input[] = {
    {"sparse", F_FALSE}, {"ragged", F_FALSE}, {"optional", F_FALSE}, {"input_tensor", F_NULL}, END};

static const field *find_field(const field *t, const char *key) {
  for (; t->key; t++)
    if (!strcmp(t->key, key))
      return t;
  return NULL;
}

/* 1 when v is 1 or a list of 1s. */
static int all_ones(const cJSON *v) {
  if (cJSON_IsNumber(v))
    return v->valuedouble == 1;
  if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) < 1)
    return 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, v) if (!cJSON_IsNumber(e) || e->valuedouble != 1) return 0;
  return 1;
}

/* An initializer as a name ("glorot_uniform") or a Keras object
 * ({"class_name": "GlorotUniform", "config": {"seed": null}}). */
static int init_is(const cJSON *v, const char *snake, const char *camel) {
  if (cJSON_IsString(v))
    return !strcmp(v->valuestring, snake) || !strcmp(v->valuestring, camel);
  const cJSON *cn = cJSON_GetObjectItemCaseSensitive(v, "class_name");
  return cJSON_IsString(cn) && !strcmp(cn->valuestring, camel);
}

static int rule_ok(field_rule r, const cJSON *v) {
  const cJSON *c;
  switch (r) {
  case F_READ:
  case F_ANY:
    return 1;
  case F_NULL:
    return cJSON_IsNull(v);
  case F_TRUE:
    return cJSON_IsTrue(v);
  case F_FALSE:
    return cJSON_IsFalse(v);
  case F_ONE:
    return all_ones(v);
  case F_ZERO:
    return cJSON_IsNumber(v) && v->valuedouble == 0;
  case F_LAST:
    return cJSON_IsNull(v) || (cJSON_IsString(v) && !strcmp(v->valuestring, "channels_last"));
  case F_F32:
    if (cJSON_IsNull(v) || (cJSON_IsString(v) && !strcmp(v->valuestring, "float32")))
      return 1;
    c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(v, "config"), "name");
    return cJSON_IsString(c) && !strcmp(c->valuestring, "float32");
  case F_GLOROT:
    return init_is(v, "glorot_uniform", "GlorotUniform");
  case F_ZEROS:
    return init_is(v, "zeros", "Zeros");
  case F_ONES:
    return init_is(v, "ones", "Ones");
  }
  return 0;
}

static const char *rule_want(field_rule r) {
  static const char *const w[] = {"",
                                  "null",
                                  "true",
                                  "false",
                                  "1",
                                  "0",
                                  "\"channels_last\"",
                                  "\"float32\"",
                                  "GlorotUniform",
                                  "Zeros",
                                  "Ones",
                                  ""};
  return w[r];
}

/* Every member of cfg is in the class's table or the common one, and holds
 * a value its rule accepts. */
static ctrain_err check_fields(const char *where, const field *t, int i, const cJSON *cfg,
                               char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *v;
  cJSON_ArrayForEach(v, cfg) {
    const field *f = find_field(t, v->string);
    if (!f && (t == f_dense || t == f_conv))
      f = find_field(f_weights, v->string);
    if (!f)
      f = find_field(f_common, v->string);
    if (!f)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.%s: unsupported field", where, v->string);
    if (!rule_ok(f->rule, v))
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.%s: only %s is supported", where, v->string,
                  rule_want(f->rule));
    if (f->rule == F_READ && !strncmp(v->string, "batch_", 6) && i != 0)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.%s: only the first layer takes an input shape",
                  where, v->string);
  }
out:
  return result;
}

/* An integer in [lo, hi] at cfg[key]; dflt when absent (or null) and dflt >= lo,
 * else required. */
static ctrain_err get_int(const cJSON *cfg, const char *key, const char *where, int lo, int hi,
                          int dflt, int *out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if ((!v || cJSON_IsNull(v)) && dflt >= lo) {
    *out = dflt;
    goto out;
  }
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi) ||
      v->valuedouble != floor(v->valuedouble))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.%s is not a%s integer in [%d, %d]", where, key,
                lo == 1 ? " positive" : "n", lo, hi);
  *out = (int)v->valuedouble;
out:
  return result;
}

/* A (rows, cols) pair at cfg[key]: an integer or a list of two, each in
 * [1, hi]; dflt (both) when absent or null and dflt is given (> 0). */
static ctrain_err get_pair(const cJSON *cfg, const char *key, const char *where, int hi,
                           const int *dflt, int out[2], char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if ((!v || cJSON_IsNull(v)) && dflt) {
    out[0] = dflt[0];
    out[1] = dflt[1];
    goto out;
  }
  for (int a = 0; a < 2; a++) {
    const cJSON *e = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, a) : v;
    if ((cJSON_IsArray(v) && cJSON_GetArraySize(v) != 2) || !cJSON_IsNumber(e) ||
        !(e->valuedouble >= 1 && e->valuedouble <= hi) || e->valuedouble != floor(e->valuedouble))
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "model config: %s.%s: not a positive integer or a list of two (at most %d)",
                  where, key, hi);
    out[a] = (int)e->valuedouble;
  }
out:
  return result;
}

static ctrain_err get_bool(const cJSON *cfg, const char *key, const char *where, int dflt, int *out,
                           char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (v && !cJSON_IsBool(v))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.%s: not true or false", where, key);
  *out = v ? cJSON_IsTrue(v) : dflt;
out:
  return result;
}

static ctrain_err get_act(const cJSON *cfg, const char *where, int required, model_act *a,
                          char *errbuf, size_t errlen) {
  static const char *const names[] = {"linear", "relu", "tanh", "sigmoid", "softmax"};
  ctrain_err result = CTRAIN_OK;
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "activation");
  *a = MODEL_LINEAR;
  if (!v && !required)
    goto out;
  if (v && !cJSON_IsString(v))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.activation: not a string", where);
  for (int k = 0; v && k <= MODEL_SOFTMAX; k++)
    if (!strcmp(v->valuestring, names[k])) {
      *a = (model_act)k;
      goto out;
    }
  CTRAIN_FAIL(CTRAIN_E_CONFIG,
              "model config: %s.activation: unknown activation '%s' (known: linear, relu, tanh, "
              "sigmoid, softmax)",
              where, v ? v->valuestring : "(missing)");
out:
  return result;
}

/* The window geometry of Conv2D and the pooling layers: output size and the
 * 'same' padding above and to the left (TensorFlow's: the odd pixel goes
 * below/right). */
static ctrain_err window(model_layer *L, const cJSON *cfg, const char *where, char *errbuf,
                         size_t errlen) {
  int same = 0;
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(cfg, "padding");
  ctrain_err result = CTRAIN_OK;
  if (p && !(cJSON_IsString(p) &&
             (!strcmp(p->valuestring, "valid") || (same = !strcmp(p->valuestring, "same")))))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.padding: only \"valid\" or \"same\"", where);
  if (L->rank != 3)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: %s: needs an image input (height, width, channels), got rank %d",
                where, L->rank);
  if (same) {
    L->h = (L->ih + L->sh - 1) / L->sh;
    L->w = (L->iw + L->sw - 1) / L->sw;
    int th = (L->h - 1) * L->sh + L->kh - L->ih, tw = (L->w - 1) * L->sw + L->kw - L->iw;
    L->pt = th > 0 ? th / 2 : 0;
    L->pl = tw > 0 ? tw / 2 : 0;
  } else {
    if (L->kh > L->ih || L->kw > L->iw)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s: window %dx%d larger than the input %dx%d",
                  where, L->kh, L->kw, L->ih, L->iw);
    L->h = (L->ih - L->kh) / L->sh + 1;
    L->w = (L->iw - L->kw) / L->sw + 1;
  }
out:
  return result;
}

static ctrain_err parse_conv(model_layer *L, const cJSON *cfg, const char *where, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int ks[2], st[2], one[2] = {1, 1};
  if ((result = get_int(cfg, "filters", where, 1, 1 << 16, 0, &L->c, errbuf, errlen)) ||
      (result = get_pair(cfg, "kernel_size", where, 1 << 10, NULL, ks, errbuf, errlen)) ||
      (result = get_pair(cfg, "strides", where, 1 << 10, one, st, errbuf, errlen)) ||
      (result = get_bool(cfg, "use_bias", where, 1, &L->use_bias, errbuf, errlen)) ||
      (result = get_act(cfg, where, 0, &L->act, errbuf, errlen)))
    goto out;
  L->kind = MODEL_CONV2D;
  L->kh = ks[0], L->kw = ks[1], L->sh = st[0], L->sw = st[1];
  result = window(L, cfg, where, errbuf, errlen);
out:
  return result;
}

static ctrain_err parse_pool(model_layer *L, model_kind kind, const cJSON *cfg, const char *where,
                             char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int ps[2], st[2], two[2] = {2, 2};
  if ((result = get_pair(cfg, "pool_size", where, 1 << 10, two, ps, errbuf, errlen)) ||
      (result = get_pair(cfg, "strides", where, 1 << 10, ps, st, errbuf, errlen)))
    goto out;
  L->kind = kind;
  L->kh = ps[0], L->kw = ps[1], L->sh = st[0], L->sw = st[1];
  L->c = L->ic;
  result = window(L, cfg, where, errbuf, errlen);
out:
  return result;
}

/* BatchNormalization over the last axis only: axis -1, the input's rank
 * (counting the batch axis as 0), or a list of that one. */
static ctrain_err parse_bn(model_layer *L, const cJSON *cfg, const char *where, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *ax = cJSON_GetObjectItemCaseSensitive(cfg, "axis");
  const cJSON *a0 = cJSON_IsArray(ax) && cJSON_GetArraySize(ax) == 1 ? ax->child : ax;
  if (ax && !(cJSON_IsNumber(a0) && (a0->valuedouble == -1 || a0->valuedouble == L->rank)))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: %s.axis: only the last axis (-1 or %d) is supported", where,
                L->rank);
  const cJSON *mo = cJSON_GetObjectItemCaseSensitive(cfg, "momentum");
  const cJSON *ep = cJSON_GetObjectItemCaseSensitive(cfg, "epsilon");
  if (mo && !(cJSON_IsNumber(mo) && mo->valuedouble >= 0 && mo->valuedouble <= 1))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.momentum: not a number in [0, 1]", where);
  if (ep && !(cJSON_IsNumber(ep) && ep->valuedouble > 0 && ep->valuedouble < 1))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.epsilon: not a number in (0, 1)", where);
  if ((result = get_bool(cfg, "center", where, 1, &L->center, errbuf, errlen)) ||
      (result = get_bool(cfg, "scale", where, 1, &L->scale, errbuf, errlen)))
    goto out;
  L->kind = MODEL_BATCHNORM;
  L->momentum = mo ? (float)mo->valuedouble : 0.99f;
  L->epsilon = ep ? (float)ep->valuedouble : 1e-3f;
  L->h = L->ih, L->w = L->iw, L->c = L->ic;
out:
  return result;
}

static void set_shape(model_layer *L, int rank, int h, int w, int c) {
  L->rank = rank, L->h = h, L->w = w, L->c = c;
}

/* target_shape: 1 to 3 positive integers (one may be -1: the rest) whose
 * product is the input's feature count. */
static ctrain_err parse_reshape(model_layer *L, const cJSON *cfg, const char *where, char *errbuf,
                                size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "target_shape");
  int n = cJSON_GetArraySize(t), d[3] = {1, 1, 1}, free_axis = -1;
  long prod = 1;
  if (!cJSON_IsArray(t) || n < 1 || n > 3)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.target_shape: not a list of 1 to 3 integers",
                where);
  for (int a = 0; a < n; a++) {
    const cJSON *e = cJSON_GetArrayItem(t, a);
    if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) ||
        !((e->valuedouble >= 1 && e->valuedouble <= MODEL_MAX_UNITS) ||
          (e->valuedouble == -1 && free_axis < 0)))
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "model config: %s.target_shape[%d]: not a positive integer (or one -1)", where,
                  a);
    if (e->valuedouble == -1)
      free_axis = a;
    else
      prod *= (d[3 - n + a] = (int)e->valuedouble);
    if (prod > MODEL_MAX_UNITS)
      break;
  }
  if (free_axis >= 0 && prod <= L->in && L->in % prod == 0)
    d[3 - n + free_axis] = (int)(L->in / prod), prod = L->in;
  if (prod != L->in)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.target_shape: %ld values, the input has %d",
                where, prod, L->in);
  L->kind = MODEL_RESHAPE;
  set_shape(L, n, d[0], d[1], d[2]);
out:
  return result;
}

static ctrain_err parse_simple(model_layer *L, const char *cls, const cJSON *cfg, const char *where,
                               char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (!strcmp(cls, "Dense")) {
    if (L->rank != 1)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s: needs a flat input: add a Flatten before it",
                  where);
    L->kind = MODEL_DENSE;
    if ((result = get_int(cfg, "units", where, 1, MODEL_MAX_UNITS, 0, &L->c, errbuf, errlen)) ||
        (result = get_act(cfg, where, 0, &L->act, errbuf, errlen)))
      goto out;
  } else if (!strcmp(cls, "Activation")) {
    L->kind = MODEL_ACTIVATION;
    result = get_act(cfg, where, 1, &L->act, errbuf, errlen);
  } else if (!strcmp(cls, "ReLU")) {
    L->kind = MODEL_ACTIVATION;
    L->act = MODEL_RELU;
  } else if (!strcmp(cls, "Flatten")) {
    L->kind = MODEL_FLATTEN;
    set_shape(L, 1, 1, 1, L->in);
  } else if (!strcmp(cls, "Dropout")) {
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(cfg, "rate");
    if (!cJSON_IsNumber(r) || !(r->valuedouble >= 0 && r->valuedouble < 1))
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s.rate: not a number in [0, 1)", where);
    L->kind = MODEL_DROPOUT;
    L->rate = (float)r->valuedouble;
  } else if (!strcmp(cls, "GlobalAveragePooling2D")) {
    if (L->rank != 3)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s: needs an image input, got rank %d", where,
                  L->rank);
    L->kind = MODEL_GAP;
    L->kh = L->ih, L->kw = L->iw, L->sh = L->sw = 1;
    set_shape(L, 1, 1, 1, L->ic);
  }
out:
  return result;
}

static const struct {
  const char *cls;
  const field *fields;
} layer_classes[] = {
    {"Dense", f_dense},           {"Activation", f_activation}, {"ReLU", f_relu},
    {"Flatten", f_flatten},       {"Dropout", f_dropout},       {"Conv2D", f_conv},
    {"MaxPooling2D", f_pool},     {"AveragePooling2D", f_pool}, {"GlobalAveragePooling2D", f_gap},
    {"BatchNormalization", f_bn}, {"Reshape", f_reshape},
};

ctrain_err model_keras_layer(model_layer *L, int i, const char *cls, const cJSON *cfg, int last,
                             char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const field *fields = NULL;
  char where[160];
  const cJSON *jn = cJSON_GetObjectItemCaseSensitive(cfg, "name");
  snprintf(where, sizeof(where), "layers[%d] (%s%s%.64s%s)", i, cls, cJSON_IsString(jn) ? " '" : "",
           cJSON_IsString(jn) ? jn->valuestring : "", cJSON_IsString(jn) ? "'" : "");
  for (size_t c = 0; c < sizeof(layer_classes) / sizeof(layer_classes[0]); c++)
    if (!strcmp(cls, layer_classes[c].cls))
      fields = layer_classes[c].fields;
  if (!fields)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: layers[%d]: unknown layer type '%s' (known: Dense, Activation, "
                "ReLU, Flatten, Dropout, Conv2D, MaxPooling2D, AveragePooling2D, "
                "GlobalAveragePooling2D, BatchNormalization, Reshape)",
                i, cls);
  if ((result = check_fields(where, fields, i, cfg, errbuf, errlen)))
    goto out;
  set_shape(L, L->rank, L->ih, L->iw, L->ic);
  if (!strcmp(cls, "Conv2D"))
    result = parse_conv(L, cfg, where, errbuf, errlen);
  else if (!strcmp(cls, "MaxPooling2D") || !strcmp(cls, "AveragePooling2D"))
    result =
        parse_pool(L, cls[0] == 'M' ? MODEL_MAXPOOL : MODEL_AVGPOOL, cfg, where, errbuf, errlen);
  else if (!strcmp(cls, "BatchNormalization"))
    result = parse_bn(L, cfg, where, errbuf, errlen);
  else if (!strcmp(cls, "Reshape"))
    result = parse_reshape(L, cfg, where, errbuf, errlen);
  else
    result = parse_simple(L, cls, cfg, where, errbuf, errlen);
  if (result)
    goto out;
  if ((long)L->h * L->w * L->c > MODEL_MAX_UNITS)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s: output %dx%dx%d has more than %d values", where,
                L->h, L->w, L->c, MODEL_MAX_UNITS);
  L->out = L->h * L->w * L->c;
  if (L->act == MODEL_SOFTMAX && !last)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "model config: %s: softmax is only supported on the last layer",
                where);
out:
  return result;
}

ctrain_err model_keras_input(const cJSON *cfg, int i, int input_layer, const cJSON **shape_out,
                             char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  *shape_out = NULL;
  if (input_layer &&
      (result = check_fields("layers[0] (InputLayer)", f_input, i, cfg, errbuf, errlen)))
    goto out;
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(cfg, "batch_shape");
  const char *key = "batch_shape";
  if (!s) {
    s = cJSON_GetObjectItemCaseSensitive(cfg, "batch_input_shape");
    key = "batch_input_shape";
  }
  if (!s)
    goto out;
  if (!cJSON_IsArray(s) || cJSON_GetArraySize(s) < 2 || cJSON_GetArraySize(s) > 5 ||
      !cJSON_IsNull(s->child))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "model config: layers[%d].%s: not [null, d1, ...] with 1 to 4 dimensions", i, key);
  *shape_out = s;
out:
  return result;
}
