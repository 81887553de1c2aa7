/* tfconfig.c - TF_CONFIG parsing, validation, ranks and rendering.
 *
 * Messages mirror TensorFlow's multi_worker_util._validate_cluster_spec so a
 * user who knows TF recognises them; each names the offending field. */
#include "ctrain/tfconfig.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"

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

/* A host name character: letters, digits, '.', '-' and '_' (seen in
 * Kubernetes and SRV names). Everything else never resolves. */
static int host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

/* The n bytes at h (inside addr's brackets, 0 < n <= TFCONFIG_HOST_MAX) are
 * an IPv6 address with an optional %zone. */
static ctrain_err check_v6(const char *addr, const char *h, size_t n, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char v6[TFCONFIG_HOST_MAX + 1];
  unsigned char bin[16];
  memcpy(v6, h, n);
  v6[n] = 0;
  char *zone = strchr(v6, '%');
  if (zone) {
    *zone++ = 0;
    if (!zone[0])
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': empty IPv6 zone after '%%'", addr);
    for (const char *z = zone; *z; z++)
      if (!host_char(*z))
        CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': bad character in IPv6 zone", addr);
  }
  if (inet_pton(AF_INET6, v6, bin) != 1)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': '%s' in brackets is not an IPv6 address", addr, v6);
out:
  return result;
}

ctrain_err tfconfig_split_hostport(const char *addr, char *host, size_t hlen, char *port,
                                   size_t plen, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const char *h = NULL, *p = NULL;
  size_t n = 0, alen = 0, pn = 0;
  long v = 0;
  if (hlen)
    host[0] = 0;
  if (plen)
    port[0] = 0;
  if (!addr || !addr[0])
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '' is empty, expected \"host:port\"");
  alen = strnlen(addr, TFCONFIG_ADDR_MAX + 1);
  if (alen > TFCONFIG_ADDR_MAX)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%.32s...' is longer than %d bytes", addr,
                TFCONFIG_ADDR_MAX);
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (!close)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': '[' without ']'", addr);
    if (close[1] != ':')
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': expected ':port' after ']'", addr);
    h = addr + 1;
    n = (size_t)(close - h);
    p = close + 2;
  } else {
    const char *colon = strchr(addr, ':');
    if (!colon)
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s' is not \"host:port\" (no ':')", addr);
    if (strchr(colon + 1, ':'))
      CTRAIN_FAIL(CTRAIN_E_CONFIG,
                  "address '%s': more than one ':' (write an IPv6 address as [v6]:port)", addr);
    h = addr;
    n = (size_t)(colon - addr);
    p = colon + 1;
  }
  if (n == 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': empty host", addr);
  if (n > TFCONFIG_HOST_MAX)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%.32s...': host longer than %d bytes", addr,
                TFCONFIG_HOST_MAX);
  if (addr[0] == '[') {
    if ((result = check_v6(addr, h, n, errbuf, errlen)))
      goto out;
  } else {
    for (size_t i = 0; i < n; i++)
      if (!host_char(h[i]))
        CTRAIN_FAIL(CTRAIN_E_CONFIG,
                    "address '%s': bad character 0x%02x in host (letters, digits, '.', '-', '_')",
                    addr, (unsigned char)h[i]);
  }
  if (n >= hlen)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': host longer than %zu bytes", addr,
                hlen ? hlen - 1 : 0);
  pn = strlen(p);
  if (pn == 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': empty port", addr);
  for (size_t i = 0; i < pn; i++)
    if (p[i] < '0' || p[i] > '9')
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': port '%s' is not a decimal number", addr, p);
  if (pn > TFCONFIG_PORT_MAX)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': port '%s' is not in 1..65535", addr, p);
  for (size_t i = 0; i < pn; i++)
    v = v * 10 + (p[i] - '0');
  if (v < 1 || v > 65535)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': port %ld is not in 1..65535", addr, v);
  if (pn >= plen)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "address '%s': port longer than %zu bytes", addr,
                plen ? plen - 1 : 0);
  memcpy(host, h, n);
  host[n] = 0;
  memcpy(port, p, pn + 1);
out:
  return result;
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

/* Every address of the cluster, own and peers, through the one host:port
 * parser: a bad one is a config error now, naming the task, rather than a
 * failed listen (which looks retryable) or a wrapped port later. */
static ctrain_err check_addresses(const cJSON *const *lists, int self_type, int self_index,
                                  char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char host[TFCONFIG_HOST_MAX + 1], port[TFCONFIG_PORT_MAX + 1], why[512];
  for (int ty = 0; ty <= TFCONFIG_PS; ty++) {
    const cJSON *e;
    int i = 0;
    cJSON_ArrayForEach(e, lists[ty]) {
      if (tfconfig_split_hostport(e->valuestring, host, sizeof(host), port, sizeof(port), why,
                                  sizeof(why)))
        CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: cluster.%s[%d] (%s %d%s): %s", type_names[ty], i,
                    type_names[ty], i,
                    ty == self_type && i == self_index ? ", this task's own address" : "", why);
      i++;
    }
  }
out:
  return result;
}

/* The cluster object (non-empty): counts[t] tasks of each type, lists[t]
 * the member each count came from; each list checked, and the counts
 * TF's strategy accepts. */
static ctrain_err parse_cluster(const cJSON *cluster, int *counts, const cJSON **lists,
                                char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
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
    lists[t] = job;
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
out:
  return result;
}

/* task.index (jindex, NULL when absent): a non-negative integer, as a
 * number or a string. */
static ctrain_err parse_task_index(const cJSON *jindex, long *out_index, char *errbuf,
                                   size_t errlen) {
  ctrain_err result = CTRAIN_OK;
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
  *out_index = index;
out:
  return result;
}

/* The task object: its *type and *index. */
static ctrain_err parse_task(const cJSON *task, int *type, long *index, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (!task || !cJSON_IsObject(task))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task: missing or not an object with \"type\" and \"index\"");
  const cJSON *jtype = ctrain_json_get(task, "type");
  const cJSON *jindex = ctrain_json_get(task, "index");
  if (!cJSON_IsString(jtype))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: task.type: missing or not a string");
  int t = type_from_name(jtype->valuestring);
  if (t < 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task.type: unrecognized task type '%s', valid task types are: "
                "'chief', 'worker', 'evaluator' and 'ps'",
                jtype->valuestring);
  *type = t;
  result = parse_task_index(jindex, index, errbuf, errlen);
out:
  return result;
}

/* Task t, index of the cluster exists, the cluster has someone to train,
 * and every address parses. */
static ctrain_err check_task(const int *counts, const cJSON *const *lists, int t, long index,
                             char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (counts[t] == 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: task.type: `task_type` '%s' not found in cluster",
                type_names[t]);
  if (index >= counts[t])
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "TF_CONFIG: task.index: the `task_id` %ld exceeds the maximum id of %s (%d)", index,
                type_names[t], counts[t] - 1);
  if (counts[TFCONFIG_CHIEF] + counts[TFCONFIG_WORKER] == 0)
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "TF_CONFIG: cluster: no chief or worker to train");
  result = check_addresses(lists, t, (int)index, errbuf, errlen);
out:
  return result;
}

/* Fills tc for task t, index of the checked cluster: the counts, the rank,
 * the addresses (chiefs then workers) and the task's own. On an error what
 * was allocated stays in tc for tfconfig_free. */
static ctrain_err fill_config(tfconfig *tc, const int *counts, const cJSON *const *lists, int t,
                              long index, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
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
    const cJSON *e;
    cJSON_ArrayForEach(e, lists[ty]) {
      tc->addrs[r] = strdup(e->valuestring);
      if (!tc->addrs[r])
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "TF_CONFIG: out of memory");
      r++;
    }
  }
  const cJSON *self = cJSON_GetArrayItem(lists[t], (int)index);
  tc->self_addr = strdup(self->valuestring);
  if (!tc->self_addr)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "TF_CONFIG: out of memory");
out:
  return result;
}

ctrain_err tfconfig_parse(tfconfig *tc, const char *json, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *root = NULL;
  int counts[TFCONFIG_PS + 1] = {0};
  const cJSON *lists[TFCONFIG_PS + 1] = {NULL}; /* the member each count came from */
  int t = 0;
  long index = 0;
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
  /* Before any lookup: with a repeated key, a lookup and a walk over the
   * members would see different lists (counts from one, addresses from
   * the other). */
  result = ctrain_json_unique_keys(root, "TF_CONFIG", errbuf, errlen);
  if (result)
    goto out;
  const cJSON *cluster = ctrain_json_get(root, "cluster");
  const cJSON *task = ctrain_json_get(root, "task");
  if (!cluster || cJSON_IsNull(cluster) ||
      (cJSON_IsObject(cluster) && cJSON_GetArraySize(cluster) == 0)) {
    /* TF treats an empty cluster as local training, whatever the task says. */
    cJSON_Delete(root);
    set_local(tc);
    return CTRAIN_OK;
  }
  result = parse_cluster(cluster, counts, lists, errbuf, errlen);
  if (result)
    goto out;
  result = parse_task(task, &t, &index, errbuf, errlen);
  if (result)
    goto out;
  result = check_task(counts, lists, t, index, errbuf, errlen);
  if (result)
    goto out;
  result = fill_config(tc, counts, lists, t, index, errbuf, errlen);
out:
  cJSON_Delete(root);
  if (result)
    tfconfig_free(tc);
  return result;
}

ctrain_err tfconfig_from_env(tfconfig *tc, char *errbuf, size_t errlen) {
  return tfconfig_parse(tc, getenv("TF_CONFIG"), errbuf, errlen);
}

/* The arguments every renderer checks. */
static ctrain_err check_render_args(const tfconfig_render_args *a, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (!a->job || !a->job[0] || !a->ns || !a->ns[0])
    CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render: job and namespace are required");
  if (a->port < 1 || a->port > 65535)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render: port %d is not in 1..65535", a->port);
  if (a->n_chief < 0 || a->n_chief > 1 || a->n_evaluator < 0 || a->n_evaluator > 1 ||
      a->n_worker < 0 || a->n_chief + a->n_worker < 1)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render: replica counts chief=%d worker=%d evaluator=%d",
                a->n_chief, a->n_worker, a->n_evaluator);
out:
  return result;
}

/* Decimal digits of v >= 0. */
static size_t digits(long v) {
  size_t n = 1;
  while (v >= 10) {
    v /= 10;
    n++;
  }
  return n;
}

ctrain_err tfconfig_cluster_size(const tfconfig_render_args *a, size_t *out) {
  *out = 0;
  ctrain_err result = check_render_args(a, NULL, 0);
  if (result)
    return result;
  /* Each address: "<job>-<type>-<i>.<job>.<ns>.svc:<port>" in quotes, a
   * comma between two; each list: "<type>":[...]; a comma between lists;
   * the braces. Exactly what render_cluster prints (cJSON unformatted). */
  const size_t fixed = 2 * strlen(a->job) + strlen(a->ns) + digits(a->port) + 4 + 5 + 2;
  const int counts[3] = {a->n_chief, a->n_worker, a->n_evaluator};
  size_t n = 2, lists = 0;
  for (int ty = 0; ty < 3; ty++) {
    if (!counts[ty])
      continue;
    const size_t tl = strlen(type_names[ty]);
    n += tl + 2 + 1 + 2 + (lists++ ? 1 : 0);
    for (int i = 0; i < counts[ty]; i++)
      n += fixed + tl + digits(i) + (i ? 1 : 0);
  }
  *out = n;
  return CTRAIN_OK;
}

/* The cluster object of `a`, checked. *out owned by the caller. */
static ctrain_err render_cluster(const tfconfig_render_args *a, cJSON **out, char *errbuf,
                                 size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *cluster = NULL;
  *out = NULL;
  result = check_render_args(a, errbuf, errlen);
  if (result)
    goto out;
  cluster = cJSON_CreateObject();
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
  *out = cluster;
  cluster = NULL;
out:
  cJSON_Delete(cluster);
  return result;
}

/* {"cluster":<cluster>,"task":{...},"environment":"cloud"} with the cluster
 * given as text (JSON, or a $(VAR) reference). */
static ctrain_err compose(const tfconfig_render_args *a, const char *cluster, char **out,
                          char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  static const char fmt[] = "{\"cluster\":%s,\"task\":{\"type\":\"%s\",\"index\":%d},"
                            "\"environment\":\"cloud\"}";
  const char *type = tfconfig_type_name(a->type);
  size_t len = strlen(cluster) + strlen(type) + sizeof(fmt) + 16;
  char *text = malloc(len);
  *out = NULL;
  if (!text)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
  snprintf(text, len, fmt, cluster, type, a->index);
  *out = text;
out:
  return result;
}

ctrain_err tfconfig_render(const tfconfig_render_args *a, char **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  cJSON *cluster = NULL;
  char *ctext = NULL, *text = NULL;
  tfconfig check;
  *out = NULL;
  memset(&check, 0, sizeof(check));
  result = render_cluster(a, &cluster, errbuf, errlen);
  if (result)
    goto out;
  ctext = cJSON_PrintUnformatted(cluster);
  if (!ctext)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
  result = compose(a, ctext, &text, errbuf, errlen);
  if (result)
    goto out;
  /* What we render must be what we (and TF) accept. */
  result = tfconfig_parse(&check, text, errbuf, errlen);
  if (result)
    goto out;
  *out = text;
  text = NULL;
out:
  tfconfig_free(&check);
  cJSON_free(ctext);
  free(text);
  cJSON_Delete(cluster);
  return result;
}

ctrain_err tfconfig_render_cluster(const tfconfig_render_args *a, char **out, char *errbuf,
                                   size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char *full = NULL, *text = NULL;
  cJSON *cluster = NULL;
  *out = NULL;
  /* Rendered whole and checked, then the cluster taken out of it: every
   * task's TF_CONFIG composed from it is then the checked one but for its
   * task, which tfconfig_render_ref's caller chose within the counts. */
  tfconfig_render_args any = *a;
  any.type = a->n_chief ? TFCONFIG_CHIEF : TFCONFIG_WORKER;
  any.index = 0;
  result = tfconfig_render(&any, &full, errbuf, errlen);
  if (result)
    goto out;
  cJSON *root = cJSON_Parse(full);
  if (!root)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
  cluster = cJSON_DetachItemFromObjectCaseSensitive(root, "cluster");
  cJSON_Delete(root);
  text = cluster ? cJSON_PrintUnformatted(cluster) : NULL;
  if (!text)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "tfconfig_render: out of memory");
  *out = text;
  text = NULL;
out:
  free(full);
  cJSON_free(text);
  cJSON_Delete(cluster);
  return result;
}

/* A Kubernetes environment variable name (what $(VAR) may reference here). */
static int env_name_ok(const char *v) {
  if (!v || !*v || (*v >= '0' && *v <= '9'))
    return 0;
  for (; *v; v++)
    if (!((*v >= 'A' && *v <= 'Z') || (*v >= 'a' && *v <= 'z') || (*v >= '0' && *v <= '9') ||
          *v == '_'))
      return 0;
  return 1;
}

ctrain_err tfconfig_render_ref(const tfconfig_render_args *a, const char *var, char **out,
                               char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char ref[128];
  *out = NULL;
  result = check_render_args(a, errbuf, errlen);
  if (result)
    goto out;
  const int counts[3] = {a->n_chief, a->n_worker, a->n_evaluator};
  if ((int)a->type < 0 || a->type > TFCONFIG_EVALUATOR || a->index < 0 ||
      a->index >= counts[a->type])
    CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render_ref: task %s %d is not in the cluster",
                tfconfig_type_name(a->type), a->index);
  if (!env_name_ok(var) || strlen(var) + 4 > sizeof(ref))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "tfconfig_render_ref: '%s' is not a variable name", var ? var : "");
  snprintf(ref, sizeof(ref), "$(%s)", var);
  result = compose(a, ref, out, errbuf, errlen);
out:
  return result;
}
