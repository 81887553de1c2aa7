/* recon_result.c - the action list a pass returns. */
#include "controller/recon_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/buf.h"

static const char *const kind_names[] = {
    "UpdateStatus",   "CreateService",   "CreateSecret",    "DeletePod",           "CreatePod",
    "Event",          "DeleteJob",       "Requeue",         "CreateNetworkPolicy", "CreateWorkload",
    "UpdateWorkload", "RemoveFinalizer", "CreateConfigMap", "DeleteConfigMap",
};

const char *recon_action_kind_name(recon_action_kind k) {
  return (unsigned)k < sizeof(kind_names) / sizeof(kind_names[0]) ? kind_names[k] : "Unknown";
}

static char *dupstr(const char *s) {
  return s ? strdup(s) : NULL;
}

static void action_free(recon_action *a) {
  cJSON_Delete(a->object);
  free(a->body);
  free(a->name);
  free(a->uid);
  free(a->message);
}

void recon_result_free(recon_result *res) {
  if (!res)
    return;
  for (size_t i = 0; i < res->n_actions; i++)
    action_free(&res->actions[i]);
  free(res->actions);
  cJSON_Delete(res->status);
  memset(res, 0, sizeof(*res));
}

int recon_push(recon_ctx *c, recon_action_kind kind, cJSON *object, const char *name,
               const char *uid) {
  recon_result *r = c->res;
  if (ctrain_grow(&r->actions, &r->cap_actions, r->n_actions + 1, sizeof(*r->actions), 16, 0)) {
    cJSON_Delete(object);
    return -1;
  }
  recon_action *a = &r->actions[r->n_actions];
  memset(a, 0, sizeof(*a));
  a->kind = kind;
  a->object = object;
  a->after = -1;
  a->name = dupstr(name);
  a->uid = dupstr(uid);
  r->n_actions++;
  if ((name && !a->name) || (uid && !a->uid))
    return -1;
  return (int)(r->n_actions - 1);
}

ctrain_err recon_event(recon_ctx *c, const char *type, const char *reason, int after,
                       const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char *api, *kind;
  podbuild_job_kind(c->job, &api, &kind);
  cJSON *io = cJSON_CreateObject();
  if (!io || !cJSON_AddStringToObject(io, "apiVersion", api) ||
      !cJSON_AddStringToObject(io, "kind", kind) || !cJSON_AddStringToObject(io, "name", c->name) ||
      !cJSON_AddStringToObject(io, "namespace", c->ns) ||
      !cJSON_AddStringToObject(io, "uid", c->uid)) {
    cJSON_Delete(io);
    return CTRAIN_E_NOMEM;
  }
  int i = recon_push(c, RECON_EVENT, io, NULL, NULL);
  if (i < 0)
    return CTRAIN_E_NOMEM;
  recon_action *a = &c->res->actions[i];
  a->event_type = type;
  a->reason = reason;
  a->after = after;
  a->message = strdup(msg);
  return a->message ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

ctrain_err recon_delete_pod(recon_ctx *c, const obs_pod *p) {
  if (p->deleting || !p->uid || recon_exp_pending_delete(c->x, p->uid))
    return CTRAIN_OK;
  if (recon_push(c, RECON_DELETE_POD, NULL, p->name, p->uid) < 0)
    return CTRAIN_E_NOMEM;
  return recon_exp_add(c->x, 1, p->name, p->uid, p->attempt, c->in->now);
}

ctrain_err recon_force_delete_pod(recon_ctx *c, const obs_pod *p) {
  if (p->grace0 || !p->uid)
    return CTRAIN_OK;
  int i = recon_push(c, RECON_DELETE_POD, NULL, p->name, p->uid);
  if (i < 0)
    return CTRAIN_E_NOMEM;
  c->res->actions[i].force = 1;
  if (recon_exp_pending_delete(c->x, p->uid))
    return CTRAIN_OK;
  return recon_exp_add(c->x, 1, p->name, p->uid, p->attempt, c->in->now);
}

void recon_requeue_at(recon_ctx *c, int64_t when) {
  int64_t after = when - c->in->now;
  if (after < 1)
    after = 1;
  if (c->requeue < 0 || after < c->requeue)
    c->requeue = after;
}

void recon_result_keep_delete_job(recon_result *res) {
  size_t keep = 0;
  for (size_t i = 0; i < res->n_actions; i++) {
    if (res->actions[i].kind == RECON_DELETE_JOB)
      res->actions[keep++] = res->actions[i];
    else
      action_free(&res->actions[i]);
  }
  res->n_actions = keep;
}

ctrain_err recon_result_status_first(recon_ctx *c) {
  recon_result *res = c->res;
  cJSON *copy = cJSON_Duplicate(c->status, 1);
  if (!copy || recon_push(c, RECON_UPDATE_STATUS, copy, NULL, NULL) < 0)
    return CTRAIN_E_NOMEM;
  recon_action st = res->actions[res->n_actions - 1];
  memmove(res->actions + 1, res->actions, (res->n_actions - 1) * sizeof(*res->actions));
  res->actions[0] = st;
  for (size_t i = 1; i < res->n_actions; i++)
    if (res->actions[i].after >= 0)
      res->actions[i].after++;
  res->status_changed = 1;
  return CTRAIN_OK;
}
