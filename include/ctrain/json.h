/* ctrain/json.h - the few cJSON accessors every module needs, once.
 *
 * All readers take a possibly-NULL object and return NULL (or the default)
 * for a missing key or a value of another type, so a path reads as one
 * expression: ctrain_json_str(ctrain_json_get(job, "metadata"), "name").
 * Keys are case-sensitive, as Kubernetes' and Keras's JSON are. Returned
 * pointers are borrowed from the object. */
#ifndef CTRAIN_JSON_H
#define CTRAIN_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>

/* o[k], or NULL when o is NULL or has no k. */
const cJSON *ctrain_json_get(const cJSON *o, const char *k);

/* o[k0][k1]...: a path of `n` keys (NULL when any step is missing). */
const cJSON *ctrain_json_path(const cJSON *o, int n, const char *const *keys);

/* o[k] when it is a string, else NULL. */
const char *ctrain_json_str(const cJSON *o, const char *k);

/* o[k] when it is a number (truncated towards zero), else `def`. */
int64_t ctrain_json_int(const cJSON *o, const char *k, int64_t def);

/* o[k] when it is a boolean, else `def`. */
int ctrain_json_bool(const cJSON *o, const char *k, int def);

/* Sets o[k] to v (taken, also on failure), replacing an existing k.
 * 1 on success, 0 when v is NULL or cJSON cannot allocate. */
int ctrain_json_put(cJSON *o, const char *k, cJSON *v);

#endif
