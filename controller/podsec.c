/* podsec.c - Pod Security `restricted` defaults; see controller/podsec.h. */
#include "controller/podsec.h"

#include <ctype.h>
#include <string.h>

#include "ctrain/json.h"

/* o[k] as an object, created when absent; NULL when o[k] is something else
 * (the user's value is left alone) or out of memory. */
static cJSON *obj_at(cJSON *o, const char *k, int *nomem) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (v)
    return cJSON_IsObject(v) ? v : NULL;
  v = cJSON_CreateObject();
  if (!ctrain_json_put(o, k, v)) {
    *nomem = 1;
    return NULL;
  }
  return v;
}

/* Sets o[k] to v (taken) unless o has k. 0 when out of memory. */
static int put_default(cJSON *o, const char *k, cJSON *v) {
  if (cJSON_GetObjectItemCaseSensitive(o, k)) {
    cJSON_Delete(v);
    return 1;
  }
  return ctrain_json_put(o, k, v);
}

/* Whether a securityContext says runAsUser 0. */
static int runs_as_root(const cJSON *sc) {
  const cJSON *u = ctrain_json_get(sc, "runAsUser");
  return cJSON_IsNumber(u) && u->valuedouble == 0;
}

/* Whether any container of the array `cs` sets runAsUser 0. */
static int any_root(const cJSON *cs) {
  const cJSON *c;
  int root = 0;
  cJSON_ArrayForEach(c, cs) root |= runs_as_root(ctrain_json_get(c, "securityContext"));
  return root;
}

/* allowPrivilegeEscalation false and capabilities.drop [ALL] on one
 * container, where it sets neither. */
static ctrain_err fix_container(cJSON *c) {
  int nomem = 0;
  cJSON *sc = cJSON_IsObject(c) ? obj_at(c, "securityContext", &nomem) : NULL;
  if (!sc)
    return nomem ? CTRAIN_E_NOMEM : CTRAIN_OK;
  if (!ctrain_json_bool(sc, "privileged", 0) &&
      !put_default(sc, "allowPrivilegeEscalation", cJSON_CreateFalse()))
    return CTRAIN_E_NOMEM;
  cJSON *caps = obj_at(sc, "capabilities", &nomem);
  if (!caps)
    return nomem ? CTRAIN_E_NOMEM : CTRAIN_OK;
  cJSON *all = cJSON_CreateStringArray((const char *const[]){"ALL"}, 1);
  return put_default(caps, "drop", all) ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

/* The pod-level defaults: seccompProfile, runAsNonRoot, fsGroup. */
static ctrain_err fix_pod(cJSON *spec, const podsec_opts *opts) {
  int nomem = 0;
  cJSON *sc = obj_at(spec, "securityContext", &nomem);
  if (!sc)
    return nomem ? CTRAIN_E_NOMEM : CTRAIN_OK;
  cJSON *seccomp = cJSON_CreateObject();
  if (seccomp && !cJSON_AddStringToObject(seccomp, "type", "RuntimeDefault")) {
    cJSON_Delete(seccomp);
    return CTRAIN_E_NOMEM;
  }
  if (!put_default(sc, "seccompProfile", seccomp))
    return CTRAIN_E_NOMEM;
  int root = runs_as_root(sc) || any_root(ctrain_json_get(spec, "containers")) ||
             any_root(ctrain_json_get(spec, "initContainers"));
  if (opts->non_root && !root && !put_default(sc, "runAsNonRoot", cJSON_CreateTrue()))
    return CTRAIN_E_NOMEM;
  if (opts->fs_group && !cJSON_GetObjectItemCaseSensitive(sc, "fsGroup") &&
      (!ctrain_json_put(sc, "fsGroup", cJSON_CreateNumber(PODSEC_FS_GROUP)) ||
       !put_default(sc, "fsGroupChangePolicy", cJSON_CreateString("OnRootMismatch"))))
    return CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

ctrain_err podsec_apply(cJSON *spec, const podsec_opts *opts) {
  static const char *const lists[] = {"containers", "initContainers"};
  ctrain_err result = fix_pod(spec, opts);
  for (size_t i = 0; !result && i < sizeof(lists) / sizeof(lists[0]); i++) {
    cJSON *c, *cs = cJSON_GetObjectItemCaseSensitive(spec, lists[i]);
    cJSON_ArrayForEach(c, cs) {
      result = fix_container(c);
      if (result)
        break;
    }
  }
  return result;
}

/* Whether `s` contains `lower` (lower-case ASCII), ignoring the case of s. */
static int has_ci(const char *s, const char *lower) {
  size_t n = strlen(lower);
  for (; *s; s++) {
    size_t i = 0;
    while (i < n && s[i] && tolower((unsigned char)s[i]) == lower[i])
      i++;
    if (i == n)
      return 1;
  }
  return 0;
}

podsec_refusal podsec_refusal_of(const char *m) {
  if (!m || !has_ci(m, "runasnonroot"))
    return PODSEC_REFUSAL_NONE;
  if (has_ci(m, "run as root") || has_ci(m, "runs as root"))
    return PODSEC_REFUSAL_ROOT;
  if (has_ci(m, "non-numeric user") || has_ci(m, "nonnumeric user"))
    return PODSEC_REFUSAL_USER_NAME;
  return PODSEC_REFUSAL_NONE;
}
