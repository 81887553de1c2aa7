/* kube_client.c - the REST client's transport: one reused curl handle per
 * thread, URL/TLS/auth setup, and one request with retries (exponential
 * backoff, Retry-After); see ctrain/kube_client.h and kube_client_int.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "ctrain/buf.h"
#include "ctrain/clock.h"
#include "ctrain/log.h"
#include "ctrain/thread.h"
#include "ctrain/util.h"
#include "ctrain/version.h"
#include "kube_client_int.h"

const kube_gvr KUBE_GVR_PODS = {"", "v1", "pods"};
const kube_gvr KUBE_GVR_SERVICES = {"", "v1", "services"};
const kube_gvr KUBE_GVR_CONFIGMAPS = {"", "v1", "configmaps"};
const kube_gvr KUBE_GVR_SECRETS = {"", "v1", "secrets"};
const kube_gvr KUBE_GVR_EVENTS = {"", "v1", "events"};
const kube_gvr KUBE_GVR_NAMESPACES = {"", "v1", "namespaces"};
const kube_gvr KUBE_GVR_NODES = {"", "v1", "nodes"};
const kube_gvr KUBE_GVR_LEASES = {"coordination.k8s.io", "v1", "leases"};

#define RETRY_AFTER_CAP_S 60
#define BACKOFF_BASE_NS   250000000LL
#define BACKOFF_CAP_NS    8000000000LL

ctrain_err kube_curl_to_err(CURLcode cc) {
  switch (cc) {
  case CURLE_OK:
    return CTRAIN_OK;
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    return CTRAIN_E_TLS;
  case CURLE_OPERATION_TIMEDOUT:
    return CTRAIN_E_TIMEOUT;
  case CURLE_OUT_OF_MEMORY:
    return CTRAIN_E_NOMEM;
  case CURLE_ABORTED_BY_CALLBACK:
    return CTRAIN_E_CANCELLED;
  case CURLE_URL_MALFORMAT:
    return CTRAIN_E_INVAL;
  default:
    return CTRAIN_E_NET;
  }
}

/* ------------------------------------------------------------------------ */
/* Handles */

static void handle_destroy(void *p) {
  handle_node *hn = p;
  if (!hn)
    return;
  ctrain_mutex_lock(&hn->c->mu);
  if (hn->prev)
    hn->prev->next = hn->next;
  else
    hn->c->handles = hn->next;
  if (hn->next)
    hn->next->prev = hn->prev;
  ctrain_mutex_unlock(&hn->c->mu);
  curl_easy_cleanup(hn->h);
  free(hn);
}

static CURL *thread_handle(kube_client *c) {
  handle_node *hn = pthread_getspecific(c->key);
  if (hn)
    return hn->h;
  hn = calloc(1, sizeof(*hn));
  if (!hn)
    return NULL;
  hn->h = curl_easy_init();
  if (!hn->h) {
    free(hn);
    return NULL;
  }
  hn->c = c;
  ctrain_mutex_lock(&c->mu);
  hn->next = c->handles;
  if (c->handles)
    c->handles->prev = hn;
  c->handles = hn;
  ctrain_mutex_unlock(&c->mu);
  pthread_setspecific(c->key, hn);
  return hn->h;
}

/* Splits cfg->server ("scheme://host[:port]", host possibly "[v6]") and,
 * with tls_server_name, points URLs at that name and CONNECT_TO at the real
 * host, the curl way of client-go's TLSClientConfig.ServerName. */
static ctrain_err set_base_url(kube_client *c, char *err, size_t errlen) {
  const char *srv = c->cfg->server, *sni = c->cfg->tls_server_name;
  if (!sni || !*sni) {
    c->base_url = strdup(srv);
    return c->base_url ? CTRAIN_OK : CTRAIN_E_NOMEM;
  }
  const char *hp = strstr(srv, "://");
  int https = !strncmp(srv, "https", 5);
  hp = hp ? hp + 3 : srv;
  char host[256], port[16];
  const char *end = NULL;
  if (*hp == '[') {
    end = strchr(hp, ']');
    if (!end)
      return ctrain_errf(CTRAIN_E_CONFIG, err, errlen, "%s: server: bad IPv6 host", c->cfg->source);
    end++;
  } else {
    end = hp + strcspn(hp, ":/");
  }
  snprintf(host, sizeof(host), "%.*s", (int)(end - hp), hp);
  if (*end == ':')
    snprintf(port, sizeof(port), "%.*s", (int)strcspn(end + 1, "/"), end + 1);
  else
    snprintf(port, sizeof(port), "%s", https ? "443" : "80");
  if (!kube_name_ok(sni) || !port[0])
    return ctrain_errf(CTRAIN_E_CONFIG, err, errlen,
                       "%s: tls-server-name \"%s\" is not a host name", c->cfg->source, sni);
  size_t n = strlen(sni) + strlen(port) + 16;
  c->base_url = malloc(n);
  char ct[600];
  snprintf(ct, sizeof(ct), "%s:%s:%s:%s", sni, port, host, port);
  if (!c->base_url || !(c->connect_to = curl_slist_append(NULL, ct)))
    return CTRAIN_E_NOMEM;
  snprintf(c->base_url, n, "%s://%s:%s", https ? "https" : "http", sni, port);
  return CTRAIN_OK;
}

ctrain_err kube_client_new(kube_config *cfg, const kube_client_opts *opts, kube_client **out,
                           char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  kube_client *c = NULL;
  int have_key = 0;
  *out = NULL;
  if (!cfg || !cfg->server) {
    result = ctrain_errf(CTRAIN_E_INVAL, err, errlen, "kube client: no server in config");
    goto out;
  }
  c = calloc(1, sizeof(*c));
  if (!c) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  c->cfg = cfg;
  if (opts)
    c->opts = *opts;
  if (c->opts.qps == 0)
    c->opts.qps = 50;
  if (c->opts.burst <= 0)
    c->opts.burst = 100;
  if (c->opts.timeout_ms <= 0)
    c->opts.timeout_ms = 60000;
  if (c->opts.connect_timeout_ms <= 0)
    c->opts.connect_timeout_ms = 10000;
  if (c->opts.max_retries == 0)
    c->opts.max_retries = 5;
  if (c->opts.max_retries < 0)
    c->opts.max_retries = 0;
  if (c->opts.max_body == 0)
    c->opts.max_body = (size_t)512 << 20;
  c->user_agent = strdup(c->opts.user_agent ? c->opts.user_agent : "ctrain/" CTRAIN_VERSION);
  if (!c->user_agent) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  c->opts.user_agent = c->user_agent;
  if ((result = set_base_url(c, err, errlen)))
    goto out;
  if (pthread_key_create(&c->key, handle_destroy)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  have_key = 1;
  pthread_mutex_init(&c->mu, NULL);
  kube_ratelimit_init(&c->rl, c->opts.qps < 0 ? 0 : c->opts.qps, c->opts.burst, NULL, NULL);
  LOG_DEBUG("kube: client for %s (%s, ca %s, client cert %s, token %s, qps %.1f burst %d)",
            cfg->server, cfg->source ? cfg->source : "?",
            cfg->insecure_skip_tls_verify ? "NOT VERIFIED" : (cfg->ca_pem ? "given" : "system"),
            cfg->cert_pem ? "yes" : "no", (cfg->token || cfg->token_file) ? "yes" : "no",
            c->opts.qps, c->opts.burst);
  *out = c;
  c = NULL;
out:
  if (c) {
    if (have_key)
      pthread_key_delete(c->key);
    free(c->user_agent);
    free(c->base_url);
    curl_slist_free_all(c->connect_to);
    free(c);
  }
  return result;
}

void kube_client_free(kube_client *c) {
  if (!c)
    return;
  /* Destructors must not run after this; release every thread's handle here. */
  pthread_key_delete(c->key);
  handle_node *hn = c->handles;
  while (hn) {
    handle_node *next = hn->next;
    curl_easy_cleanup(hn->h);
    free(hn);
    hn = next;
  }
  pthread_mutex_destroy(&c->mu);
  kube_ratelimit_destroy(&c->rl);
  free(c->user_agent);
  free(c->base_url);
  curl_slist_free_all(c->connect_to);
  free(c);
}

kube_config *kube_client_config(kube_client *c) {
  return c->cfg;
}

long kube_client_requests(kube_client *c) {
  return atomic_load(&c->requests);
}

/* ------------------------------------------------------------------------ */
/* Requests */

/* TLS: verification (unless the config turns it off), the CA bundle and
 * the client certificate, all from memory. */
static void set_tls(CURL *h, const kube_config *cfg) {
  if (cfg->insecure_skip_tls_verify) {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
  } else {
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (cfg->ca_pem) {
      struct curl_blob blob = {cfg->ca_pem, cfg->ca_pem_len, CURL_BLOB_COPY};
      curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    }
  }
  if (cfg->cert_pem && cfg->key_pem) {
    struct curl_blob cb = {cfg->cert_pem, cfg->cert_pem_len, CURL_BLOB_COPY};
    struct curl_blob kb = {cfg->key_pem, cfg->key_pem_len, CURL_BLOB_COPY};
    curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &cb);
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &kb);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
  }
}

/* Appends "name: <prefix><value>" to *l, or "name:" (curl's way to drop
 * a header it would add) when value is NULL. The formatted copy is wiped, as
 * it may hold a token. 0 when out of memory. */
static int add_header(struct curl_slist **l, const char *name, const char *prefix,
                      const char *value) {
  size_t n = strlen(name) + strlen(prefix) + (value ? strlen(value) : 0) + 3;
  char *line = malloc(n);
  if (!line)
    return 0;
  if (value)
    snprintf(line, n, "%s: %s%s", name, prefix, value);
  else
    snprintf(line, n, "%s:", name);
  struct curl_slist *nl = curl_slist_append(*l, line);
  OPENSSL_cleanse(line, n);
  free(line);
  if (!nl)
    return 0;
  *l = nl;
  return 1;
}

/* The request's header list into *out (owned by the caller). */
static ctrain_err build_headers(const char *tok, const char *content_type,
                                struct curl_slist **out) {
  struct curl_slist *l = NULL;
  /* No "Expect: 100-continue" round trip for large bodies. */
  if (!add_header(&l, "Accept", "", "application/json") ||
      (tok[0] && !add_header(&l, "Authorization", "Bearer ", tok)) ||
      (content_type && !add_header(&l, "Content-Type", "", content_type)) ||
      !add_header(&l, "Expect", "", NULL)) {
    curl_slist_free_all(l);
    return CTRAIN_E_NOMEM;
  }
  *out = l;
  return CTRAIN_OK;
}

ctrain_err kube_client_setup(kube_client *c, CURL *h, const char *method, const char *path,
                             const char *content_type, const char *body, size_t body_len,
                             struct curl_slist **hdrs, char *curl_err, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  kube_config *cfg = c->cfg;
  char *url = NULL, *tok = NULL;
  char terr[256] = "";
  size_t ulen = strlen(c->base_url) + strlen(path) + 1;

  url = malloc(ulen);
  tok = malloc(KUBE_CONFIG_MAX_TOKEN);
  if (!url || !tok) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  snprintf(url, ulen, "%s%s", c->base_url, path);
  if ((result = kube_config_token(cfg, tok, KUBE_CONFIG_MAX_TOKEN, terr, sizeof(terr)))) {
    if (st)
      snprintf(st->message, sizeof(st->message), "%s", terr);
    goto out;
  }
  if ((result = build_headers(tok, content_type, hdrs)))
    goto out;
  curl_easy_setopt(h, CURLOPT_URL, url);
  if (c->connect_to)
    curl_easy_setopt(h, CURLOPT_CONNECT_TO, c->connect_to);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
  curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION,
                   (long)(c->opts.http1 ? CURL_HTTP_VERSION_1_1 : CURL_HTTP_VERSION_2TLS));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->opts.connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  set_tls(h, cfg);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
  if (!strcmp(method, "GET")) {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    } else if (strcmp(method, "DELETE")) {
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
    }
  }
out:
  if (tok) {
    OPENSSL_cleanse(tok, KUBE_CONFIG_MAX_TOKEN);
    free(tok);
  }
  free(url);
  return result;
}

int kube_retry_after(CURL *h) {
  struct curl_header *hd = NULL;
  if (curl_easy_header(h, "Retry-After", 0, CURLH_HEADER, -1, &hd) != CURLHE_OK || !hd)
    return 0;
  char *end = NULL;
  long v = strtol(hd->value, &end, 10);
  if (end == hd->value || v <= 0)
    return 0; /* an HTTP date: treat as absent, we back off anyway */
  return v > RETRY_AFTER_CAP_S ? RETRY_AFTER_CAP_S : (int)v;
}

static int retryable_http(int code) {
  return code == 429 || (code >= 500 && code != 501 && code != 505);
}

/* The wait before retry `attempt + 1`: the server's Retry-After when it
 * gave one, else exponential backoff. */
static int64_t retry_delay(int attempt, int retry_after_s) {
  if (retry_after_s > 0)
    return (int64_t)retry_after_s * 1000000000LL;
  int64_t delay = BACKOFF_BASE_NS << (attempt < 6 ? attempt : 6);
  return delay > BACKOFF_CAP_NS ? BACKOFF_CAP_NS : delay;
}

/* A response body, capped at the client's max_body. */
typedef struct body_sink {
  ctrain_buf b;
  int toobig; /* the cap stopped the transfer */
  int failed; /* no whole response: what b holds is a fragment */
} body_sink;

static size_t write_body(char *data, size_t size, size_t nmemb, void *ud) {
  body_sink *s = ud;
  ctrain_err e = ctrain_buf_append(&s->b, data, size * nmemb);
  s->toobig |= e == CTRAIN_E_TOOBIG;
  return e ? 0 : size * nmemb;
}

/* One attempt of a request on h (set up already): sends it and decodes the
 * outcome into st. *retry says whether another attempt may succeed. */
static ctrain_err perform_once(kube_client *c, CURL *h, const char *method, const char *path,
                               body_sink *sink, const char *curl_err, kube_status *st, int *retry) {
  ctrain_err result;
  atomic_fetch_add(&c->requests, 1);
  CURLcode cc = curl_easy_perform(h);
  long code = 0, version = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &version);
  st->http_version = version == CURL_HTTP_VERSION_2_0   ? 20
                     : version == CURL_HTTP_VERSION_1_1 ? 11
                     : version == CURL_HTTP_VERSION_1_0 ? 10
                                                        : 0;
  if (cc != CURLE_OK) {
    sink->failed = 1;
    result = sink->toobig ? CTRAIN_E_TOOBIG : kube_curl_to_err(cc);
    st->http_code = (int)code;
    st->retry_after_s = 0; /* no answer to take one from: plain backoff */
    snprintf(st->message, sizeof(st->message), "%s %s: %s", method, path,
             sink->toobig ? "response body over the cap"
                          : (curl_err[0] ? curl_err : curl_easy_strerror(cc)));
    /* Only a GET is safe to send twice after a broken connection. */
    *retry = result == CTRAIN_E_NET && !strcmp(method, "GET");
    return result;
  }
  st->retry_after_s = kube_retry_after(h);
  if (code >= 200 && code < 300) {
    st->http_code = (int)code;
    *retry = 0;
    return CTRAIN_OK;
  }
  kube_status_decode(sink->b.p, sink->b.len, (int)code, st);
  *retry = retryable_http((int)code);
  return kube_status_to_err((int)code);
}

ctrain_err kube_client_request(kube_client *c, const char *method, const char *path,
                               const char *content_type, const char *body, size_t body_len,
                               char **resp, size_t *resp_len, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  kube_status local;
  struct curl_slist *hdrs = NULL;
  body_sink sink = {0};
  char curl_err[CURL_ERROR_SIZE];
  int retry = 0;
  if (!st)
    st = &local;
  memset(st, 0, sizeof(*st));
  if (resp)
    *resp = NULL;
  if (resp_len)
    *resp_len = 0;
  ctrain_buf_init(&sink.b, c->opts.max_body);
  CURL *h = thread_handle(c);
  if (!h) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (int attempt = 0;; attempt++) {
    ctrain_buf_clear(&sink.b);
    sink.toobig = sink.failed = 0;
    curl_slist_free_all(hdrs);
    hdrs = NULL;
    curl_err[0] = '\0';
    /* No deadline (-1): the wait only delays, it cannot fail. */
    ctrain_ignore(kube_ratelimit_wait(&c->rl, -1));
    curl_easy_reset(h);
    if ((result = kube_client_setup(c, h, method, path, content_type, body, body_len, &hdrs,
                                    curl_err, st)))
      goto out;
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->opts.timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    st->attempts = attempt + 1;
    result = perform_once(c, h, method, path, &sink, curl_err, st, &retry);
    if (!result || !retry || attempt >= c->opts.max_retries)
      break;
    int64_t delay = retry_delay(attempt, st->retry_after_s);
    LOG_DEBUG("kube: %s %s: %s (HTTP %d), retry %d in %lld ms", method, path,
              ctrain_strerror(result), st->http_code, attempt + 1, (long long)(delay / 1000000));
    ctrain_sleep_ns(delay);
  }
  /* The body goes back on success and on HTTP errors, not after a
   * transport failure (what arrived then is a fragment). */
  if (!sink.failed) {
    if (resp_len)
      *resp_len = sink.b.len;
    if (resp && !(*resp = ctrain_buf_take(&sink.b, NULL))) {
      result = CTRAIN_E_NOMEM;
      if (resp_len)
        *resp_len = 0;
    }
  }
out:
  curl_slist_free_all(hdrs);
  ctrain_buf_free(&sink.b);
  /* The handle keeps pointers to hdrs and our error buffer; clear them. */
  if (h) {
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
  }
  return result;
}
