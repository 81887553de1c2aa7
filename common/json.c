/* json.c - cJSON accessors and the duplicate-key check; see ctrain/json.h. */
#include "ctrain/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const cJSON *ctrain_json_get(const cJSON *o, const char *k) {
  return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

const cJSON *ctrain_json_path(const cJSON *o, int n, const char *const *keys) {
  for (int i = 0; i < n && o; i++)
    o = ctrain_json_get(o, keys[i]);
  return o;
}

const char *ctrain_json_str(const cJSON *o, const char *k) {
  const cJSON *v = ctrain_json_get(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

int64_t ctrain_json_int(const cJSON *o, const char *k, int64_t def) {
  const cJSON *v = ctrain_json_get(o, k);
  if (!cJSON_IsNumber(v))
    return def;
  /* out-of-range doubles are undefined behaviour to convert: clamp */
  if (v->valuedouble >= 9.2e18)
    return INT64_MAX;
  if (v->valuedouble <= -9.2e18)
    return INT64_MIN;
  return (int64_t)v->valuedouble;
}

const char *ctrain_json_num_str(double v, char *buf, size_t len) {
  snprintf(buf, len, "%.15g", v);
  if (isfinite(v) && strtod(buf, NULL) != v)
    snprintf(buf, len, "%.17g", v);
  return buf;
}

ctrain_err ctrain_json_int_in(const cJSON *o, const char *k, int64_t min, int64_t max, int64_t def,
                              int64_t *out, const char *field, char *why, size_t whylen) {
  const cJSON *v = ctrain_json_get(o, k);
  char num[40];
  if (why && whylen)
    why[0] = '\0';
  *out = def;
  if (!v || cJSON_IsNull(v))
    return CTRAIN_OK;
  if (!cJSON_IsNumber(v)) {
    char *text = cJSON_PrintUnformatted(v);
    if (why && whylen)
      snprintf(why, whylen, "%s: %.64s is not an integer", field, text ? text : "(a value)");
    cJSON_free(text);
    return CTRAIN_E_INVAL;
  }
  double d = v->valuedouble;
  if (!isfinite(d) || d != floor(d)) {
    if (why && whylen)
      snprintf(why, whylen, "%s: %s is not an integer", field,
               ctrain_json_num_str(d, num, sizeof(num)));
    return CTRAIN_E_INVAL;
  }
  /* Compare as doubles: (double)INT64_MAX is 2^63, itself out of range. */
  if (d < (double)min || d > (double)max || d >= 9223372036854775808.0) {
    if (why && whylen)
      snprintf(why, whylen, "%s: %s is outside %" PRId64 "..%" PRId64, field,
               ctrain_json_num_str(d, num, sizeof(num)), min, max);
    return CTRAIN_E_INVAL;
  }
  int64_t n = (int64_t)d;
  if (n < min || n > max) { /* max near 2^63: the double rounded up into range */
    if (why && whylen)
      snprintf(why, whylen, "%s: %s is outside %" PRId64 "..%" PRId64, field,
               ctrain_json_num_str(d, num, sizeof(num)), min, max);
    return CTRAIN_E_INVAL;
  }
  *out = n;
  return CTRAIN_OK;
}

int ctrain_json_bool(const cJSON *o, const char *k, int def) {
  const cJSON *v = ctrain_json_get(o, k);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

int ctrain_json_put(cJSON *o, const char *k, cJSON *v) {
  if (!v)
    return 0;
  if (!o) {
    cJSON_Delete(v);
    return 0;
  }
  if (cJSON_GetObjectItemCaseSensitive(o, k))
    return cJSON_ReplaceItemInObjectCaseSensitive(o, k, v) ? 1 : (cJSON_Delete(v), 0);
  return cJSON_AddItemToObject(o, k, v) ? 1 : (cJSON_Delete(v), 0);
}

/* Objects with more members than this are checked for duplicates by sorting
 * their names; smaller ones pairwise. */
#define UNIQUE_KEYS_PAIRWISE_MAX 32

static int cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Finds a name that two members of object `obj` share; NULL when all differ.
 * *nomem is set when the sort buffer could not be allocated. */
static const char *duplicate_key(const cJSON *obj, int *nomem) {
  const char *dup = NULL;
  const cJSON *a, *b;
  int n = cJSON_GetArraySize(obj);
  if (n <= UNIQUE_KEYS_PAIRWISE_MAX) {
    cJSON_ArrayForEach(a, obj) {
      for (b = a->next; b; b = b->next)
        if (a->string && b->string && !strcmp(a->string, b->string))
          return a->string;
    }
    return NULL;
  }
  const char **names = malloc((size_t)n * sizeof(*names));
  if (!names) {
    *nomem = 1;
    return NULL;
  }
  int k = 0;
  cJSON_ArrayForEach(a, obj) {
    if (a->string && k < n)
      names[k++] = a->string;
  }
  qsort(names, (size_t)k, sizeof(*names), cmp_names);
  for (int i = 1; i < k && !dup; i++)
    if (!strcmp(names[i - 1], names[i]))
      dup = names[i];
  free(names);
  return dup;
}

/* Depth-first over `node`; path[0..used) names it ("" for the root). The
 * depth is bounded by cJSON's nesting limit. */
static ctrain_err unique_keys_at(const cJSON *node, char *path, size_t plen, size_t used,
                                 const char *what, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const cJSON *c;
  int i = 0, nomem = 0;
  if (cJSON_IsObject(node)) {
    const char *dup = duplicate_key(node, &nomem);
    if (nomem)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", what);
    if (dup)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s: %s%sduplicate key '%.64s' (each key may appear once)", what,
                  path, used ? ": " : "", dup);
  } else if (!cJSON_IsArray(node)) {
    return CTRAIN_OK;
  }
  cJSON_ArrayForEach(c, node) {
    if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
      int n = cJSON_IsObject(node)
                  ? snprintf(path + used, plen - used, "%s%.64s", used ? "." : "", c->string)
                  : snprintf(path + used, plen - used, "[%d]", i);
      /* A path too deep for the buffer keeps its truncated prefix. */
      size_t next = n < 0 ? used : (size_t)n >= plen - used ? plen - 1 : used + (size_t)n;
      result = unique_keys_at(c, path, plen, next, what, errbuf, errlen);
      path[used] = 0;
      if (result)
        goto out;
    }
    i++;
  }
out:
  return result;
}

ctrain_err ctrain_json_unique_keys(const cJSON *root, const char *what, char *errbuf,
                                   size_t errlen) {
  char path[256] = "";
  return unique_keys_at(root, path, sizeof(path), 0, what, errbuf, errlen);
}
