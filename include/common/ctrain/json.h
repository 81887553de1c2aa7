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
#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"

/* o[k], or NULL when o is NULL or has no k. */
const cJSON *ctrain_json_get(const cJSON *o, const char *k);

/* o[k0][k1]...: a path of `n` keys (NULL when any step is missing). */
const cJSON *ctrain_json_path(const cJSON *o, int n, const char *const *keys);

/* o[k] when it is a string, else NULL. */
const char *ctrain_json_str(const cJSON *o, const char *k);

/* o[k] when it is a number (truncated towards zero, clamped to int64),
 * else `def`. Lenient: for values we wrote ourselves; a field of an object
 * someone else wrote is read with ctrain_json_int_in. */
int64_t ctrain_json_int(const cJSON *o, const char *k, int64_t def);

/* o[k] as an integer in min..max, into *out: `def` when o[k] is absent or
 * null. CTRAIN_E_INVAL when it is another type, not a whole number, or
 * outside min..max, with why = "<field>: <the value> is not an integer" or
 * "<field>: <the value> is outside min..max", the value as parsed
 * (4294967297, 2.5, 1e+300: cJSON keeps no text; past 2^53 the nearest
 * double). `field` names it for the user ("spec.tfReplicaSpecs.Worker.
 * replicas"); why (optional) is always NUL-terminated. */
CTRAIN_NODISCARD ctrain_err ctrain_json_int_in(const cJSON *o, const char *k, int64_t min,
                                               int64_t max, int64_t def, int64_t *out,
                                               const char *field, char *why, size_t whylen);

/* A number as written back: the shortest of %.15g and %.17g that reads
 * back the same (cJSON's own choice), into buf. Returns buf. */
const char *ctrain_json_num_str(double v, char *buf, size_t len);

/* o[k] when it is a boolean, else `def`. */
int ctrain_json_bool(const cJSON *o, const char *k, int def);

/* Sets o[k] to v (taken, also on failure), replacing an existing k.
 * 1 on success, 0 when v is NULL or cJSON cannot allocate. */
int ctrain_json_put(cJSON *o, const char *k, cJSON *v);

/* Fails with CTRAIN_E_CONFIG, naming `what` (e.g. "TF_CONFIG", "model
 * config"), the path of the object and the key, if any object in the tree
 * `root` (borrowed; any cJSON value) has two members with the same name
 * (compared as the case-sensitive lookups compare them); CTRAIN_E_NOMEM
 * when it cannot allocate. cJSON keeps every duplicate as its own member,
 * so without this check a lookup silently takes the first one while a walk
 * over the members sees both. */
CTRAIN_NODISCARD ctrain_err ctrain_json_unique_keys(const cJSON *root, const char *what,
                                                    char *errbuf, size_t errlen);

#endif
