/* kube_stream.c - the cancellable streaming GET a watch reads; see
 * ctrain/kube_client.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/buf.h"
#include "ctrain/clock.h"
#include "ctrain/thread.h"
#include "kube_client_int.h"

/* Error bodies are small; anything past this is not a Status worth keeping. */
#define ERR_BODY_CAP (64u << 10)

struct kube_client_cancel {
  atomic_int fired;
  pthread_mutex_t mu; /* guards multi */
  CURLM *multi;       /* the stream in progress, to wake it */
};

ctrain_err kube_client_cancel_new(kube_client_cancel **out) {
  kube_client_cancel *k = calloc(1, sizeof(*k));
  if (!k)
    return CTRAIN_E_NOMEM;
  atomic_init(&k->fired, 0);
  pthread_mutex_init(&k->mu, NULL);
  *out = k;
  return CTRAIN_OK;
}

void kube_client_cancel_fire(kube_client_cancel *k) {
  atomic_store(&k->fired, 1);
  ctrain_mutex_lock(&k->mu);
  if (k->multi)
    curl_multi_wakeup(k->multi);
  ctrain_mutex_unlock(&k->mu);
}

int kube_client_cancel_fired(kube_client_cancel *k) {
  return k && atomic_load(&k->fired);
}

void kube_client_cancel_free(kube_client_cancel *k) {
  if (!k)
    return;
  pthread_mutex_destroy(&k->mu);
  free(k);
}

typedef struct stream_ctx {
  CURL *h;
  kube_client_stream_fn fn;
  void *ud;
  ctrain_buf err_body; /* non-2xx answers: kept (capped) for the Status */
  ctrain_err stop;     /* why fn stopped the transfer */
  int64_t last_byte_ns;
} stream_ctx;

static size_t write_stream(char *data, size_t size, size_t nmemb, void *ud) {
  stream_ctx *s = ud;
  size_t n = size * nmemb;
  long code = 0;
  s->last_byte_ns = ctrain_mono_ns();
  curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
  if (code < 200 || code >= 300) {
    if (ctrain_buf_append(&s->err_body, data, n) == CTRAIN_E_NOMEM)
      return 0;
    return n; /* over the cap: drop the rest, keep what we have */
  }
  ctrain_err r = s->fn(s->ud, data, n);
  if (r) {
    s->stop = r;
    return 0;
  }
  return n;
}

ctrain_err kube_client_stream(kube_client *c, const char *path, kube_client_stream_fn fn, void *ud,
                              kube_client_cancel *cancel, long idle_timeout_ms, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  kube_status local;
  CURL *h = NULL;
  CURLM *m = NULL;
  struct curl_slist *hdrs = NULL;
  char curl_err[CURL_ERROR_SIZE] = "";
  stream_ctx s = {0};
  int added = 0, registered = 0;
  CURLcode cc = CURLE_OK;
  if (!st)
    st = &local;
  memset(st, 0, sizeof(*st));
  ctrain_buf_init(&s.err_body, ERR_BODY_CAP);
  s.fn = fn;
  s.ud = ud;
  h = curl_easy_init();
  m = curl_multi_init();
  if (!h || !m) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  s.h = h;
  /* No deadline (-1): the wait only delays, it cannot fail. */
  ctrain_ignore(kube_ratelimit_wait(&c->rl, -1));
  if ((result = kube_client_setup(c, h, "GET", path, NULL, NULL, 0, &hdrs, curl_err, st)))
    goto out;
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_stream);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
  /* Deliver bytes as they come; watch events are small. */
  curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 65536L);
  if (curl_multi_add_handle(m, h) != CURLM_OK) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  added = 1;
  if (cancel) {
    ctrain_mutex_lock(&cancel->mu);
    cancel->multi = m;
    ctrain_mutex_unlock(&cancel->mu);
    registered = 1;
  }
  st->attempts = 1;
  atomic_fetch_add(&c->requests, 1);
  s.last_byte_ns = ctrain_mono_ns();
  int running = 1;
  while (running) {
    if (kube_client_cancel_fired(cancel)) {
      result = CTRAIN_E_CANCELLED;
      goto out;
    }
    if (curl_multi_perform(m, &running) != CURLM_OK) {
      result = CTRAIN_E_NET;
      goto out;
    }
    if (!running)
      break;
    if (idle_timeout_ms > 0 && ctrain_mono_ns() - s.last_byte_ns > idle_timeout_ms * 1000000LL) {
      result = CTRAIN_E_TIMEOUT;
      snprintf(st->message, sizeof(st->message), "GET %s: no data for %ld ms", path,
               idle_timeout_ms);
      goto out;
    }
    curl_multi_poll(m, NULL, 0, 1000, NULL);
  }
  CURLMsg *msg;
  int left = 0;
  while ((msg = curl_multi_info_read(m, &left)))
    if (msg->msg == CURLMSG_DONE && msg->easy_handle == h)
      cc = msg->data.result;
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  if (s.stop) {
    result = s.stop;
    goto out;
  }
  if (cc != CURLE_OK) {
    result = kube_curl_to_err(cc);
    st->http_code = (int)code;
    snprintf(st->message, sizeof(st->message), "GET %s: %s", path,
             curl_err[0] ? curl_err : curl_easy_strerror(cc));
    goto out;
  }
  st->retry_after_s = kube_retry_after(h);
  if (code < 200 || code >= 300) {
    kube_status_decode(s.err_body.p, s.err_body.len, (int)code, st);
    result = kube_status_to_err((int)code);
    goto out;
  }
  st->http_code = (int)code;
out:
  if (registered) {
    ctrain_mutex_lock(&cancel->mu);
    cancel->multi = NULL;
    ctrain_mutex_unlock(&cancel->mu);
  }
  if (added)
    curl_multi_remove_handle(m, h);
  curl_multi_cleanup(m);
  curl_easy_cleanup(h);
  curl_slist_free_all(hdrs);
  ctrain_buf_free(&s.err_body);
  return result;
}
