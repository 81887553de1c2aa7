/* ownership.c - whose an object is; see controller/ownership.h. Pure. */
#include "controller/ownership.h"

#include <stdio.h>
#include <string.h>

#include "ctrain/json.h"

static const cJSON *md_of(const cJSON *obj) {
  return ctrain_json_get(obj, "metadata");
}

const cJSON *own_controller_ref(const cJSON *obj) {
  const cJSON *ref;
  cJSON_ArrayForEach(ref, ctrain_json_get(md_of(obj), "ownerReferences")) {
    if (cJSON_IsTrue(ctrain_json_get(ref, "controller")))
      return ref;
  }
  return NULL;
}

const char *own_controller_uid(const cJSON *obj) {
  return ctrain_json_str(own_controller_ref(obj), "uid");
}

static int eq(const char *a, const char *b) {
  return a && b && !strcmp(a, b);
}

/* An apiVersion's group: "ctrain.dev" of "ctrain.dev/v1alpha1" (a version
 * change is the same kind). */
static int same_group(const char *a, const char *b) {
  if (!a || !b)
    return 0;
  const char *sa = strchr(a, '/'), *sb = strchr(b, '/');
  size_t la = sa ? (size_t)(sa - a) : strlen(a), lb = sb ? (size_t)(sb - b) : strlen(b);
  return la == lb && !memcmp(a, b, la);
}

own_verdict own_classify(const cJSON *obj, const own_job *j) {
  const char *ns = ctrain_json_str(md_of(obj), "namespace");
  if (!j || !j->uid || !*j->uid || !eq(ns, j->ns))
    return OWN_FOREIGN;
  const cJSON *ref = own_controller_ref(obj);
  const char *uid = ctrain_json_str(ref, "uid");
  if (!uid || !*uid)
    return OWN_FOREIGN;
  /* The reference must name the job whole (kind, group, name and uid), as
   * the owner-name index finds it: a reference with the job's uid under
   * another name is no one's, never a pod a pass of the job cannot see. */
  if (!eq(ctrain_json_str(ref, "kind"), j->kind) || !eq(ctrain_json_str(ref, "name"), j->name) ||
      !same_group(ctrain_json_str(ref, "apiVersion"), j->api_version))
    return OWN_FOREIGN;
  return strcmp(uid, j->uid) ? OWN_EARLIER : OWN_MINE;
}

int own_is_mine(const cJSON *obj, const own_job *j) {
  return own_classify(obj, j) == OWN_MINE;
}

ctrain_err own_split(const cJSON *candidates, const own_job *j, cJSON **mine, cJSON **earlier) {
  cJSON *m = cJSON_CreateArray(), *e = earlier ? cJSON_CreateArray() : NULL;
  const cJSON *obj;
  *mine = NULL;
  if (earlier)
    *earlier = NULL;
  if (!m || (earlier && !e))
    goto oom;
  cJSON_ArrayForEach(obj, candidates) {
    own_verdict v = own_classify(obj, j);
    cJSON *into = v == OWN_MINE ? m : v == OWN_EARLIER ? e : NULL;
    if (!into)
      continue;
    cJSON *copy = cJSON_Duplicate(obj, 1);
    if (!copy || !cJSON_AddItemToArray(into, copy)) {
      cJSON_Delete(copy);
      goto oom;
    }
  }
  *mine = m;
  if (earlier)
    *earlier = e;
  return CTRAIN_OK;
oom:
  cJSON_Delete(m);
  cJSON_Delete(e);
  return CTRAIN_E_NOMEM;
}

void own_describe(const cJSON *obj, char *buf, size_t len) {
  const cJSON *ref = own_controller_ref(obj);
  const char *ns = ctrain_json_str(md_of(obj), "namespace");
  if (!ref) {
    snprintf(buf, len, "no controller ownerReference");
    return;
  }
  const char *kind = ctrain_json_str(ref, "kind"), *name = ctrain_json_str(ref, "name"),
             *uid = ctrain_json_str(ref, "uid");
  snprintf(buf, len, "controlled by %s %s/%s uid %s", kind ? kind : "?", ns ? ns : "",
           name ? name : "?", uid ? uid : "?");
}
