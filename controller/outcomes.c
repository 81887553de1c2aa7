/* outcomes.c - job outcome counters by kind and namespace; see
 * controller/outcomes.h. */
#include "controller/outcomes.h"

#include <stdlib.h>
#include <string.h>

#include "ctrain/json.h"
#include "ctrain/thread.h"

static const struct {
  const char *name, *help;
} series[CTL_OUTCOME_N] = {
    {"ctrain_jobs_created_total", "Jobs the controller started (their Created condition)."},
    {"ctrain_jobs_successful_total", "Jobs that Succeeded."},
    {"ctrain_jobs_failed_total", "Jobs that Failed."},
    {"ctrain_jobs_restarted_total",
     "Gang restarts of jobs decided (after failures and disruptions alike)."},
};

void ctl_outcomes_init(ctl_outcomes *o) {
  memset(o, 0, sizeof(*o));
  pthread_mutex_init(&o->mu, NULL);
}

void ctl_outcomes_destroy(ctl_outcomes *o) {
  for (size_t i = 0; i < o->len; i++) {
    free(o->rows[i].kind);
    free(o->rows[i].ns);
  }
  free(o->rows);
  pthread_mutex_destroy(&o->mu);
}

static int row_cmp(const ctl_outcome_row *r, const char *kind, const char *ns) {
  int c = strcmp(r->kind, kind);
  return c ? c : strcmp(r->ns, ns);
}

/* The row of (kind, ns), inserted in order when absent; NULL when out of
 * memory. Called with mu held. */
static ctl_outcome_row *row_of(ctl_outcomes *o, const char *kind, const char *ns) {
  size_t i = 0;
  while (i < o->len && row_cmp(&o->rows[i], kind, ns) < 0)
    i++;
  if (i < o->len && !row_cmp(&o->rows[i], kind, ns))
    return &o->rows[i];
  if (o->len == o->cap) {
    size_t cap = o->cap ? 2 * o->cap : 8;
    ctl_outcome_row *rows = realloc(o->rows, cap * sizeof(*rows));
    if (!rows)
      return NULL;
    o->rows = rows;
    o->cap = cap;
  }
  ctl_outcome_row r = {.kind = strdup(kind), .ns = strdup(ns)};
  if (!r.kind || !r.ns) {
    free(r.kind);
    free(r.ns);
    return NULL;
  }
  memmove(&o->rows[i + 1], &o->rows[i], (o->len - i) * sizeof(*o->rows));
  o->rows[i] = r;
  o->len++;
  return &o->rows[i];
}

/* (kind, ns)'s row, or the kind's "_other" row once CTL_OUTCOMES_MAX rows
 * exist. Called with mu held. */
static ctl_outcome_row *row_capped(ctl_outcomes *o, const char *kind, const char *ns) {
  for (size_t i = 0; i < o->len; i++)
    if (!row_cmp(&o->rows[i], kind, ns))
      return &o->rows[i];
  return row_of(o, kind, o->len < CTL_OUTCOMES_MAX ? ns : CTL_OUTCOMES_OTHER);
}

ctrain_err ctl_outcomes_add(ctl_outcomes *o, const char *kind, const char *ns, ctl_outcome which,
                            long n) {
  if ((unsigned)which >= CTL_OUTCOME_N || n <= 0)
    return CTRAIN_OK;
  ctrain_mutex_lock(&o->mu);
  ctl_outcome_row *r = row_capped(o, kind ? kind : "", ns ? ns : "");
  if (r)
    r->n[which] += n;
  ctrain_mutex_unlock(&o->mu);
  return r ? CTRAIN_OK : CTRAIN_E_NOMEM;
}

/* Whether `status` has a condition `type` with status "True". */
static int cond_true(const cJSON *status, const char *type) {
  const cJSON *c;
  cJSON_ArrayForEach(c, ctrain_json_get(status, "conditions")) {
    const char *t = ctrain_json_str(c, "type"), *s = ctrain_json_str(c, "status");
    if (t && s && !strcmp(t, type) && !strcmp(s, "True"))
      return 1;
  }
  return 0;
}

ctrain_err ctl_outcomes_observe(ctl_outcomes *o, const char *kind, const char *ns,
                                const cJSON *before, const cJSON *after) {
  static const char *const conds[] = {"Created", "Succeeded", "Failed"};
  static const ctl_outcome which[] = {CTL_OUTCOME_CREATED, CTL_OUTCOME_SUCCESSFUL,
                                      CTL_OUTCOME_FAILED};
  ctrain_err result = CTRAIN_OK;
  for (size_t i = 0; !result && i < 3; i++)
    if (cond_true(after, conds[i]) && !cond_true(before, conds[i]))
      result = ctl_outcomes_add(o, kind, ns, which[i], 1);
  return result;
}

ctrain_err ctl_outcomes_render(ctl_outcomes *o, ctrain_buf *out) {
  ctrain_err result = CTRAIN_OK;
  ctrain_mutex_lock(&o->mu);
  for (int s = 0; !result && s < CTL_OUTCOME_N; s++) {
    result = ctrain_buf_printf(out, "# HELP %s %s\n# TYPE %s counter\n", series[s].name,
                               series[s].help, series[s].name);
    for (size_t i = 0; !result && i < o->len; i++)
      result = ctrain_buf_printf(out, "%s{kind=\"%s\",namespace=\"%s\"} %ld\n", series[s].name,
                                 o->rows[i].kind, o->rows[i].ns, o->rows[i].n[s]);
  }
  ctrain_mutex_unlock(&o->mu);
  return result;
}
