/* json.c - cJSON accessors; see ctrain/json.h. */
#include "ctrain/json.h"

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
