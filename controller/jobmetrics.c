/* jobmetrics.c - per-job series on the leader's /metrics; see
 * controller/jobmetrics.h. */
#include "controller/jobmetrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/clock.h"
#include "ctrain/json.h"
#include "ctrain/thread.h"

/* The numbers of a job, each one series family. */
enum {
  V_EPOCH,
  V_GLOBAL_STEP,
  V_LOSS,
  V_ACCURACY,
  V_VAL_ACCURACY,
  V_SAMPLES,
  V_RESTARTS,
  V_DISRUPTIONS,
  V_N
};

static const struct {
  const char *name, *type, *help;
  const char *field; /* in status.progress, or in status itself (progress 0) */
  int progress;
} fams[V_N] = {
    {"ctrain_job_epoch", "gauge", "The job's epoch, as its chief reports it (status.progress).",
     "epoch", 1},
    {"ctrain_job_global_step", "gauge",
     "The job's global step, as its chief reports it (status.progress).", "globalStep", 1},
    {"ctrain_job_loss", "gauge", "The job's training loss (status.progress).", "loss", 1},
    {"ctrain_job_accuracy", "gauge", "The job's training accuracy (status.progress).", "accuracy",
     1},
    {"ctrain_job_val_accuracy", "gauge",
     "The job's validation accuracy, once its chief reported one (status.progress).", "valAccuracy",
     1},
    {"ctrain_job_samples_per_second", "gauge",
     "Samples the job trains on per second, all workers (status.progress).", "samplesPerSec", 1},
    {"ctrain_job_restarts_total", "counter",
     "The job's gang restarts after failures (status.restarts).", "restarts", 0},
    {"ctrain_job_disruptions_total", "counter",
     "The job's gang restarts after disruptions (status.disruptions).", "disruptions", 0},
};

#define PHASE_FAMILY "ctrain_job_phase"
static const char *const phases[CTL_JOBMETRICS_NPHASES] = {CTL_JOBMETRICS_PHASES};
#define PHASE_PENDING 0
#define VALUE_MAX     24 /* "%.15g" of a finite double, at most */
#define PHASE_MAX     10 /* strlen("Restarting"), the longest phase */

struct ctl_jm_entry {
  char *labels; /* namespace="…",job_name="…",kind="…", escaped; owned */
  size_t labels_len;
  char uid[CTL_JOBMETRICS_UID_MAX];      /* the incarnation shown (or deleted) */
  char dead_uid[CTL_JOBMETRICS_UID_MAX]; /* the previous one, deleted: its passes are ignored */
  double v[V_N];
  unsigned known;            /* bit i: v[i] is known */
  int phase;                 /* index in phases */
  int live;                  /* 0: deleted (a tombstone) */
  size_t at;                 /* live: its index in jm->live */
  double gone_at;            /* tombstone: ctrain_mono_s() of the delete */
  ctl_jm_entry *prev, *next; /* tombstone: the FIFO of deleted jobs */
  char key[];                /* the job key, NUL-terminated */
};

void ctl_jobmetrics_init(ctl_jobmetrics *jm) {
  memset(jm, 0, sizeof(*jm));
  pthread_mutex_init(&jm->mu, NULL);
  jm->max_jobs = CTL_JOBMETRICS_MAX_DEFAULT;
  jm->tomb_s = CTL_JOBMETRICS_TOMB_S;
}

static void entry_free(void *p) {
  ctl_jm_entry *e = p;
  if (e)
    free(e->labels);
  free(e);
}

/* Takes `e` out of the map and frees it. */
static void entry_forget(ctl_jobmetrics *jm, ctl_jm_entry *e) {
  ctrain_strmap_del(jm->by_key, e->key, NULL);
  entry_free(e);
}

/* Frees every entry and the map. Called with mu held (or from destroy). */
static void clear(ctl_jobmetrics *jm) {
  ctrain_strmap_free(jm->by_key, entry_free);
  free(jm->live);
  jm->by_key = NULL;
  jm->live = NULL;
  jm->nlive = jm->cap_live = jm->ntombs = 0;
  jm->tomb_head = jm->tomb_tail = NULL;
}

void ctl_jobmetrics_destroy(ctl_jobmetrics *jm) {
  clear(jm);
  pthread_mutex_destroy(&jm->mu);
}

void ctl_jobmetrics_set_max(ctl_jobmetrics *jm, size_t max_jobs) {
  ctrain_mutex_lock(&jm->mu);
  jm->max_jobs = max_jobs > CTL_JOBMETRICS_MAX_LIMIT ? CTL_JOBMETRICS_MAX_LIMIT : max_jobs;
  if (!jm->max_jobs)
    clear(jm);
  ctrain_mutex_unlock(&jm->mu);
}

ctrain_err ctl_jobmetrics_escape(const char *s, ctrain_buf *out) {
  ctrain_err result = CTRAIN_OK;
  const char *run = s;
  for (; !result && *s; s++) {
    const char *esc = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
    if (!esc)
      continue;
    result = ctrain_buf_append(out, run, (size_t)(s - run));
    if (!result)
      result = ctrain_buf_append(out, esc, 2);
    run = s + 1;
  }
  if (!result)
    result = ctrain_buf_append(out, run, strlen(run));
  return result;
}

/* ---- the live array and the tombstone FIFO (mu held) ------------------------ */

static void live_remove(ctl_jobmetrics *jm, ctl_jm_entry *e) {
  ctl_jm_entry *last = jm->live[--jm->nlive];
  jm->live[e->at] = last;
  last->at = e->at;
  e->live = 0;
}

static ctrain_err live_push(ctl_jobmetrics *jm, ctl_jm_entry *e) {
  ctrain_err result =
      ctrain_grow(&jm->live, &jm->cap_live, jm->nlive + 1, sizeof(*jm->live), 64, 0);
  if (result)
    return result;
  e->at = jm->nlive;
  e->live = 1;
  jm->live[jm->nlive++] = e;
  return CTRAIN_OK;
}

static void tomb_unlink(ctl_jobmetrics *jm, ctl_jm_entry *e) {
  if (e->prev)
    e->prev->next = e->next;
  else
    jm->tomb_head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    jm->tomb_tail = e->prev;
  e->prev = e->next = NULL;
  jm->ntombs--;
}

static void tomb_push(ctl_jobmetrics *jm, ctl_jm_entry *e, double now) {
  e->gone_at = now;
  e->prev = jm->tomb_tail;
  e->next = NULL;
  if (jm->tomb_tail)
    jm->tomb_tail->next = e;
  else
    jm->tomb_head = e;
  jm->tomb_tail = e;
  jm->ntombs++;
}

/* Forgets the deleted jobs kept past tomb_s, or past CTL_JOBMETRICS_TOMBS_MAX
 * (oldest first). */
static void tomb_expire(ctl_jobmetrics *jm, double now) {
  while (jm->tomb_head &&
         (jm->ntombs > CTL_JOBMETRICS_TOMBS_MAX || now - jm->tomb_head->gone_at >= jm->tomb_s)) {
    ctl_jm_entry *e = jm->tomb_head;
    tomb_unlink(jm, e);
    entry_forget(jm, e);
  }
}

/* ---- observe, drop -------------------------------------------------------------- */

/* A new entry for `key`, in the map, neither live nor deleted yet, without
 * labels; NULL when out of memory. */
static ctl_jm_entry *entry_new(ctl_jobmetrics *jm, const char *key) {
  size_t klen = strlen(key);
  ctl_jm_entry *e = calloc(1, sizeof(*e) + klen + 1);
  if (!e)
    return NULL;
  memcpy(e->key, key, klen + 1);
  if ((!jm->by_key && ctrain_strmap_new(&jm->by_key)) ||
      ctrain_strmap_put(jm->by_key, key, e, NULL)) {
    free(e);
    return NULL;
  }
  return e;
}

/* e->labels from ns, name and kind: namespace="…",job_name="…",kind="…". */
static ctrain_err set_labels(ctl_jm_entry *e, const char *ns, const char *name, const char *kind) {
  ctrain_buf b;
  size_t len = 0;
  char *labels = NULL;
  ctrain_buf_init(&b, 0);
  if (ctrain_buf_append(&b, "namespace=\"", 11) || ctl_jobmetrics_escape(ns ? ns : "", &b) ||
      ctrain_buf_append(&b, "\",job_name=\"", 12) || ctl_jobmetrics_escape(name ? name : "", &b) ||
      ctrain_buf_append(&b, "\",kind=\"", 8) || ctl_jobmetrics_escape(kind ? kind : "", &b) ||
      ctrain_buf_append(&b, "\"", 1) || !(labels = malloc(b.len + 1))) {
    ctrain_buf_free(&b);
    return CTRAIN_E_NOMEM;
  }
  /* A copy of its size: a buffer grows by 4 KiB at least. */
  len = b.len;
  memcpy(labels, b.p, len + 1);
  ctrain_buf_free(&b);
  free(e->labels);
  e->labels = labels;
  e->labels_len = len;
  return CTRAIN_OK;
}

/* The job's phase: the last True condition among the phases (Straggler,
 * Blocked and the like are not phases), else Pending. */
static int phase_of(const cJSON *status) {
  int phase = PHASE_PENDING;
  const cJSON *c;
  cJSON_ArrayForEach(c, ctrain_json_get(status, "conditions")) {
    const char *t = ctrain_json_str(c, "type"), *s = ctrain_json_str(c, "status");
    if (!t || !s || strcmp(s, "True"))
      continue;
    for (int i = PHASE_PENDING + 1; i < CTL_JOBMETRICS_NPHASES; i++)
      if (!strcmp(t, phases[i]))
        phase = i;
  }
  return phase;
}

static void fill(ctl_jm_entry *e, const cJSON *status) {
  const cJSON *prog = ctrain_json_get(status, "progress");
  e->known = 0;
  for (int i = 0; i < V_N; i++) {
    const cJSON *v = ctrain_json_get(fams[i].progress ? prog : status, fams[i].field);
    if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
      e->v[i] = v->valuedouble;
      e->known |= 1u << i;
    } else if (!fams[i].progress) {
      e->v[i] = 0; /* no restarts written yet: none */
      e->known |= 1u << i;
    }
  }
  e->phase = phase_of(status);
}

static void set_uid(char *dst, const char *uid) {
  snprintf(dst, CTL_JOBMETRICS_UID_MAX, "%s", uid ? uid : "");
}

/* Whether `uid` is the one kept in `have` (both cut as kept). */
static int same_uid(const char *have, const char *uid) {
  char u[CTL_JOBMETRICS_UID_MAX];
  set_uid(u, uid);
  return !strcmp(have, u);
}

ctrain_err ctl_jobmetrics_observe(ctl_jobmetrics *jm, const char *key, const char *ns,
                                  const char *name, const char *kind, const char *uid,
                                  const cJSON *status) {
  ctrain_err result = CTRAIN_OK;
  if (!key)
    return CTRAIN_OK;
  ctrain_mutex_lock(&jm->mu);
  if (!jm->max_jobs)
    goto out;
  tomb_expire(jm, ctrain_mono_s());
  ctl_jm_entry *e = jm->by_key ? ctrain_strmap_get(jm->by_key, key) : NULL;
  if (e && uid && (same_uid(e->dead_uid, uid) || (!e->live && same_uid(e->uid, uid))))
    goto out; /* a pass of an incarnation deleted since */
  if (!e) {
    e = entry_new(jm, key);
    if (!e || set_labels(e, ns, name, kind) || live_push(jm, e)) {
      if (e)
        entry_forget(jm, e);
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    set_uid(e->uid, uid);
  } else if (!e->live) {
    /* Made again (a new uid) after a delete: the deleted one's passes stay
     * out. The labels again: a job deleted before its first pass ended has
     * none. */
    if ((result = set_labels(e, ns, name, kind)) || (result = live_push(jm, e)))
      goto out;
    tomb_unlink(jm, e);
    memcpy(e->dead_uid, e->uid, sizeof(e->dead_uid));
    set_uid(e->uid, uid);
  } else if (uid && !same_uid(e->uid, uid)) {
    /* A new incarnation whose predecessor's delete was not seen. */
    memcpy(e->dead_uid, e->uid, sizeof(e->dead_uid));
    set_uid(e->uid, uid);
  }
  fill(e, status);
out:
  ctrain_mutex_unlock(&jm->mu);
  return result;
}

void ctl_jobmetrics_drop(ctl_jobmetrics *jm, const char *key, const char *uid) {
  if (!key)
    return;
  ctrain_mutex_lock(&jm->mu);
  if (!jm->max_jobs)
    goto out;
  double now = ctrain_mono_s();
  ctl_jm_entry *e = jm->by_key ? ctrain_strmap_get(jm->by_key, key) : NULL;
  if (!e) {
    /* Deleted before a pass of it ended: one may still be in flight. */
    if (uid && (e = entry_new(jm, key))) {
      set_uid(e->uid, uid);
      tomb_push(jm, e, now);
    }
  } else if (e->live && uid && !same_uid(e->uid, uid)) {
    set_uid(e->dead_uid, uid); /* an incarnation older than the one shown */
  } else if (!e->live && uid && !same_uid(e->uid, uid)) {
    /* Another incarnation deleted before a pass of it ended: both stay out. */
    memcpy(e->dead_uid, e->uid, sizeof(e->dead_uid));
    set_uid(e->uid, uid);
  } else if (e->live) {
    live_remove(jm, e);
    tomb_push(jm, e, now);
  }
  tomb_expire(jm, now);
out:
  ctrain_mutex_unlock(&jm->mu);
}

size_t ctl_jobmetrics_len(ctl_jobmetrics *jm) {
  ctrain_mutex_lock(&jm->mu);
  size_t n = jm->nlive;
  ctrain_mutex_unlock(&jm->mu);
  return n;
}

/* ---- render ----------------------------------------------------------------------- */

/* The most bytes `e`'s samples take (every value at VALUE_MAX). */
static size_t entry_bytes(const ctl_jm_entry *e) {
  size_t n = 0;
  for (int i = 0; i < V_N; i++)
    if (e->known & (1u << i))
      n += strlen(fams[i].name) + e->labels_len + VALUE_MAX + 4; /* "{", "} ", "\n" */
  n += CTL_JOBMETRICS_NPHASES *
       (strlen(PHASE_FAMILY) + e->labels_len + PHASE_MAX + 14); /* ,phase="" and " 0\n" */
  return n;
}

static int terminal(const ctl_jm_entry *e) {
  return !strcmp(phases[e->phase], "Succeeded") || !strcmp(phases[e->phase], "Failed");
}

/* The jobs a render shows, in sel[0..*n): not finished first, then
 * finished, at most max_jobs and `budget` bytes. *over_max and *over_size
 * count those left out by each bound. */
static void select_jobs(ctl_jobmetrics *jm, ctl_jm_entry **sel, size_t *n, size_t budget,
                        size_t *over_max, size_t *over_size) {
  size_t bytes = 0;
  int full = 0;
  *n = *over_max = *over_size = 0;
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < jm->nlive; i++) {
      ctl_jm_entry *e = jm->live[i];
      if (terminal(e) != pass)
        continue;
      size_t b = entry_bytes(e);
      if (*n >= jm->max_jobs)
        ++*over_max;
      else if (full || b > budget - bytes) {
        full = 1; /* the rest are left out too: the order stays the same */
        ++*over_size;
      } else {
        bytes += b;
        sel[(*n)++] = e;
      }
    }
}

/* What a render shows of one job, copied under the lock (the render runs
 * without it: ~12 ms of printf per 1,000 jobs). */
typedef struct {
  const char *labels; /* in the snapshot's own allocation */
  double v[V_N];
  unsigned known;
  int phase;
} shown;

/* sel[0..n) copied: the rows, then their labels, in one allocation (the
 * caller frees it); NULL when out of memory. */
static shown *snapshot(ctl_jm_entry *const *sel, size_t n) {
  size_t bytes = n * sizeof(shown) + 1;
  for (size_t i = 0; i < n; i++)
    bytes += sel[i]->labels_len + 1;
  shown *rows = malloc(bytes);
  if (!rows)
    return NULL;
  char *text = (char *)(rows + n);
  for (size_t i = 0; i < n; i++) {
    const ctl_jm_entry *e = sel[i];
    memcpy(text, e->labels, e->labels_len + 1);
    rows[i].labels = text;
    memcpy(rows[i].v, e->v, sizeof(rows[i].v));
    rows[i].known = e->known;
    rows[i].phase = e->phase;
    text += e->labels_len + 1;
  }
  return rows;
}

/* "%.15g": integers below 1e15 (the progress fields' bound) exactly, and
 * the 4 decimals the status keeps without noise. */
static ctrain_err sample(ctrain_buf *out, const char *name, const shown *r, const char *extra,
                         double v) {
  return ctrain_buf_printf(out, "%s{%s%s} %.15g\n", name, r->labels, extra, v);
}

ctrain_err ctl_jobmetrics_render(ctl_jobmetrics *jm, int leading, ctrain_buf *out) {
  ctrain_err result = CTRAIN_OK;
  ctl_jm_entry **sel = NULL;
  shown *rows = NULL;
  size_t n = 0, over_max = 0, over_size = 0;
  int nomem = 0;
  /* What the render writes besides the samples: every family's HELP and
   * TYPE, the two gauges after them. */
  size_t fixed = 1024;
  for (int i = 0; i < V_N; i++)
    fixed += 2 * strlen(fams[i].name) + strlen(fams[i].help) + 32;
  ctrain_mutex_lock(&jm->mu);
  if (leading && jm->nlive) {
    size_t room = out->cap ? (out->cap > out->len ? out->cap - out->len : 0) : (size_t)-1;
    sel = malloc(jm->nlive * sizeof(*sel));
    if (sel) {
      select_jobs(jm, sel, &n, room > fixed ? room - fixed : 0, &over_max, &over_size);
      rows = snapshot(sel, n);
    }
    nomem = !sel || !rows;
  }
  ctrain_mutex_unlock(&jm->mu);
  free(sel);
  if (nomem)
    return CTRAIN_E_NOMEM;
  for (int i = 0; !result && i < V_N; i++) {
    result = ctrain_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", fams[i].name, fams[i].help,
                               fams[i].name, fams[i].type);
    for (size_t j = 0; !result && j < n; j++)
      if (rows[j].known & (1u << i))
        result = sample(out, fams[i].name, &rows[j], "", rows[j].v[i]);
  }
  if (!result)
    result = ctrain_buf_printf(out, "# HELP " PHASE_FAMILY " The job's phase (the last True of its "
                                    "phase conditions, else Pending): 1 for it, 0 for the others.\n"
                                    "# TYPE " PHASE_FAMILY " gauge\n");
  for (size_t j = 0; !result && j < n; j++)
    for (int p = 0; !result && p < CTL_JOBMETRICS_NPHASES; p++) {
      char extra[32];
      snprintf(extra, sizeof(extra), ",phase=\"%s\"", phases[p]);
      result = sample(out, PHASE_FAMILY, &rows[j], extra, rows[j].phase == p);
    }
  if (!result)
    result = ctrain_buf_printf(
        out,
        "# HELP ctrain_job_metrics_jobs Jobs whose ctrain_job_* series this scrape shows.\n"
        "# TYPE ctrain_job_metrics_jobs gauge\nctrain_job_metrics_jobs %zu\n"
        "# HELP ctrain_job_metrics_dropped Jobs whose ctrain_job_* series this scrape leaves "
        "out: past --metrics-max-jobs (finished jobs first), or past the /metrics size limit.\n"
        "# TYPE ctrain_job_metrics_dropped gauge\n"
        "ctrain_job_metrics_dropped{reason=\"max_jobs\"} %zu\n"
        "ctrain_job_metrics_dropped{reason=\"body_size\"} %zu\n",
        n, over_max, over_size);
  free(rows);
  return result;
}
