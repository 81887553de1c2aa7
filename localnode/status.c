/* status.c - pod phase, conditions and status JSON (see ctrain/lnode_status.h). */
#include "ctrain/lnode_status.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "ctrain/lnode_util.h"

int lnode_exit_code(int ws, int *signal) {
  *signal = 0;
  if (WIFEXITED(ws))
    return WEXITSTATUS(ws);
  if (WIFSIGNALED(ws)) {
    *signal = WTERMSIG(ws);
    return 128 + WTERMSIG(ws);
  }
  return 128;
}

const char *lnode_term_reason(int exit_code) {
  return exit_code == 0 ? "Completed" : "Error";
}

const char *lnode_status_phase(const lnode_cstatus *cs, size_t n, const char *rp) {
  size_t pending = 0, running = 0, restarting = 0, ok = 0, failed = 0;
  int never = rp && !strcmp(rp, "Never");
  int onfailure = rp && !strcmp(rp, "OnFailure");
  for (size_t i = 0; i < n; i++) {
    switch (cs[i].kind) {
    case LNODE_C_WAITING:
      if (cs[i].has_last)
        restarting++;
      else
        pending++;
      break;
    case LNODE_C_RUNNING:
      running++;
      break;
    case LNODE_C_TERMINATED:
      if (cs[i].term.exit_code == 0)
        ok++;
      else
        failed++;
      break;
    }
  }
  if (n == 0)
    return "Pending";
  if (pending > 0 && running == 0 && restarting == 0 && ok == 0 && failed == 0)
    return "Pending";
  if (pending > 0)
    return running + restarting > 0 ? "Running" : "Pending";
  if (running > 0 || restarting > 0)
    return "Running";
  /* Everything terminated. */
  if (never)
    return failed ? "Failed" : "Succeeded";
  if (onfailure)
    return failed ? "Running" : "Succeeded";
  return "Running";
}

static void set_cond(lnode_cond *c, int status, const char *reason, time_t now) {
  if (c->status != status)
    c->ltt = now;
  c->status = status;
  snprintf(c->reason, sizeof(c->reason), "%s", reason ? reason : "");
}

void lnode_status_conditions(lnode_pstatus *ps, const lnode_cstatus *cs, size_t n,
                             const char *phase, time_t now) {
  int all_running = n > 0;
  for (size_t i = 0; i < n; i++)
    if (cs[i].kind != LNODE_C_RUNNING)
      all_running = 0;
  int done = !strcmp(phase, "Succeeded") || !strcmp(phase, "Failed") || ps->reason[0];
  set_cond(&ps->conds[LNODE_COND_SCHEDULED], 1, NULL, now);
  set_cond(&ps->conds[LNODE_COND_INITIALIZED], 1, NULL, now);
  const char *why = done ? "PodCompleted" : (all_running ? NULL : "ContainersNotReady");
  set_cond(&ps->conds[LNODE_COND_CONTAINERS_READY], all_running && !done, why, now);
  set_cond(&ps->conds[LNODE_COND_READY], all_running && !done, why, now);
}

static void add_time(cJSON *o, const char *key, time_t t) {
  char buf[32];
  if (!t)
    return;
  lnode_time_rfc3339(t, buf, sizeof(buf));
  cJSON_AddStringToObject(o, key, buf);
}

static cJSON *term_json(const lnode_term *t, long pid) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "exitCode", t->exit_code);
  if (t->signal)
    cJSON_AddNumberToObject(o, "signal", t->signal);
  if (t->reason[0])
    cJSON_AddStringToObject(o, "reason", t->reason);
  if (t->message[0])
    cJSON_AddStringToObject(o, "message", t->message);
  add_time(o, "startedAt", t->started_at);
  add_time(o, "finishedAt", t->finished_at);
  if (pid > 0) {
    char id[64];
    snprintf(id, sizeof(id), "localnode://%ld", pid);
    cJSON_AddStringToObject(o, "containerID", id);
  }
  return o;
}

static const char *cond_names[LNODE_COND_N] = {"PodScheduled", "Initialized", "ContainersReady",
                                               "Ready"};

cJSON *lnode_status_json(const lnode_pstatus *ps, const lnode_cstatus *cs, size_t n,
                         const char *phase) {
  cJSON *st = cJSON_CreateObject();
  if (!st)
    return NULL;
  cJSON_AddStringToObject(st, "phase", ps->reason[0] ? "Failed" : phase);
  if (ps->reason[0]) {
    cJSON_AddStringToObject(st, "reason", ps->reason);
    cJSON_AddStringToObject(st, "message", ps->message);
  }
  cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
  for (int i = 0; i < LNODE_COND_N; i++) {
    const lnode_cond *c = &ps->conds[i];
    if (c->status < 0)
      continue;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", cond_names[i]);
    cJSON_AddStringToObject(o, "status", c->status ? "True" : "False");
    cJSON_AddNullToObject(o, "lastProbeTime");
    add_time(o, "lastTransitionTime", c->ltt);
    if (c->reason[0])
      cJSON_AddStringToObject(o, "reason", c->reason);
    cJSON_AddItemToArray(conds, o);
  }
  if (ps->host_ip[0]) {
    cJSON_AddStringToObject(st, "hostIP", ps->host_ip);
    cJSON *a = cJSON_AddArrayToObject(st, "hostIPs");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "ip", ps->host_ip);
    cJSON_AddItemToArray(a, o);
  }
  if (ps->pod_ip[0]) {
    cJSON_AddStringToObject(st, "podIP", ps->pod_ip);
    cJSON *a = cJSON_AddArrayToObject(st, "podIPs");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "ip", ps->pod_ip);
    cJSON_AddItemToArray(a, o);
  }
  add_time(st, "startTime", ps->start_time);
  cJSON *arr = cJSON_AddArrayToObject(st, "containerStatuses");
  for (size_t i = 0; i < n; i++) {
    const lnode_cstatus *c = &cs[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON *state = cJSON_AddObjectToObject(o, "state");
    if (c->kind == LNODE_C_RUNNING) {
      cJSON *r = cJSON_AddObjectToObject(state, "running");
      add_time(r, "startedAt", c->started_at);
    } else if (c->kind == LNODE_C_TERMINATED) {
      cJSON_AddItemToObject(state, "terminated", term_json(&c->term, c->pid));
    } else {
      cJSON *w = cJSON_AddObjectToObject(state, "waiting");
      cJSON_AddStringToObject(w, "reason",
                              c->waiting_reason[0] ? c->waiting_reason : "ContainerCreating");
      if (c->waiting_message[0])
        cJSON_AddStringToObject(w, "message", c->waiting_message);
    }
    cJSON *last = cJSON_AddObjectToObject(o, "lastState");
    if (c->has_last)
      cJSON_AddItemToObject(last, "terminated", term_json(&c->last, 0));
    int ready = c->kind == LNODE_C_RUNNING && !ps->reason[0];
    cJSON_AddBoolToObject(o, "ready", ready);
    cJSON_AddNumberToObject(o, "restartCount", c->restart_count);
    cJSON_AddStringToObject(o, "image", c->image[0] ? c->image : "localnode/none");
    cJSON_AddStringToObject(o, "imageID", "");
    if (c->pid > 0) {
      char id[64];
      snprintf(id, sizeof(id), "localnode://%ld", c->pid);
      cJSON_AddStringToObject(o, "containerID", id);
    }
    cJSON_AddBoolToObject(o, "started", c->kind == LNODE_C_RUNNING);
    cJSON_AddItemToArray(arr, o);
  }
  return st;
}
