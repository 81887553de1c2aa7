/* jobkind.c - the table of job kinds and the work queue's keys; see
 * controller/jobkind.h. */
#include "controller/jobkind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controller/cachefields.h"
#include "controller/podbuild.h"
#include "controller/runtime.h"
#include "controller/tfjob.h"
#include "controller/tfjob_write.h"
#include "ctrain/json.h"

/* ---- TrainingJob: the reconciler reads the object itself ------------------- */

/* A job over a runtime (controller/runtime.h) is read merged over the
 * snapshot in its status; one without a snapshot yet is read as it is (the
 * pass records the snapshot first). */
typedef struct {
  cJSON *merged;
  char why[512];
} trainingjob_priv;

static ctrain_err trainingjob_view(const cJSON *obj, ctl_view *v) {
  runtime_ref ref;
  const cJSON *snap = runtime_snapshot_of(obj);
  *v = (ctl_view){.job = obj};
  if (!snap || !runtime_ref_of(obj, &ref))
    return CTRAIN_OK;
  trainingjob_priv *p = calloc(1, sizeof(*p));
  if (!p)
    return CTRAIN_E_NOMEM;
  ctrain_err result = runtime_apply(obj, snap, &p->merged, p->why, sizeof(p->why));
  if (result == CTRAIN_E_NOMEM) {
    free(p);
    return result;
  }
  v->priv = p;
  if (result)
    v->invalid = p->why;
  else
    v->job = p->merged;
  return CTRAIN_OK;
}

static void trainingjob_view_free(ctl_view *v) {
  trainingjob_priv *p = v->priv;
  if (p)
    cJSON_Delete(p->merged);
  free(p);
  *v = (ctl_view){0};
}

static ctrain_err trainingjob_adapt(const cJSON *obj, const ctl_view *v, recon_result *res) {
  (void)obj, (void)v, (void)res;
  return CTRAIN_OK;
}

/* ---- TFJob: controller/tfjob.h's adapter on both sides ---------------------- */

static int tfjob_enabled(const ctl_options *o) {
  return o->enable_tfjob;
}

static ctrain_err tfjob_view_of(const cJSON *obj, ctl_view *v) {
  *v = (ctl_view){0};
  tfjob_view *tf = calloc(1, sizeof(*tf));
  if (!tf)
    return CTRAIN_E_NOMEM;
  ctrain_err result = tfjob_to_job(obj, tf);
  if (result) {
    free(tf);
    return result;
  }
  *v = (ctl_view){.job = tf->job,
                  .invalid = tf->invalid[0] ? tf->invalid : NULL,
                  .foreign = tf->foreign,
                  .priv = tf};
  return CTRAIN_OK;
}

static void tfjob_view_release(ctl_view *v) {
  tfjob_view_free(v->priv);
  free(v->priv);
  *v = (ctl_view){0};
}

static ctrain_err tfjob_adapt(const cJSON *obj, const ctl_view *v, recon_result *res) {
  return tfjob_adapt_result(obj, v->priv, res);
}

/* ---- the table --------------------------------------------------------------- */

const ctl_kind ctl_kinds[CTL_NKINDS] = {
    [CTL_KIND_TRAININGJOB] = {.id = CTL_KIND_TRAININGJOB,
                              .api_version = PODBUILD_API_VERSION,
                              .kind = PODBUILD_KIND,
                              .exec = &ctl_exec_kind_trainingjob,
                              .transform = ctl_cache_job_fields,
                              .crd_hint = "",
                              .view = trainingjob_view,
                              .view_free = trainingjob_view_free,
                              .adapt = trainingjob_adapt},
    [CTL_KIND_TFJOB] = {.id = CTL_KIND_TFJOB,
                        .api_version = TFJOB_API_VERSION,
                        .kind = TFJOB_KIND,
                        .exec = &tfjob_write_exec_kind,
                        .enabled = tfjob_enabled,
                        .flag = "--enable-tfjob",
                        .crd_hint = " (is the TFJob CRD installed, manifests/components/tfjob?)",
                        .view = tfjob_view_of,
                        .view_free = tfjob_view_release,
                        .adapt = tfjob_adapt},
};

int ctl_kind_enabled(const ctl_kind *k, const ctl_options *o) {
  return !k->enabled || k->enabled(o);
}

const ctl_kind *ctl_kind_of_owner(const char *api_version, const char *kind) {
  for (int i = 0; i < CTL_NKINDS && api_version && kind; i++)
    if (!strcmp(ctl_kinds[i].api_version, api_version) && !strcmp(ctl_kinds[i].kind, kind))
      return &ctl_kinds[i];
  return NULL;
}

/* ---- keys -------------------------------------------------------------------- */

ctrain_err ctl_key_make(const ctl_kind *k, const char *ns, const char *name, ctl_key *out) {
  if (!k || !ns || !*ns || !name || !*name || strpbrk(ns, "/:") || strchr(name, '/'))
    return CTRAIN_E_INVAL;
  if (strlen(ns) >= sizeof(out->ns) || strlen(name) >= sizeof(out->name))
    return CTRAIN_E_TOOBIG;
  out->kind = k;
  memcpy(out->ns, ns, strlen(ns) + 1);
  memcpy(out->name, name, strlen(name) + 1);
  return CTRAIN_OK;
}

ctrain_err ctl_key_of(const ctl_kind *k, const cJSON *obj, ctl_key *out) {
  const cJSON *md = ctrain_json_get(obj, "metadata");
  return ctl_key_make(k, ctrain_json_str(md, "namespace"), ctrain_json_str(md, "name"), out);
}

/* TrainingJob's keys are "ns/name" (the first entry's); the others carry
 * their noun. */
static int key_tagged(const ctl_kind *k) {
  return k->id != CTL_KIND_TRAININGJOB;
}

ctrain_err ctl_key_format(const ctl_key *key, char *buf, size_t len) {
  int n = key_tagged(key->kind)
              ? snprintf(buf, len, "%s:%s/%s", key->kind->exec->noun, key->ns, key->name)
              : snprintf(buf, len, "%s/%s", key->ns, key->name);
  return n < 0 || (size_t)n >= len ? CTRAIN_E_TOOBIG : CTRAIN_OK;
}

/* The kind whose noun is s[0, n) and whose keys carry it; NULL: none. */
static const ctl_kind *kind_of_noun(const char *s, size_t n) {
  for (int i = 0; i < CTL_NKINDS; i++) {
    const char *noun = ctl_kinds[i].exec->noun;
    if (key_tagged(&ctl_kinds[i]) && strlen(noun) == n && !memcmp(noun, s, n))
      return &ctl_kinds[i];
  }
  return NULL;
}

ctrain_err ctl_key_parse(const char *s, ctl_key *out) {
  const char *slash = strchr(s, '/');
  if (!slash)
    return CTRAIN_E_INVAL;
  const ctl_kind *k = &ctl_kinds[CTL_KIND_TRAININGJOB];
  const char *colon = memchr(s, ':', (size_t)(slash - s)), *ns = s;
  if (colon) {
    k = kind_of_noun(s, (size_t)(colon - s));
    ns = colon + 1;
  }
  char nsbuf[CTL_KEY_NS_MAX];
  if (!k || (size_t)(slash - ns) >= sizeof(nsbuf))
    return CTRAIN_E_INVAL;
  memcpy(nsbuf, ns, (size_t)(slash - ns));
  nsbuf[slash - ns] = '\0';
  return ctl_key_make(k, nsbuf, slash + 1, out) ? CTRAIN_E_INVAL : CTRAIN_OK;
}
