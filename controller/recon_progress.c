/* recon_progress.c - what a pass writes about training itself:
 * status.progress (the poller's latest look at the chief's /progress),
 * the Straggler condition, and status.result (the chief's termination
 * message). Pure, as the rest of the reconciler: the poll arrives as
 * recon_input.progress / .straggler, the message in the observed pods. */
#include "controller/recon_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"

#define R_STRAGGLER "SlowWorker"
#define R_CAUGHT_UP "CaughtUp"

/* The termination message's fields and their names in status.result. */
static const struct {
  const char *from, *to;
  int integer;
} result_fields[] = {
    {"accuracy", "accuracy", 0},
    {"loss", "loss", 0},
    {"val_accuracy", "valAccuracy", 0},
    {"val_loss", "valLoss", 0},
    {"samples_per_sec", "samplesPerSec", 0},
    {"epochs", "epochs", 1},
    {"steps", "steps", 1},
    {"replicas_in_sync", "replicasInSync", 1},
};

/* The pod whose termination message is the job's result: the chief, or
 * worker 0 without one (the success policy's pod), of the current attempt. */
static const obs_pod *result_pod(const recon_ctx *c) {
  int t = c->js.replicas[PODBUILD_CHIEF] ? PODBUILD_CHIEF : PODBUILD_WORKER;
  const obs_pod *p = c->js.replicas[t] ? c->slots[t][0] : NULL;
  if (!p || p->attempt != c->attempt || (p->phase != PH_SUCCEEDED && p->phase != PH_FAILED))
    return NULL;
  return p;
}

/* The first container's termination message of `pod`, or NULL. */
static const char *termination_message(const cJSON *pod) {
  const cJSON *cs;
  cJSON_ArrayForEach(cs, ctrain_json_get(ctrain_json_get(pod, "status"), "containerStatuses")) {
    const char *m =
        ctrain_json_str(ctrain_json_get(ctrain_json_get(cs, "state"), "terminated"), "message");
    if (m && *m)
      return m;
  }
  return NULL;
}

cJSON *recon_result_from_message(const char *msg, int *nomem) {
  cJSON *in = cJSON_Parse(msg), *out = NULL;
  *nomem = 0;
  if (!cJSON_IsObject(in))
    goto out;
  out = cJSON_CreateObject();
  if (!out)
    goto oom;
  const char *state = ctrain_json_str(in, "state");
  if (state && !cJSON_AddStringToObject(out, "state", state))
    goto oom;
  for (size_t i = 0; i < sizeof(result_fields) / sizeof(result_fields[0]); i++) {
    const cJSON *v = ctrain_json_get(in, result_fields[i].from);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
      continue;
    double d = result_fields[i].integer ? floor(v->valuedouble) : v->valuedouble;
    if (!cJSON_AddNumberToObject(out, result_fields[i].to, d))
      goto oom;
  }
  const char *model = ctrain_json_str(in, "model");
  if (model && *model && !cJSON_AddStringToObject(out, "model", model))
    goto oom;
  const char *err = ctrain_json_str(in, "error");
  if (err && *err) {
    char e[RECON_RESULT_ERROR_MAX + 1];
    snprintf(e, sizeof(e), "%s", err);
    if (!cJSON_AddStringToObject(out, "error", e))
      goto oom;
  }
  goto out;
oom:
  *nomem = 1;
  cJSON_Delete(out);
  out = NULL;
out:
  cJSON_Delete(in);
  return out;
}

/* `v` rounded to `digits` decimals (a column's width; -1, or a number too
 * large to have decimals left: as it is). */
static double round_to(double v, int digits) {
  if (digits < 0 || !(fabs(v) < 1e15))
    return v;
  double scale = pow(10, digits);
  return round(v * scale) / scale;
}

/* status.progress.shownAccuracy, what the Accuracy column shows: the
 * validation accuracy when the chief reports one, else the training
 * accuracy (both rounded already). */
static ctrain_err shown_accuracy(cJSON *prog) {
  const cJSON *v = ctrain_json_get(prog, "valAccuracy");
  if (!cJSON_IsNumber(v))
    v = ctrain_json_get(prog, "accuracy");
  if (!cJSON_IsNumber(v)) {
    cJSON_DeleteItemFromObjectCaseSensitive(prog, "shownAccuracy");
    return CTRAIN_OK;
  }
  return ctrain_json_put(prog, "shownAccuracy", cJSON_CreateNumber(v->valuedouble))
             ? CTRAIN_OK
             : CTRAIN_E_NOMEM;
}

/* The printer columns (Epoch, Accuracy, Train-Accuracy, Samples/s) read status.progress:
 * after a success they show the final numbers of `res`, polled or not, rounded as the
 * poller rounds them (controller/progress.c: 4 decimals, samples/s 1), so the Accuracy
 * column reads 0.8894, not 0.889408 (kubectl cannot format a column). `res`,
 * status.result, keeps the exact numbers. */
static ctrain_err final_columns(recon_ctx *c, const cJSON *res) {
  static const struct {
    const char *from, *to;
    int digits;
  } cols[] = {{"epochs", "epoch", -1},
              {"accuracy", "accuracy", 4},
              {"valAccuracy", "valAccuracy", 4},
              {"samplesPerSec", "samplesPerSec", 1}};
  const char *state = ctrain_json_str(res, "state");
  if (!state || strcmp(state, "Succeeded"))
    return CTRAIN_OK;
  cJSON *prog = cJSON_GetObjectItemCaseSensitive(c->status, "progress");
  if (!prog && !(prog = cJSON_AddObjectToObject(c->status, "progress")))
    return CTRAIN_E_NOMEM;
  for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++) {
    const cJSON *v = ctrain_json_get(res, cols[i].from);
    if (cJSON_IsNumber(v) &&
        !ctrain_json_put(prog, cols[i].to,
                         cJSON_CreateNumber(round_to(v->valuedouble, cols[i].digits))))
      return CTRAIN_E_NOMEM;
  }
  return shown_accuracy(prog);
}

/* Whether the poll `now` puts the chief elsewhere in the whole run than
 * `old` (status.progress) does. Its position is its global step and its
 * (epoch, step), judged together: with one step per epoch (a small or
 * fine-tuning data set) every poll may land on step 1 of a later epoch.
 * A part that one of the two lacks is not compared (a CRD that prunes
 * globalStep, a chief that reports no epoch); a poll with a position
 * where the old status has none has moved. */
static int position_moved(const cJSON *old, const cJSON *now) {
  static const char *const parts[] = {"globalStep", "epoch", "step"};
  int reported = 0, compared = 0;
  for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
    const cJSON *a = ctrain_json_get(old, parts[i]), *b = ctrain_json_get(now, parts[i]);
    if (!cJSON_IsNumber(b))
      continue;
    reported = 1;
    if (!cJSON_IsNumber(a))
      continue;
    compared = 1;
    if (a->valuedouble != b->valuedouble)
      return 1;
  }
  return reported && !compared;
}

/* When the chief's position last moved, as status.progress.lastProgressTime
 * keeps it: the old value, or the latest poll's time when that poll's
 * position differs from the recorded one. "" when unknown. */
void recon_progress_moved(const recon_ctx *c, char *buf, size_t len) {
  const cJSON *old = ctrain_json_get(c->old_status, "progress"), *now = c->in->progress;
  const char *t = ctrain_json_str(old, "lastProgressTime");
  if (position_moved(old, now) && ctrain_json_str(now, "lastPollTime"))
    t = ctrain_json_str(now, "lastPollTime");
  snprintf(buf, len, "%s", t ? t : "");
}

ctrain_err recon_progress_init(recon_ctx *c) {
  const char *keep[] = {"progress", "result"};
  for (int i = 0; i < 2; i++) {
    const cJSON *v = ctrain_json_get(c->old_status, keep[i]);
    if (cJSON_IsObject(v) && !ctrain_json_put(c->status, keep[i], cJSON_Duplicate(v, 1)))
      return CTRAIN_E_NOMEM;
  }
  char moved[64];
  recon_progress_moved(c, moved, sizeof(moved));
  cJSON *prog = cJSON_GetObjectItemCaseSensitive(c->status, "progress");
  if (prog && *moved && !ctrain_json_put(prog, "lastProgressTime", cJSON_CreateString(moved)))
    return CTRAIN_E_NOMEM;
  const obs_pod *p = result_pod(c);
  const char *msg = p ? termination_message(p->obj) : NULL;
  if (!msg)
    return CTRAIN_OK;
  int nomem = 0;
  cJSON *res = recon_result_from_message(msg, &nomem);
  if (nomem)
    return CTRAIN_E_NOMEM;
  if (res && !ctrain_json_put(c->status, "result", res))
    return CTRAIN_E_NOMEM;
  return final_columns(c, res);
}

const char *recon_result_summary(const recon_ctx *c, char *buf, size_t len) {
  const cJSON *res = ctrain_json_get(c->status, "result");
  const cJSON *acc = ctrain_json_get(res, "accuracy"), *val = ctrain_json_get(res, "valAccuracy");
  const char *model = ctrain_json_str(res, "model");
  size_t n = 0;
  buf[0] = '\0';
  if (cJSON_IsNumber(acc))
    n += (size_t)snprintf(buf + n, len - n, ", accuracy %.3g", acc->valuedouble);
  if (n < len && cJSON_IsNumber(acc) && cJSON_IsNumber(val))
    n += (size_t)snprintf(buf + n, len - n, " (val %.3g)", val->valuedouble);
  if (n < len && model)
    snprintf(buf + n, len - n, ", model %s", model);
  return buf;
}

/* The pod of collective rank `rank` (chief 0, worker i -> i+1 with a chief). */
static const obs_pod *rank_pod(const recon_ctx *c, int rank) {
  int chief = c->js.replicas[PODBUILD_CHIEF] > 0;
  if (rank < 0)
    return NULL;
  if (chief && rank == 0)
    return c->slots[PODBUILD_CHIEF][0];
  int w = rank - chief;
  return w < c->js.replicas[PODBUILD_WORKER] ? c->slots[PODBUILD_WORKER][w] : NULL;
}

/* Whether two progress objects differ in more than lastPollTime. */
static int progress_differs(const cJSON *a, const cJSON *b) {
  if (!a || !b)
    return a != b;
  cJSON *x = cJSON_Duplicate(a, 1), *y = cJSON_Duplicate(b, 1);
  int differs = 1;
  if (x && y) {
    cJSON_DeleteItemFromObjectCaseSensitive(x, "lastPollTime");
    cJSON_DeleteItemFromObjectCaseSensitive(y, "lastPollTime");
    differs = !cJSON_Compare(x, y, 1);
  }
  cJSON_Delete(x);
  cJSON_Delete(y);
  return differs;
}

/* in->progress with slowestWorker {rank, ratio} made {pod, ratio}. */
static ctrain_err put_progress(recon_ctx *c) {
  cJSON *p = cJSON_Duplicate(c->in->progress, 1);
  if (!p)
    return CTRAIN_E_NOMEM;
  char moved[64];
  recon_progress_moved(c, moved, sizeof(moved));
  if (*moved && !ctrain_json_put(p, "lastProgressTime", cJSON_CreateString(moved))) {
    cJSON_Delete(p);
    return CTRAIN_E_NOMEM;
  }
  cJSON *sw = cJSON_GetObjectItemCaseSensitive(p, "slowestWorker");
  if (sw) {
    const obs_pod *pod = rank_pod(c, (int)ctrain_json_int(sw, "rank", -1));
    cJSON_DeleteItemFromObjectCaseSensitive(sw, "rank");
    if (!pod || !ctrain_json_get(sw, "ratio"))
      cJSON_DeleteItemFromObjectCaseSensitive(p, "slowestWorker");
    else if (!ctrain_json_put(sw, "pod", cJSON_CreateString(pod->name))) {
      cJSON_Delete(p);
      return CTRAIN_E_NOMEM;
    }
  }
  if (shown_accuracy(p)) {
    cJSON_Delete(p);
    return CTRAIN_E_NOMEM;
  }
  if (!progress_differs(ctrain_json_get(c->old_status, "progress"), p)) {
    cJSON_Delete(p);
    return CTRAIN_OK;
  }
  return ctrain_json_put(c->status, "progress", p) ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

/* Keeps the Straggler condition first in the list: the State column and
 * recon_state read the last one, which stays the job's phase. */
static void straggler_first(recon_ctx *c) {
  cJSON *conds = cJSON_GetObjectItemCaseSensitive(c->status, "conditions");
  cJSON *s = recon_cond_find(c->status, C_STRAGGLER);
  if (s && conds && conds->child != s) {
    cJSON_DetachItemViaPointer(conds, s);
    cJSON_InsertItemInArray(conds, 0, s);
  }
}

/* The Straggler condition from in->straggler: True (and a Warning event)
 * naming the pod and node; False (and a Normal event) once it caught up or
 * the job stopped running. */
static ctrain_err apply_straggler(recon_ctx *c, int running) {
  const recon_straggler *s = &c->in->straggler;
  const obs_pod *p = running && s->known ? rank_pod(c, s->rank) : NULL;
  int changed = 0;
  ctrain_err result = CTRAIN_OK;
  char msg[512];
  if (p) {
    const char *node = ctrain_json_str(ctrain_json_get(p->obj, "spec"), "nodeName");
    snprintf(msg, sizeof(msg), "worker %s on node %s computes %.1fx the median step time", p->name,
             node ? node : "(unscheduled)", s->ratio);
    result = recon_cond_set(c, C_STRAGGLER, 1, R_STRAGGLER, msg, &changed);
    if (!result && changed)
      result = recon_event(c, "Warning", "Straggler", -1, "%s", msg);
  } else if ((s->known || !running) && recon_cond_true(c->status, C_STRAGGLER)) {
    snprintf(msg, sizeof(msg), "%s",
             running ? "every worker computes within the threshold of the median step time"
                     : "the job is not running");
    result = recon_cond_set(c, C_STRAGGLER, 0, R_CAUGHT_UP, msg, &changed);
    if (!result && changed && running)
      result = recon_event(c, "Normal", "StragglerRecovered", -1, "%s", msg);
  }
  straggler_first(c);
  return result;
}

ctrain_err recon_progress_apply(recon_ctx *c) {
  int running = recon_cond_true(c->status, C_RUNNING) && !recon_cond_true(c->status, C_SUCCEEDED) &&
                !recon_cond_true(c->status, C_FAILED);
  ctrain_err result = CTRAIN_OK;
  if (running && c->in->progress)
    result = put_progress(c);
  if (!result)
    result = apply_straggler(c, running);
  return result;
}
