/* runtime.c - a job merged over its runtime's snapshot; see
 * controller/runtime.h. */
#include "controller/runtime.h"

#include <stdio.h>
#include <string.h>

#include "controller/kueue.h"
#include "controller/podbuild.h"
#include "ctrain/json.h"

int runtime_ref_of(const cJSON *job, runtime_ref *ref) {
  const cJSON *r = ctrain_json_get(ctrain_json_get(job, "spec"), "runtimeRef");
  const char *name = ctrain_json_str(r, "name"), *kind = ctrain_json_str(r, "kind");
  if (!name || !*name)
    return 0;
  ref->name = name;
  ref->cluster = kind && !strcmp(kind, RUNTIME_KIND_CLUSTER);
  ref->kind = ref->cluster ? RUNTIME_KIND_CLUSTER : RUNTIME_KIND;
  return 1;
}

const cJSON *runtime_snapshot_of(const cJSON *job) {
  const cJSON *s = ctrain_json_get(ctrain_json_get(job, "status"), "runtime");
  return cJSON_IsObject(s) ? s : NULL;
}

void runtime_describe(const runtime_ref *ref, const char *ns, char *buf, size_t len) {
  if (ref->cluster)
    snprintf(buf, len, "%s %s", ref->kind, ref->name);
  else
    snprintf(buf, len, "%s %s/%s", ref->kind, ns ? ns : "?", ref->name);
}

ctrain_err runtime_snapshot(const cJSON *rt, const runtime_ref *ref, cJSON **out, char *msg,
                            size_t len) {
  const cJSON *md = ctrain_json_get(rt, "metadata"), *spec = ctrain_json_get(rt, "spec");
  const cJSON *gen = ctrain_json_get(md, "generation");
  *out = NULL;
  if (!cJSON_IsObject(spec)) {
    snprintf(msg, len, "%s %s has no spec", ref->kind, ref->name);
    return CTRAIN_E_CONFIG;
  }
  cJSON *s = cJSON_CreateObject();
  const char *uid = ctrain_json_str(md, "uid"), *rv = ctrain_json_str(md, "resourceVersion");
  if (!s || !cJSON_AddStringToObject(s, "kind", ref->kind) ||
      !cJSON_AddStringToObject(s, "name", ref->name) ||
      (uid && !cJSON_AddStringToObject(s, "uid", uid)) ||
      (rv && !cJSON_AddStringToObject(s, "resourceVersion", rv)) ||
      (cJSON_IsNumber(gen) && !cJSON_AddNumberToObject(s, "generation", gen->valuedouble)) ||
      !ctrain_json_put(s, "spec", cJSON_Duplicate(spec, 1))) {
    cJSON_Delete(s);
    return CTRAIN_E_NOMEM;
  }
  *out = s;
  return CTRAIN_OK;
}

/* ---- the merge ------------------------------------------------------------- */

/* Whether every item of list `l` is an object with a string name (an empty
 * list is not). */
static int named_list(const cJSON *l) {
  const cJSON *it;
  if (!cJSON_IsArray(l) || !l->child)
    return 0;
  cJSON_ArrayForEach(it, l) {
    if (!ctrain_json_str(it, "name"))
      return 0;
  }
  return 1;
}

static const cJSON *item_named(const cJSON *l, const char *name) {
  const cJSON *it;
  cJSON_ArrayForEach(it, l) {
    const char *n = ctrain_json_str(it, "name");
    if (n && !strcmp(n, name))
      return it;
  }
  return NULL;
}

/* Containers merge as objects; other named items are replaced whole. */
static int deep_items(const char *key) {
  return key && (!strcmp(key, "containers") || !strcmp(key, "initContainers"));
}

static cJSON *merge_named(const cJSON *base, const cJSON *over, const char *key) {
  cJSON *out = cJSON_CreateArray();
  const cJSON *it;
  if (!out)
    return NULL;
  cJSON_ArrayForEach(it, base) {
    const cJSON *o = item_named(over, ctrain_json_str(it, "name"));
    cJSON *v = !o                ? cJSON_Duplicate(it, 1)
               : deep_items(key) ? runtime_merge(it, o, NULL)
                                 : cJSON_Duplicate(o, 1);
    if (!v || !cJSON_AddItemToArray(out, v)) {
      cJSON_Delete(v);
      cJSON_Delete(out);
      return NULL;
    }
  }
  cJSON_ArrayForEach(it, over) {
    if (item_named(base, ctrain_json_str(it, "name")))
      continue;
    cJSON *v = cJSON_Duplicate(it, 1);
    if (!v || !cJSON_AddItemToArray(out, v)) {
      cJSON_Delete(v);
      cJSON_Delete(out);
      return NULL;
    }
  }
  return out;
}

cJSON *runtime_merge(const cJSON *base, const cJSON *over, const char *key) {
  if (!over)
    return base ? cJSON_Duplicate(base, 1) : NULL;
  if (!base)
    return cJSON_Duplicate(over, 1);
  if (named_list(base) && named_list(over))
    return merge_named(base, over, key);
  if (!cJSON_IsObject(base) || !cJSON_IsObject(over))
    return cJSON_Duplicate(over, 1);
  cJSON *out = cJSON_Duplicate(base, 1);
  const cJSON *it;
  if (!out)
    return NULL;
  cJSON_ArrayForEach(it, over) {
    cJSON *v = runtime_merge(cJSON_GetObjectItemCaseSensitive(base, it->string), it, it->string);
    if (!v || !ctrain_json_put(out, it->string, v)) {
      cJSON_Delete(out);
      return NULL;
    }
  }
  return out;
}

/* ---- the job over the snapshot ---------------------------------------------- */

/* The snapshot's spec without what is no job field (queueName) and without
 * the templates of replica types the job does not ask for. */
static cJSON *runtime_defaults(const cJSON *rspec, const cJSON *jspec) {
  cJSON *d = cJSON_Duplicate(rspec, 1);
  if (!d)
    return NULL;
  cJSON_DeleteItemFromObjectCaseSensitive(d, "queueName");
  cJSON *rs = cJSON_GetObjectItemCaseSensitive(d, "replicaSpecs");
  const cJSON *want = ctrain_json_get(jspec, "replicaSpecs");
  for (int t = 0; t < PODBUILD_NTYPES; t++) {
    const char *type = podbuild_type_spec_name(t);
    if (!ctrain_json_get(want, type))
      cJSON_DeleteItemFromObjectCaseSensitive(rs, type);
  }
  return d;
}

ctrain_err runtime_apply(const cJSON *job, const cJSON *snapshot, cJSON **out, char *msg,
                         size_t len) {
  runtime_ref ref;
  const cJSON *rspec = ctrain_json_get(snapshot, "spec"), *jspec = ctrain_json_get(job, "spec");
  const char *kind = ctrain_json_str(snapshot, "kind"), *name = ctrain_json_str(snapshot, "name");
  const char *queue = ctrain_json_str(rspec, "queueName");
  *out = NULL;
  int has_ref = runtime_ref_of(job, &ref);
  if (!has_ref || !cJSON_IsObject(rspec) || !kind || !name || strcmp(kind, ref.kind) ||
      strcmp(name, ref.name)) {
    snprintf(msg, len,
             "status.runtime: not the snapshot of spec.runtimeRef (%s %s): the job cannot be "
             "merged over it",
             has_ref ? ref.kind : "none", has_ref ? ref.name : "");
    return CTRAIN_E_CONFIG;
  }
  cJSON *copy = cJSON_Duplicate(job, 1), *defaults = runtime_defaults(rspec, jspec);
  cJSON *spec = defaults ? runtime_merge(defaults, jspec, "spec") : NULL;
  cJSON_Delete(defaults);
  if (!ctrain_json_put(copy, "spec", spec)) { /* it takes spec, put or not */
    cJSON_Delete(copy);
    return CTRAIN_E_NOMEM;
  }
  if (queue && *queue && !kueue_queue_name(copy)) {
    cJSON *md = cJSON_GetObjectItemCaseSensitive(copy, "metadata");
    cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
    if (!cJSON_IsObject(labels) && ctrain_json_put(md, "labels", cJSON_CreateObject()))
      labels = cJSON_GetObjectItemCaseSensitive(md, "labels");
    if (!cJSON_IsObject(labels) ||
        !ctrain_json_put(labels, KUEUE_LABEL_QUEUE, cJSON_CreateString(queue))) {
      cJSON_Delete(copy);
      return CTRAIN_E_NOMEM;
    }
  }
  *out = copy;
  return CTRAIN_OK;
}
