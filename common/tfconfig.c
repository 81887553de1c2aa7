/* tfconfig.c - TF_CONFIG parsing, validation, ranks and rendering.
 *
 * Messages mirror TensorFlow's multi_worker_util._validate_cluster_spec so a
 * user who knows TF recognises them; each names the offending field. */
#include "ctrain/tfconfig.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[] = {"chief", "worker", "evaluator", "ps"};

const char *tfconfig_type_name(tfconfig_task_type t) {
  if ((int)t < 0 || t > TFCONFIG_PS)
    return "unknown";
  return type_names[t];
}

static int type_from_name(const char *s) {
  for (int i = 0; i <= TFCONFIG_PS; i++)
    if (!strcmp(s, type_names[i]))
      return i;
  return -1;
}

void tfconfig_free(tfconfig *tc) {
  if (!tc)
    return;
  if (tc->addrs) {
    for (int i = 0; i < tc->world; i++)
      free(tc->addrs[i]);
    free(tc->addrs);
  }
  free(tc->self_addr);
  memset(tc, 0, sizeof(*tc));
}

static void set_local(tfconfig *tc) {
  memset(tc, 0, sizeof(*tc));
  tc->local = 1;
  tc->type = TFCONFIG_WORKER;
  tc->rank = 0;
  tc->world = 1;
  tc->is_chief = 1;
}

/* Validates one cluster entry: a non-empty list of non-empty strings. */
static ctrain_err check_list(const cJSON *list, const char *name, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int i = 0;
  const cJSON *e;
  if (!cJSON_IsArray(list))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: cluster.%s must be a list of \"host:port\" strings",
                name);
  cJSON_ArrayForEach(e, list) {
    if (!cJSON_IsString(e) || !e->valuestring[0])
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "TF_CONFIG: cluster.%s[%d] is not a non-empty \"host:port\" string", name, i);
    i++;
  }
out:
  return result;
}

ctrain_err tfconfig_parse(tfconfig *tc, const char *json, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *root = NULL;
  int counts[TFCONFIG_PS + 1] = {0};
  memset(tc, 0, sizeof(*tc));
  if (!json || !json[strspn(json, " \t\r\n")]) {
    set_local(tc);
    return CTRAIN_OK;
  }
  root = cJSON_Parse(json);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    long off = at ? (long)(at - json) : -1;
    CTRAIN_FAIL(CTRAIN_E_PARSE, "TF_CONFIG: malformed JSON near offset %ld", off);
  }
  if (!cJSON_IsObject(root))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: must be a JSON object");
  const cJSON *cluster = cJSON_GetObjectItemCaseSensitive(root, "cluster");
  const cJSON *task = cJSON_GetObjectItemCaseSensitive(root, "task");
  if (!cluster || cJSON_IsNull(cluster) ||
      (cJSON_IsObject(cluster) && cJSON_GetArraySize(cluster) == 0)) {
    /* TF treats an empty cluster as local training, whatever the task says. */
    cJSON_Delete(root);
    set_local(tc);
    return CTRAIN_OK;
  }
  if (!cJSON_IsObject(cluster))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: cluster must be an object of job name -> address list");
  const cJSON *job;
  cJSON_ArrayForEach(job, cluster) {
    int t = type_from_name(job->string);
    if (t < 0)
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "TF_CONFIG: cluster.%s: unrecognized task type '%s', valid task types are: "
                  "'chief', 'worker', 'evaluator' and 'ps'",
                  job->string, job->string);
    result = check_list(job, job->string, errbuf, errlen);
    if (result)
      goto out;
    counts[t] = cJSON_GetArraySize(job);
  }
  if (counts[TFCONFIG_CHIEF] > 1)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: cluster.chief: the `chief` job should have at most one task "
                "(got %d)",
                counts[TFCONFIG_CHIEF]);
  if (counts[TFCONFIG_EVALUATOR] > 1)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: cluster.evaluator: there must be at most one 'evaluator' job (got %d)",
                counts[TFCONFIG_EVALUATOR]);
  if (counts[TFCONFIG_PS] > 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: cluster.ps: parameter servers are not supported by "
                                 "MultiWorkerMirroredStrategy");
  if (!task || !cJSON_IsObject(task))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task: missing or not an object with \"type\" and \"index\"");
  const cJSON *jtype = cJSON_GetObjectItemCaseSensitive(task, "type");
  const cJSON *jindex = cJSON_GetObjectItemCaseSensitive(task, "index");
  if (!cJSON_IsString(jtype))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: task.type: missing or not a string");
  int t = type_from_name(jtype->valuestring);
  if (t < 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task.type: unrecognized task type '%s', valid task types are: "
                "'chief', 'worker', 'evaluator' and 'ps'",
                jtype->valuestring);
  long index = 0;
  if (!jindex) {
    index = 0; /* TF's default task id */
  } else if (cJSON_IsNumber(jindex)) {
    double d = jindex->valuedouble;
    if (!isfinite(d) || d != floor(d) || d < 0 || d > INT_MAX)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: task.index: %g is not a non-negative integer", d);
    index = (long)d;
  } else if (cJSON_IsString(jindex)) {
    char *end = NULL;
    index = strtol(jindex->valuestring, &end, 10);
    if (end == jindex->valuestring || *end || index < 0 || index > INT_MAX)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: task.index: '%s' is not a non-negative integer",
                  jindex->valuestring);
  } else {
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: task.index: not an integer");
  }
  if (counts[t] == 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: task.type: `task_type` '%s' not found in cluster",
                type_names[t]);
  if (index >= counts[t])
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task.index: the `task_id` %ld exceeds the maximum id of %s (%d)", index,
                type_names[t], counts[t] - 1);
  if (counts[TFCONFIG_CHIEF] + counts[TFCONFIG_WORKER] == 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: cluster: no chief or worker to train");

  tc->type = (tfconfig_task_type)t;
  tc->index = (int)index;
  tc->n_chief = counts[TFCONFIG_CHIEF];
  tc->n_worker = counts[TFCONFIG_WORKER];
  tc->n_evaluator = counts[TFCONFIG_EVALUATOR];
  tc->n_ps = counts[TFCONFIG_PS];
  tc->world = tc->n_chief + tc->n_worker;
  if (t == TFCONFIG_CHIEF)
    tc->rank = 0;
  else if (t == TFCONFIG_WORKER)
    tc->rank = tc->index + tc->n_chief;
  else
    tc->rank = -1;
  tc->is_chief = (t == TFCONFIG_CHIEF) || (t == TFCONFIG_WORKER && tc->n_chief == 0 && index == 0);
  tc->addrs = calloc((size_t)tc->world, sizeof(char *));
  if (!tc->addrs)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "TF_CONFIG: out of memory");
  int r = 0;
  for (int ty = TFCONFIG_CHIEF; ty <= TFCONFIG_WORKER; ty++) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(cluster, type_names[ty]);
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
      tc->addrs[r] = strdup(e->valuestring);
      if (!tc->addrs[r])
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "TF_CONFIG: out of memory");
      r++;
    }
  }
  const cJSON *self =
      cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cluster, type_names[t]), (int)index);
  tc->self_addr = strdup(self->valuestring);
  if (!tc->self_addr)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "TF_CONFIG: out of memory");
out:
  cJSON_Delete(root);
  if (result)
    tfconfig_free(tc);
  return result;
}

ctrain_err tfconfig_from_env(tfconfig *tc, char *errbuf, size_t errlen) {
  return tfconfig_parse(tc, getenv("TF_CONFIG"), errbuf, errlen);
}

ctrain_err tfconfig_render(const tfconfig_render_args *a, char **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *root = NULL;
  char *text = NULL;
  tfconfig check;
  *out = NULL;
  memset(&check, 0, sizeof(check));
  if (!a->job || !a->job[0] || !a->ns || !a->ns[0])
    CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render: job and namespace are required");
  if (a->port < 1 || a->port > 65535)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render: port %d is not in 1..65535", a->port);
  if (a->n_chief < 0 || a->n_chief > 1 || a->n_evaluator < 0 || a->n_evaluator > 1 ||
      a->n_worker < 0 || a->n_chief + a->n_worker < 1)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render: replica counts chief=%d worker=%d evaluator=%d",
                a->n_chief, a->n_worker, a->n_evaluator);
  root = cJSON_CreateObject();
  cJSON *cluster = cJSON_AddObjectToObject(root, "cluster");
  if (!cluster)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
  const int counts[3] = {a->n_chief, a->n_worker, a->n_evaluator};
  for (int ty = 0; ty < 3; ty++) {
    if (!counts[ty])
      continue;
    cJSON *list = cJSON_AddArrayToObject(cluster, type_names[ty]);
    if (!list)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
    for (int i = 0; i < counts[ty]; i++) {
      char addr[512];
      int n = snprintf(addr, sizeof(addr), "%s-%s-%d.%s.%s.svc:%d", a->job, type_names[ty], i,
                       a->job, a->ns, a->port);
      if (n < 0 || (size_t)n >= sizeof(addr))
        CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render: job or namespace name too long");
      cJSON *s = cJSON_CreateString(addr);
      if (!s || !cJSON_AddItemToArray(list, s)) {
        cJSON_Delete(s);
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
      }
    }
  }
  cJSON *task = cJSON_AddObjectToObject(root, "task");
  if (!task || !cJSON_AddStringToObject(task, "type", tfconfig_type_name(a->type)) ||
      !cJSON_AddNumberToObject(task, "index", a->index) ||
      !cJSON_AddStringToObject(root, "environment", "cloud"))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
  text = cJSON_PrintUnformatted(root);
  if (!text)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
  /* What we render must be what we (and TF) accept. */
  result = tfconfig_parse(&check, text, errbuf, errlen);
  if (result)
    goto out;
  *out = text;
  text = NULL;
out:
  tfconfig_free(&check);
  cJSON_free(text);
  cJSON_Delete(root);
  return result;
}
