/* kube_watch.c - line splitting, event parsing, the reconnecting watch; see
 * ctrain/kube_watch.h. */
#include "ctrain/clock.h"
#include "ctrain/kube_watch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctrain/json.h"
#include "ctrain/log.h"
#include "ctrain/thread.h"
#include "kube_util.h"

#define DEFAULT_MAX_LINE ((size_t)16 << 20)
#define RV_CAP           128
#define BACKOFF_MIN_NS   200000000LL
#define BACKOFF_MAX_NS   30000000000LL

/* ------------------------------------------------------------------------ */
/* Lines */

void kube_lines_init(kube_lines *ls, size_t cap) {
  ctrain_buf_init(&ls->carry, cap ? cap : DEFAULT_MAX_LINE);
}

void kube_lines_reset(kube_lines *ls) {
  ctrain_buf_clear(&ls->carry);
}

void kube_lines_free(kube_lines *ls) {
  ctrain_buf_free(&ls->carry);
}

static ctrain_err emit(const char *line, size_t n, kube_lines_fn fn, void *ud) {
  if (n && line[n - 1] == '\r')
    n--;
  if (!n)
    return CTRAIN_OK;
  return fn(ud, line, n);
}

ctrain_err kube_lines_feed(kube_lines *ls, const char *data, size_t len, kube_lines_fn fn,
                           void *ud) {
  ctrain_err result = CTRAIN_OK;
  while (len) {
    /* Only the new bytes are scanned: the carried part has no '\n'. */
    const char *nl = memchr(data, '\n', len);
    if (!nl) {
      result = ctrain_buf_append(&ls->carry, data, len);
      goto out;
    }
    size_t n = (size_t)(nl - data);
    data = nl + 1;
    len -= n + 1;
    if (ls->carry.len) {
      if ((result = ctrain_buf_append(&ls->carry, nl - n, n)))
        goto out;
      result = emit(ls->carry.p, ls->carry.len, fn, ud);
      ctrain_buf_clear(&ls->carry);
    } else {
      result = n > ls->carry.cap ? CTRAIN_E_TOOBIG : emit(nl - n, n, fn, ud);
    }
    if (result)
      goto out;
  }
out:
  return result;
}

/* ------------------------------------------------------------------------ */
/* Events */

static const char *const type_names[] = {
    [KUBE_WATCH_ADDED] = "ADDED",     [KUBE_WATCH_MODIFIED] = "MODIFIED",
    [KUBE_WATCH_DELETED] = "DELETED", [KUBE_WATCH_BOOKMARK] = "BOOKMARK",
    [KUBE_WATCH_ERROR] = "ERROR",
};

const char *kube_watch_type_name(kube_watch_type t) {
  if (t < KUBE_WATCH_ADDED || t > KUBE_WATCH_ERROR)
    return "?";
  return type_names[t];
}

ctrain_err kube_watch_event_parse(const char *line, size_t len, kube_watch_event *ev) {
  ctrain_err result = CTRAIN_OK;
  cJSON *j = NULL;
  memset(ev, 0, sizeof(*ev));
  j = cJSON_ParseWithLength(line, len);
  if (!cJSON_IsObject(j)) {
    result = CTRAIN_E_PARSE;
    goto out;
  }
  const char *t = ctrain_json_str(j, "type");
  if (!t) {
    result = CTRAIN_E_PARSE;
    goto out;
  }
  for (int i = KUBE_WATCH_ADDED; i <= KUBE_WATCH_ERROR; i++)
    if (!strcmp(t, type_names[i]))
      ev->type = (kube_watch_type)i;
  if (!ev->type) {
    result = CTRAIN_E_PARSE;
    goto out;
  }
  cJSON *obj = cJSON_DetachItemFromObjectCaseSensitive(j, "object");
  if (!cJSON_IsObject(obj)) {
    cJSON_Delete(obj);
    result = CTRAIN_E_PARSE;
    goto out;
  }
  ev->object = obj;
  ev->resource_version = ctrain_json_str(ctrain_json_get(obj, "metadata"), "resourceVersion");
out:
  cJSON_Delete(j);
  if (result)
    memset(ev, 0, sizeof(*ev));
  return result;
}

void kube_watch_event_clear(kube_watch_event *ev) {
  cJSON_Delete(ev->object);
  memset(ev, 0, sizeof(*ev));
}

/* ------------------------------------------------------------------------ */
/* Watch */

struct kube_watch {
  kube_client *c;
  kube_watch_opts o;
  char *ns, *label_selector, *field_selector;
  kube_client_cancel *cancel;
  kube_lines lines;

  pthread_mutex_t mu; /* guards rv, stats, cancelled; cv wakes backoff sleeps */
  pthread_cond_t cv;
  char rv[RV_CAP];
  kube_watch_stats stats;
  int cancelled;

  /* Per-run state used by the stream callbacks. */
  kube_watch_fn fn;
  void *ud;
  kube_status *st;
  ctrain_err stop;      /* why a line ended the stream */
  ctrain_err user_stop; /* the handler's non-zero result */
  int got_event;        /* reset backoff once a stream delivered something */
};

ctrain_err kube_watch_new(kube_client *c, const kube_watch_opts *o, kube_watch **out) {
  ctrain_err result = CTRAIN_OK;
  kube_watch *w = NULL;
  int oom = 0;
  *out = NULL;
  if (!c || !o || !o->gvr) {
    result = CTRAIN_E_INVAL;
    goto out;
  }
  w = calloc(1, sizeof(*w));
  if (!w) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  w->c = c;
  w->o = *o;
  w->ns = kube_dup_opt(o->ns, &oom);
  w->label_selector = kube_dup_opt(o->label_selector, &oom);
  w->field_selector = kube_dup_opt(o->field_selector, &oom);
  if (oom || kube_client_cancel_new(&w->cancel)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  if (o->resource_version && strlen(o->resource_version) >= RV_CAP) {
    result = CTRAIN_E_INVAL;
    goto out;
  }
  snprintf(w->rv, sizeof(w->rv), "%s", o->resource_version ? o->resource_version : "");
  if (w->o.timeout_seconds <= 0)
    w->o.timeout_seconds = 300;
  kube_lines_init(&w->lines, o->max_line ? o->max_line : DEFAULT_MAX_LINE);
  pthread_mutex_init(&w->mu, NULL);
  ctrain_cond_init_mono(&w->cv); /* backoff sleeps ignore wall-clock jumps */
  *out = w;
  w = NULL;
out:
  if (w) {
    kube_client_cancel_free(w->cancel);
    free(w->ns);
    free(w->label_selector);
    free(w->field_selector);
    free(w);
  }
  return result;
}

void kube_watch_free(kube_watch *w) {
  if (!w)
    return;
  kube_lines_free(&w->lines);
  kube_client_cancel_free(w->cancel);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
  free(w->ns);
  free(w->label_selector);
  free(w->field_selector);
  free(w);
}

void kube_watch_cancel(kube_watch *w) {
  ctrain_mutex_lock(&w->mu);
  w->cancelled = 1;
  ctrain_cond_broadcast(&w->cv);
  ctrain_mutex_unlock(&w->mu);
  kube_client_cancel_fire(w->cancel);
}

void kube_watch_resource_version(kube_watch *w, char *buf, size_t cap) {
  ctrain_mutex_lock(&w->mu);
  snprintf(buf, cap, "%s", w->rv);
  ctrain_mutex_unlock(&w->mu);
}

void kube_watch_get_stats(kube_watch *w, kube_watch_stats *out) {
  ctrain_mutex_lock(&w->mu);
  *out = w->stats;
  ctrain_mutex_unlock(&w->mu);
}

static void set_rv(kube_watch *w, const char *rv) {
  if (!rv || strlen(rv) >= RV_CAP)
    return;
  ctrain_mutex_lock(&w->mu);
  snprintf(w->rv, sizeof(w->rv), "%s", rv);
  ctrain_mutex_unlock(&w->mu);
}

/* One line = one event: parse it once, track the version, deliver it. */
static ctrain_err on_line(void *ud, const char *line, size_t len) {
  kube_watch *w = ud;
  kube_watch_event ev;
  ctrain_err result = kube_watch_event_parse(line, len, &ev);
  if (result) {
    snprintf(w->st->message, sizeof(w->st->message), "watch: unparseable event (%zu bytes)", len);
    w->stop = result;
    goto out;
  }
  if (ev.type == KUBE_WATCH_ERROR) {
    kube_status est = {0};
    kube_status_from_object(ev.object, 0, &est);
    *w->st = est;
    result = est.http_code == 410 ? CTRAIN_E_GONE : kube_status_to_err(est.http_code);
    if (!result)
      result = CTRAIN_E_HTTP;
    w->stop = result;
    goto out;
  }
  ctrain_mutex_lock(&w->mu);
  if (w->cancelled) { /* nothing is delivered after a cancel, even from this chunk */
    ctrain_mutex_unlock(&w->mu);
    result = w->stop = CTRAIN_E_CANCELLED;
    goto out;
  }
  ctrain_mutex_unlock(&w->mu);
  set_rv(w, ev.resource_version);
  ctrain_mutex_lock(&w->mu);
  if (ev.type == KUBE_WATCH_BOOKMARK)
    w->stats.bookmarks++;
  else
    w->stats.events++;
  ctrain_mutex_unlock(&w->mu);
  w->got_event = 1;
  result = w->fn(w->ud, &ev);
  if (result)
    w->user_stop = result;
out:
  kube_watch_event_clear(&ev);
  return result;
}

static ctrain_err on_bytes(void *ud, const char *data, size_t len) {
  kube_watch *w = ud;
  ctrain_err result = kube_lines_feed(&w->lines, data, len, on_line, w);
  if (result == CTRAIN_E_TOOBIG) {
    snprintf(w->st->message, sizeof(w->st->message), "watch: event larger than %zu bytes",
             w->lines.carry.cap);
    w->stop = result;
  }
  return result;
}

static ctrain_err build_path(kube_watch *w, char *path, size_t cap) {
  ctrain_err result = kube_client_path(w->o.gvr, w->ns, NULL, NULL, path, cap);
  if (result)
    return result;
  char rv[RV_CAP], timeout[32];
  kube_watch_resource_version(w, rv, sizeof(rv));
  snprintf(timeout, sizeof(timeout), "%ld", w->o.timeout_seconds);
  const char *const q[][2] = {{"watch", "1"},
                              {"timeoutSeconds", timeout},
                              {"allowWatchBookmarks", w->o.no_bookmarks ? NULL : "true"},
                              {"resourceVersion", rv[0] ? rv : NULL},
                              {"labelSelector", w->label_selector},
                              {"fieldSelector", w->field_selector}};
  for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++)
    if ((result = kube_client_query_add(path, cap, q[i][0], q[i][1])))
      return result;
  return CTRAIN_OK;
}

static int permanent(ctrain_err r) {
  switch (r) {
  case CTRAIN_E_TOOBIG:
  case CTRAIN_E_INVAL:
  case CTRAIN_E_NOTFOUND:
  case CTRAIN_E_TLS:
  case CTRAIN_E_NOMEM:
  case CTRAIN_E_UNSUPPORTED:
  case CTRAIN_E_CONFIG:
    return 1;
  default:
    return 0;
  }
}

ctrain_err kube_watch_run(kube_watch *w, kube_watch_fn fn, void *ud, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  kube_status local;
  char path[8192];
  int64_t backoff = BACKOFF_MIN_NS;
  if (!st)
    st = &local;
  w->fn = fn;
  w->ud = ud;
  w->st = st;
  for (;;) {
    ctrain_mutex_lock(&w->mu);
    int cancelled = w->cancelled;
    w->stats.connects++;
    ctrain_mutex_unlock(&w->mu);
    if (cancelled) {
      result = CTRAIN_E_CANCELLED;
      goto out;
    }
    if ((result = build_path(w, path, sizeof(path))))
      goto out;
    kube_lines_reset(&w->lines);
    w->stop = CTRAIN_OK;
    w->user_stop = CTRAIN_OK;
    w->got_event = 0;
    memset(st, 0, sizeof(*st));
    /* The server ends the stream after timeoutSeconds; allow it slack
     * before calling the connection dead. */
    result = kube_client_stream(w->c, path, on_bytes, w, w->cancel,
                                (w->o.timeout_seconds + 30) * 1000L, st);
    if (w->user_stop) {
      result = w->user_stop;
      goto out;
    }
    if (w->stop)
      result = w->stop;
    if (w->got_event)
      backoff = BACKOFF_MIN_NS;
    if (result == CTRAIN_OK)
      continue; /* normal end of a stream: reconnect from the last version */
    if (result == CTRAIN_E_CANCELLED)
      goto out;
    if (result == CTRAIN_E_GONE) {
      if (!w->o.relist)
        goto out;
      char rv[RV_CAP] = "";
      LOG_INFO("kube: watch %s: resourceVersion too old (410), relisting", w->o.gvr->resource);
      result = w->o.relist(w->o.relist_ud, rv, sizeof(rv));
      if (result == CTRAIN_OK) {
        set_rv(w, rv);
        ctrain_mutex_lock(&w->mu);
        w->stats.relists++;
        ctrain_mutex_unlock(&w->mu);
        continue;
      }
      if (result == CTRAIN_E_CANCELLED)
        goto out;
      /* A failed relist: back off and try it again through another 410. */
    } else if (permanent(result)) {
      goto out;
    }
    LOG_WARN("kube: watch %s: %s (HTTP %d %s); reconnecting in %lld ms", w->o.gvr->resource,
             ctrain_strerror(result), st->http_code, st->message, (long long)(backoff / 1000000));
    if (ctrain_cond_nap(&w->cv, &w->mu, &w->cancelled, backoff)) {
      result = CTRAIN_E_CANCELLED;
      goto out;
    }
    backoff *= 2;
    if (backoff > BACKOFF_MAX_NS)
      backoff = BACKOFF_MAX_NS;
  }
out:
  return result;
}
