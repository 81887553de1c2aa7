/* tfjob_write.c - a TFJob's status written back (the daemon's side of the
 * TFJob adapter, controller/tfjob.h); see controller/tfjob_write.h. */
#include "controller/tfjob_write.h"

#include <stdlib.h>
#include <string.h>

#include "ctrain/contract.h"
#include "ctrain/json.h"

const kube_gvr tfjob_write_gvr = {"kubeflow.org", "v1", "tfjobs"};
const ctl_exec_kind tfjob_write_exec_kind = {&tfjob_write_gvr, "tfjob", tfjob_write_status};

/* The annotations patch of obj against tf: NULL when they are the same. */
static char *annotations_patch(const cJSON *tf, const cJSON *obj, int *err) {
  const cJSON *ann = ctrain_json_get(ctrain_json_get(obj, "metadata"), "annotations");
  const cJSON *old = ctrain_json_get(ctrain_json_get(tf, "metadata"), "annotations");
  static const char *const keys[] = {CTRAIN_ANN_ATTEMPT, CTRAIN_ANN_RESTARTS,
                                     CTRAIN_ANN_DISRUPTIONS};
  int differs = 0;
  *err = 0;
  for (int i = 0; i < 3; i++) {
    const char *a = ctrain_json_str(ann, keys[i]), *b = ctrain_json_str(old, keys[i]);
    differs |= (!a != !b) || (a && b && strcmp(a, b));
  }
  if (!differs)
    return NULL;
  cJSON *p = cJSON_CreateObject(), *md = p ? cJSON_AddObjectToObject(p, "metadata") : NULL;
  cJSON *pa = md ? cJSON_AddObjectToObject(md, "annotations") : NULL;
  char *s = NULL;
  const char *rv = ctrain_json_str(ctrain_json_get(tf, "metadata"), "resourceVersion");
  if (pa && (!rv || cJSON_AddStringToObject(md, "resourceVersion", rv)) &&
      ctrain_json_put(pa, keys[0], cJSON_CreateString(ctrain_json_str(ann, keys[0]))) &&
      ctrain_json_put(pa, keys[1], cJSON_CreateString(ctrain_json_str(ann, keys[1]))) &&
      (!ctrain_json_str(ann, keys[2]) ||
       ctrain_json_put(pa, keys[2], cJSON_CreateString(ctrain_json_str(ann, keys[2])))))
    s = cJSON_PrintUnformatted(p);
  cJSON_Delete(p);
  *err = !s;
  return s;
}

ctrain_err tfjob_write_status(kube_client *client, const cJSON *tf, const cJSON *obj,
                              kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  cJSON *patched = NULL, *put = NULL;
  const cJSON *md = ctrain_json_get(tf, "metadata");
  const char *ns = ctrain_json_str(md, "namespace"), *name = ctrain_json_str(md, "name");
  const char *rv = ctrain_json_str(md, "resourceVersion");
  int err = 0;
  char *patch = annotations_patch(tf, obj, &err);
  if (err) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  if (patch) {
    result = kube_client_patch(client, &tfjob_write_gvr, ns, name, NULL, KUBE_PATCH_MERGE, patch,
                               NULL, &patched, st);
    if (result)
      goto out;
    rv = ctrain_json_str(ctrain_json_get(patched, "metadata"), "resourceVersion");
  }
  if (cJSON_Compare(ctrain_json_get(obj, "status"), ctrain_json_get(tf, "status"), 1))
    goto out;
  put = cJSON_Duplicate(obj, 1);
  cJSON *pmd = put ? (cJSON *)ctrain_json_get(put, "metadata") : NULL;
  if (!pmd || (rv && !ctrain_json_put(pmd, "resourceVersion", cJSON_CreateString(rv)))) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  result = kube_client_update_status(client, &tfjob_write_gvr, ns, put, NULL, NULL, st);
out:
  free(patch);
  cJSON_Delete(patched);
  cJSON_Delete(put);
  return result;
}
