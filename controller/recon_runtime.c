/* recon_runtime.c - a job's runtime recorded once (status.runtime), or
 * the job blocked on it; see the spec.runtimeRef rule in
 * controller/reconcile.h and controller/runtime.h. */
#include "controller/recon_internal.h"

#include <stdio.h>
#include <string.h>

#include "ctrain/json.h"

ctrain_err recon_runtime_gate(recon_ctx *c, int *done) {
  ctrain_err result = CTRAIN_OK;
  int changed = 0;
  *done = 0;
  if (c->in->runtime_blocked) {
    *done = 1;
    result = recon_cond_set(c, C_BLOCKED, 1, R_RUNTIME_NOT_FOUND, c->in->runtime_blocked, &changed);
    if (!result && changed)
      result = recon_event(c, "Warning", R_RUNTIME_NOT_FOUND, -1, "%s", c->in->runtime_blocked);
    recon_requeue_at(c, c->in->now + RECON_RUNTIME_RETRY_S);
    return result;
  }
  if (!c->in->runtime_admit)
    return CTRAIN_OK;
  *done = 1;
  const cJSON *s = c->in->runtime_admit;
  if (!ctrain_json_put(c->status, "runtime", cJSON_Duplicate(s, 1)))
    return CTRAIN_E_NOMEM;
  const char *kind = ctrain_json_str(s, "kind"), *name = ctrain_json_str(s, "name");
  if (recon_cond_true(c->old_status, C_BLOCKED))
    result =
        recon_cond_set(c, C_BLOCKED, 0, R_RUNTIME_RECORDED, "the job's runtime was found", NULL);
  if (!result)
    result = recon_event(
        c, "Normal", R_RUNTIME_RECORDED, -1,
        "%s %s (generation %lld, resourceVersion %s) recorded in status.runtime: "
        "every attempt of this job uses it as it is now",
        kind ? kind : "?", name ? name : "?", (long long)ctrain_json_int(s, "generation", 0),
        ctrain_json_str(s, "resourceVersion") ? ctrain_json_str(s, "resourceVersion") : "?");
  return result;
}

void recon_runtime_note(const recon_ctx *c, char *buf, size_t len) {
  const cJSON *s = ctrain_json_get(c->old_status, "runtime");
  const char *kind = ctrain_json_str(s, "kind"), *name = ctrain_json_str(s, "name");
  if (!kind || !name) {
    if (len)
      buf[0] = '\0';
    return;
  }
  snprintf(buf, len, " (the job merged over %s %s, generation %lld)", kind, name,
           (long long)ctrain_json_int(s, "generation", 0));
}
