/* kube_client.c - REST verbs over libcurl; see ctrain/kube_client.h. */
#include "ctrain/clock.h"
#include "ctrain/kube_client.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/crypto.h>

#include "ctrain/kube_ratelimit.h"
#include "ctrain/log.h"
#include "ctrain/version.h"
#include "kube_util.h"

const kube_gvr KUBE_GVR_PODS = {"", "v1", "pods"};
const kube_gvr KUBE_GVR_SERVICES = {"", "v1", "services"};
const kube_gvr KUBE_GVR_CONFIGMAPS = {"", "v1", "configmaps"};
const kube_gvr KUBE_GVR_SECRETS = {"", "v1", "secrets"};
const kube_gvr KUBE_GVR_EVENTS = {"", "v1", "events"};
const kube_gvr KUBE_GVR_NAMESPACES = {"", "v1", "namespaces"};
const kube_gvr KUBE_GVR_NODES = {"", "v1", "nodes"};
const kube_gvr KUBE_GVR_LEASES = {"coordination.k8s.io", "v1", "leases"};

/* Error bodies are small; anything past this is not a Status worth keeping. */
#define ERR_BODY_CAP      (64u << 10)
#define RETRY_AFTER_CAP_S 60
#define BACKOFF_BASE_NS   250000000LL
#define BACKOFF_CAP_NS    8000000000LL

/* One easy handle per (client, thread); on the client's list so that
 * kube_client_free can release the handles of threads still alive. */
typedef struct handle_node {
  CURL *h;
  struct kube_client *c;
  struct handle_node *prev, *next;
} handle_node;

struct kube_client {
  kube_config *cfg; /* borrowed */
  kube_client_opts opts;
  char *user_agent;
  kube_ratelimit rl;
  pthread_key_t key;
  pthread_mutex_t mu; /* guards handles */
  handle_node *handles;
  atomic_long requests; /* HTTP requests sent: retries and streams included */
  /* With tls-server-name: URLs name that host (so SNI and verification use
   * it) and CONNECT_TO sends the connection to the configured server. */
  char *base_url;                /* scheme://host[:port] of every request URL */
  struct curl_slist *connect_to; /* NULL without tls-server-name */
};

struct kube_client_cancel {
  atomic_int fired;
  pthread_mutex_t mu; /* guards multi */
  CURLM *multi;       /* the stream in progress, to wake it */
};

/* ------------------------------------------------------------------------ */
/* Status */

static void copy_str(char *dst, size_t cap, const char *src) {
  if (!src)
    src = "";
  snprintf(dst, cap, "%s", src);
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Fills st from j when j is a Status; returns 0 (st reset) when it is not. */
static int status_fill(const cJSON *j, int http_code, kube_status *st) {
  int attempts = st->attempts, retry_after = st->retry_after_s, version = st->http_version;
  memset(st, 0, sizeof(*st));
  st->attempts = attempts;
  st->http_version = version;
  st->retry_after_s = retry_after;
  st->http_code = http_code;
  const char *kind = jstr(j, "kind");
  if (!j || !kind || strcmp(kind, "Status"))
    return 0;
  copy_str(st->reason, sizeof(st->reason), jstr(j, "reason"));
  copy_str(st->message, sizeof(st->message), jstr(j, "message"));
  const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "details");
  if (cJSON_IsObject(d)) {
    copy_str(st->details_name, sizeof(st->details_name), jstr(d, "name"));
    copy_str(st->details_group, sizeof(st->details_group), jstr(d, "group"));
    copy_str(st->details_kind, sizeof(st->details_kind), jstr(d, "kind"));
    copy_str(st->details_uid, sizeof(st->details_uid), jstr(d, "uid"));
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(d, "retryAfterSeconds");
    if (cJSON_IsNumber(ra) && ra->valuedouble > 0 && ra->valuedouble < 86400 && !st->retry_after_s)
      st->retry_after_s = (int)ra->valuedouble;
    const cJSON *causes = cJSON_GetObjectItemCaseSensitive(d, "causes");
    const cJSON *c0 = cJSON_IsArray(causes) ? cJSON_GetArrayItem(causes, 0) : NULL;
    if (cJSON_IsObject(c0)) {
      const char *f = jstr(c0, "field"), *m = jstr(c0, "message");
      snprintf(st->details_cause, sizeof(st->details_cause), "%s%s%s", f ? f : "", f ? ": " : "",
               m ? m : "");
    }
  }
  const cJSON *code = cJSON_GetObjectItemCaseSensitive(j, "code");
  if (!http_code && cJSON_IsNumber(code) && code->valuedouble >= 100 && code->valuedouble < 600)
    st->http_code = (int)code->valuedouble;
  return 1;
}

void kube_status_from_object(const cJSON *obj, int http_code, kube_status *st) {
  status_fill(obj, http_code, st);
}

void kube_status_decode(const char *body, size_t len, int http_code, kube_status *st) {
  cJSON *j = NULL;
  if (body && len)
    j = cJSON_ParseWithLength(body, len);
  if (!status_fill(j, http_code, st) && body && len && (http_code < 200 || http_code >= 300)) {
    /* Not a Status (a proxy's HTML page, say): keep its start, printable only. */
    size_t n = len < sizeof(st->message) - 1 ? len : sizeof(st->message) - 1;
    for (size_t i = 0; i < n; i++)
      st->message[i] = (body[i] >= 32 && body[i] < 127) ? body[i] : ' ';
    st->message[n] = '\0';
  }
  cJSON_Delete(j);
}

ctrain_err kube_status_to_err(int http_code) {
  if (http_code >= 200 && http_code < 300)
    return CTRAIN_OK;
  switch (http_code) {
  case 400:
  case 422:
    return CTRAIN_E_INVAL;
  case 401:
  case 403:
    return CTRAIN_E_AUTH;
  case 404:
    return CTRAIN_E_NOTFOUND;
  case 409:
    return CTRAIN_E_CONFLICT;
  case 410:
    return CTRAIN_E_GONE;
  case 504:
    return CTRAIN_E_TIMEOUT;
  default:
    return CTRAIN_E_HTTP;
  }
}

static ctrain_err curl_to_err(CURLcode cc) {
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
/* Paths and queries */

static int name_ok(const char *s) {
  if (!s || !*s)
    return 0;
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    /* Names are DNS labels/subdomains or path segments (RBAC names allow ':'). */
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
          ch == '-' || ch == '.' || ch == '_' || ch == ':' || ch == '@'))
      return 0;
  }
  return 1;
}

ctrain_err kube_client_path(const kube_gvr *gvr, const char *ns, const char *name,
                            const char *subresource, char *buf, size_t buflen) {
  size_t n = 0;
  int w;
  if (!gvr || !gvr->version || !name_ok(gvr->version) || !name_ok(gvr->resource) ||
      (gvr->group && *gvr->group && !name_ok(gvr->group)) || (ns && *ns && !name_ok(ns)) ||
      (name && !name_ok(name)) || (subresource && !name_ok(subresource)))
    return CTRAIN_E_INVAL;
  if (gvr->group && *gvr->group)
    w = snprintf(buf, buflen, "/apis/%s/%s", gvr->group, gvr->version);
  else
    w = snprintf(buf, buflen, "/api/%s", gvr->version);
  if (w < 0 || (size_t)w >= buflen)
    return CTRAIN_E_TOOBIG;
  n = (size_t)w;
  if (ns && *ns) {
    w = snprintf(buf + n, buflen - n, "/namespaces/%s", ns);
    if (w < 0 || (size_t)w >= buflen - n)
      return CTRAIN_E_TOOBIG;
    n += (size_t)w;
  }
  w = snprintf(buf + n, buflen - n, "/%s%s%s%s%s", gvr->resource, name ? "/" : "", name ? name : "",
               subresource ? "/" : "", subresource ? subresource : "");
  if (w < 0 || (size_t)w >= buflen - n)
    return CTRAIN_E_TOOBIG;
  return CTRAIN_OK;
}

/* Appends "&k=<escaped v>" (or "?k=..." first) to buf. */
static ctrain_err query_add(char *buf, size_t cap, const char *k, const char *v) {
  static const char hex[] = "0123456789ABCDEF";
  if (!v)
    return CTRAIN_OK;
  size_t n = strlen(buf);
  int w = snprintf(buf + n, cap - n, "%c%s=", strchr(buf, '?') ? '&' : '?', k);
  if (w < 0 || (size_t)w >= cap - n)
    return CTRAIN_E_TOOBIG;
  n += (size_t)w;
  for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
    int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                *p == '-' || *p == '.' || *p == '_' || *p == '~';
    if (n + (plain ? 1 : 3) >= cap)
      return CTRAIN_E_TOOBIG;
    if (plain) {
      buf[n++] = (char)*p;
    } else {
      buf[n++] = '%';
      buf[n++] = hex[*p >> 4];
      buf[n++] = hex[*p & 15];
    }
  }
  buf[n] = '\0';
  return CTRAIN_OK;
}

/* ------------------------------------------------------------------------ */
/* Handles */

static void handle_destroy(void *p) {
  handle_node *hn = p;
  if (!hn)
    return;
  pthread_mutex_lock(&hn->c->mu);
  if (hn->prev)
    hn->prev->next = hn->next;
  else
    hn->c->handles = hn->next;
  if (hn->next)
    hn->next->prev = hn->prev;
  pthread_mutex_unlock(&hn->c->mu);
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
  pthread_mutex_lock(&c->mu);
  hn->next = c->handles;
  if (c->handles)
    c->handles->prev = hn;
  c->handles = hn;
  pthread_mutex_unlock(&c->mu);
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
  if (!name_ok(sni) || !port[0])
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

typedef struct body_buf {
  char *p;
  size_t len, alloc, cap;
  int toobig;
} body_buf;

static ctrain_err buf_append(body_buf *b, const char *data, size_t n) {
  if (n > b->cap - b->len) {
    b->toobig = 1;
    return CTRAIN_E_TOOBIG;
  }
  if (b->len + n + 1 > b->alloc) {
    size_t want = b->alloc ? b->alloc : 16384;
    while (want < b->len + n + 1)
      want *= 2;
    char *np = realloc(b->p, want);
    if (!np)
      return CTRAIN_E_NOMEM;
    b->p = np;
    b->alloc = want;
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0';
  return CTRAIN_OK;
}

static size_t write_body(char *data, size_t size, size_t nmemb, void *ud) {
  return buf_append(ud, data, size * nmemb) ? 0 : size * nmemb;
}

/* Sets every option of one request on `h` (after curl_easy_reset): URL,
 * method, TLS, auth, timeouts. *hdrs is owned by the caller afterwards. */
static ctrain_err setup_handle(kube_client *c, CURL *h, const char *method, const char *path,
                               const char *content_type, const char *body, size_t body_len,
                               struct curl_slist **hdrs, char *curl_err, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  kube_config *cfg = c->cfg;
  char *url = NULL, *tok = NULL, *auth = NULL;
  char terr[256] = "";
  struct curl_slist *l = NULL, *nl = NULL;
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
      copy_str(st->message, sizeof(st->message), terr);
    goto out;
  }
  curl_easy_setopt(h, CURLOPT_URL, url);
  if (c->connect_to)
    curl_easy_setopt(h, CURLOPT_CONNECT_TO, c->connect_to);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
  curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->opts.connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
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

  if (!(nl = curl_slist_append(l, "Accept: application/json")))
    goto nomem;
  l = nl;
  if (tok[0]) {
    size_t alen = strlen(tok) + 32;
    auth = malloc(alen);
    if (!auth)
      goto nomem;
    snprintf(auth, alen, "Authorization: Bearer %s", tok);
    nl = curl_slist_append(l, auth);
    OPENSSL_cleanse(auth, alen);
    if (!nl)
      goto nomem;
    l = nl;
  }
  if (content_type) {
    char ct[128];
    snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
    if (!(nl = curl_slist_append(l, ct)))
      goto nomem;
    l = nl;
  }
  /* No "Expect: 100-continue" round trip for large bodies. */
  if (!(nl = curl_slist_append(l, "Expect:")))
    goto nomem;
  l = nl;
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);

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
  *hdrs = l;
  l = NULL;
  goto out;
nomem:
  result = CTRAIN_E_NOMEM;
out:
  curl_slist_free_all(l);
  if (tok) {
    OPENSSL_cleanse(tok, KUBE_CONFIG_MAX_TOKEN);
    free(tok);
  }
  free(auth);
  free(url);
  return result;
}

static int retry_after_header(CURL *h) {
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

ctrain_err kube_client_request(kube_client *c, const char *method, const char *path,
                               const char *content_type, const char *body, size_t body_len,
                               char **resp, size_t *resp_len, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  kube_status local;
  struct curl_slist *hdrs = NULL;
  body_buf b = {0};
  char curl_err[CURL_ERROR_SIZE];
  int idempotent = !strcmp(method, "GET");
  if (!st)
    st = &local;
  memset(st, 0, sizeof(*st));
  if (resp)
    *resp = NULL;
  if (resp_len)
    *resp_len = 0;
  CURL *h = thread_handle(c);
  if (!h) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (int attempt = 0;; attempt++) {
    free(b.p);
    memset(&b, 0, sizeof(b));
    b.cap = c->opts.max_body;
    curl_slist_free_all(hdrs);
    hdrs = NULL;
    curl_err[0] = '\0';
    kube_ratelimit_wait(&c->rl, -1);
    curl_easy_reset(h);
    if ((result =
             setup_handle(c, h, method, path, content_type, body, body_len, &hdrs, curl_err, st)))
      goto out;
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->opts.timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    st->attempts = attempt + 1;
    atomic_fetch_add(&c->requests, 1);
    CURLcode cc = curl_easy_perform(h);
    long code = 0, version = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(h, CURLINFO_HTTP_VERSION, &version);
    st->http_version = version == CURL_HTTP_VERSION_2_0   ? 20
                       : version == CURL_HTTP_VERSION_1_1 ? 11
                       : version == CURL_HTTP_VERSION_1_0 ? 10
                                                          : 0;
    int64_t delay = 0;
    if (cc != CURLE_OK) {
      result = b.toobig ? CTRAIN_E_TOOBIG : curl_to_err(cc);
      st->http_code = (int)code;
      snprintf(st->message, sizeof(st->message), "%s %s: %s", method, path,
               b.toobig ? "response body over the cap"
                        : (curl_err[0] ? curl_err : curl_easy_strerror(cc)));
      if (result != CTRAIN_E_NET || !idempotent || attempt >= c->opts.max_retries)
        goto out;
    } else {
      st->retry_after_s = retry_after_header(h);
      if (code >= 200 && code < 300) {
        st->http_code = (int)code;
        result = CTRAIN_OK;
        break;
      }
      kube_status_decode(b.p, b.len, (int)code, st);
      result = kube_status_to_err((int)code);
      if (!retryable_http((int)code) || attempt >= c->opts.max_retries)
        break;
      if (st->retry_after_s)
        delay = (int64_t)st->retry_after_s * 1000000000LL;
    }
    if (!delay) {
      delay = BACKOFF_BASE_NS << (attempt < 6 ? attempt : 6);
      if (delay > BACKOFF_CAP_NS)
        delay = BACKOFF_CAP_NS;
    }
    LOG_DEBUG("kube: %s %s: %s (HTTP %d), retry %d in %lld ms", method, path,
              ctrain_strerror(result), st->http_code, attempt + 1, (long long)(delay / 1000000));
    kube_sleep_ns(delay);
  }
  if (resp) {
    *resp = b.p;
    b.p = NULL;
  }
  if (resp_len)
    *resp_len = b.len;
out:
  curl_slist_free_all(hdrs);
  free(b.p);
  /* The handle keeps pointers to hdrs and our error buffer; clear them. */
  if (h) {
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
  }
  return result;
}

/* Runs a request and decodes a JSON response into *out (when out != NULL). */
static ctrain_err do_json(kube_client *c, const char *method, const char *path,
                          const char *content_type, const char *body, cJSON **out,
                          kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  char *resp = NULL;
  size_t len = 0;
  if (out)
    *out = NULL;
  result = kube_client_request(c, method, path, content_type, body, body ? strlen(body) : 0, &resp,
                               &len, st);
  if (result)
    goto out;
  if (out) {
    *out = cJSON_ParseWithLength(resp, len);
    if (!*out) {
      result = CTRAIN_E_PARSE;
      if (st)
        snprintf(st->message, sizeof(st->message), "%s %.900s: response is not JSON", method, path);
    }
  }
out:
  free(resp);
  return result;
}

#define PATH_CAP 8192

ctrain_err kube_client_get(kube_client *c, const kube_gvr *gvr, const char *ns, const char *name,
                           cJSON **out, kube_status *st) {
  char path[PATH_CAP];
  ctrain_err result = kube_client_path(gvr, ns, name, NULL, path, sizeof(path));
  if (result)
    return result;
  return do_json(c, "GET", path, NULL, NULL, out, st);
}

ctrain_err kube_client_list(kube_client *c, const kube_gvr *gvr, const char *ns,
                            const kube_list_opts *o, cJSON **out, kube_status *st) {
  char path[PATH_CAP], num[32];
  ctrain_err result = kube_client_path(gvr, ns, NULL, NULL, path, sizeof(path));
  if (result)
    return result;
  if (o) {
    if (o->limit > 0)
      snprintf(num, sizeof(num), "%ld", o->limit);
    if ((result = query_add(path, sizeof(path), "labelSelector", o->label_selector)) ||
        (result = query_add(path, sizeof(path), "fieldSelector", o->field_selector)) ||
        (result = query_add(path, sizeof(path), "limit", o->limit > 0 ? num : NULL)) ||
        (result = query_add(path, sizeof(path), "continue", o->continue_token)) ||
        (result = query_add(path, sizeof(path), "resourceVersion", o->resource_version)) ||
        (result = query_add(path, sizeof(path), "resourceVersionMatch", o->resource_version_match)))
      return result;
  }
  return do_json(c, "GET", path, NULL, NULL, out, st);
}

static ctrain_err add_write_opts(char *path, size_t cap, const kube_write_opts *o) {
  ctrain_err result = CTRAIN_OK;
  if (!o)
    return CTRAIN_OK;
  if ((result = query_add(path, cap, "fieldManager", o->field_manager)) ||
      (result = query_add(path, cap, "force", o->force ? "true" : NULL)) ||
      (result = query_add(path, cap, "dryRun", o->dry_run ? "All" : NULL)))
    return result;
  return CTRAIN_OK;
}

static ctrain_err send_obj(kube_client *c, const char *method, const kube_gvr *gvr, const char *ns,
                           const char *name, const char *sub, const cJSON *obj,
                           const kube_write_opts *o, cJSON **out, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  char path[PATH_CAP];
  char *body = NULL;
  if ((result = kube_client_path(gvr, ns, name, sub, path, sizeof(path))) ||
      (result = add_write_opts(path, sizeof(path), o)))
    goto out;
  body = cJSON_PrintUnformatted(obj);
  if (!body) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  result = do_json(c, method, path, "application/json", body, out, st);
out:
  free(body);
  return result;
}

ctrain_err kube_client_create(kube_client *c, const kube_gvr *gvr, const char *ns, const cJSON *obj,
                              const kube_write_opts *o, cJSON **out, kube_status *st) {
  return send_obj(c, "POST", gvr, ns, NULL, NULL, obj, o, out, st);
}

static const char *obj_name(const cJSON *obj) {
  return jstr(cJSON_GetObjectItemCaseSensitive(obj, "metadata"), "name");
}

ctrain_err kube_client_update(kube_client *c, const kube_gvr *gvr, const char *ns, const cJSON *obj,
                              const kube_write_opts *o, cJSON **out, kube_status *st) {
  const char *name = obj_name(obj);
  if (!name)
    return CTRAIN_E_INVAL;
  return send_obj(c, "PUT", gvr, ns, name, NULL, obj, o, out, st);
}

ctrain_err kube_client_update_status(kube_client *c, const kube_gvr *gvr, const char *ns,
                                     const cJSON *obj, const kube_write_opts *o, cJSON **out,
                                     kube_status *st) {
  const char *name = obj_name(obj);
  if (!name)
    return CTRAIN_E_INVAL;
  return send_obj(c, "PUT", gvr, ns, name, "status", obj, o, out, st);
}

ctrain_err kube_client_patch(kube_client *c, const kube_gvr *gvr, const char *ns, const char *name,
                             const char *subresource, kube_patch_type type, const char *patch,
                             const kube_write_opts *o, cJSON **out, kube_status *st) {
  static const char *const ctypes[] = {
      [KUBE_PATCH_MERGE] = "application/merge-patch+json",
      [KUBE_PATCH_JSON] = "application/json-patch+json",
      [KUBE_PATCH_STRATEGIC] = "application/strategic-merge-patch+json",
      [KUBE_PATCH_APPLY] = "application/apply-patch+yaml",
  };
  char path[PATH_CAP];
  ctrain_err result = CTRAIN_OK;
  if ((unsigned)type > KUBE_PATCH_APPLY || !patch || !name)
    return CTRAIN_E_INVAL;
  if (type == KUBE_PATCH_APPLY && (!o || !o->field_manager))
    return CTRAIN_E_INVAL; /* the apiserver insists on a field manager for apply */
  if ((result = kube_client_path(gvr, ns, name, subresource, path, sizeof(path))) ||
      (result = add_write_opts(path, sizeof(path), o)))
    return result;
  return do_json(c, "PATCH", path, ctypes[type], patch, out, st);
}

/* Prints the DeleteOptions for `o` into *body (owned by the caller), all of
 * them or none: a body that lost its preconditions or dryRun to a failed
 * allocation would delete what the caller meant to protect, so any failure
 * is CTRAIN_E_NOMEM and nothing is sent. */
static ctrain_err delete_body(const kube_delete_opts *o, char **body) {
  ctrain_err result = CTRAIN_E_NOMEM;
  cJSON *opts = cJSON_CreateObject(), *pre = NULL, *dr = NULL, *all = NULL;
  *body = NULL;
  if (!opts || !cJSON_AddStringToObject(opts, "kind", "DeleteOptions") ||
      !cJSON_AddStringToObject(opts, "apiVersion", "v1"))
    goto out;
  if (o->propagation_policy &&
      !cJSON_AddStringToObject(opts, "propagationPolicy", o->propagation_policy))
    goto out;
  if (o->grace_period_seconds >= 0 &&
      !cJSON_AddNumberToObject(opts, "gracePeriodSeconds", (double)o->grace_period_seconds))
    goto out;
  if (o->precondition_uid || o->precondition_rv) {
    if (!(pre = cJSON_AddObjectToObject(opts, "preconditions")))
      goto out;
    if (o->precondition_uid && !cJSON_AddStringToObject(pre, "uid", o->precondition_uid))
      goto out;
    if (o->precondition_rv && !cJSON_AddStringToObject(pre, "resourceVersion", o->precondition_rv))
      goto out;
  }
  if (o->dry_run) {
    if (!(dr = cJSON_AddArrayToObject(opts, "dryRun")) || !(all = cJSON_CreateString("All")) ||
        !cJSON_AddItemToArray(dr, all))
      goto out;
    all = NULL; /* dr owns it */
  }
  *body = cJSON_PrintUnformatted(opts);
  if (*body)
    result = CTRAIN_OK;
out:
  cJSON_Delete(all);
  cJSON_Delete(opts);
  return result;
}

ctrain_err kube_client_delete(kube_client *c, const kube_gvr *gvr, const char *ns, const char *name,
                              const kube_delete_opts *o, cJSON **out, kube_status *st) {
  ctrain_err result = CTRAIN_OK;
  char path[PATH_CAP];
  char *body = NULL;
  if (out)
    *out = NULL;
  if ((result = kube_client_path(gvr, ns, name, NULL, path, sizeof(path))))
    goto out;
  if (o && (result = delete_body(o, &body))) {
    if (st) {
      memset(st, 0, sizeof(*st));
      snprintf(st->message, sizeof(st->message), "DELETE %.900s: out of memory for DeleteOptions",
               path);
    }
    goto out;
  }
  result = do_json(c, "DELETE", path, body ? "application/json" : NULL, body, out, st);
out:
  free(body);
  return result;
}

/* ------------------------------------------------------------------------ */
/* Streaming */

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
  pthread_mutex_lock(&k->mu);
  if (k->multi)
    curl_multi_wakeup(k->multi);
  pthread_mutex_unlock(&k->mu);
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
  body_buf err_body; /* non-2xx answers: kept for the Status */
  ctrain_err stop;   /* why fn stopped the transfer */
  int64_t last_byte_ns;
} stream_ctx;

static size_t write_stream(char *data, size_t size, size_t nmemb, void *ud) {
  stream_ctx *s = ud;
  size_t n = size * nmemb;
  long code = 0;
  s->last_byte_ns = ctrain_mono_ns();
  curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
  if (code < 200 || code >= 300) {
    if (buf_append(&s->err_body, data, n) == CTRAIN_E_NOMEM)
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
  s.err_body.cap = ERR_BODY_CAP;
  s.fn = fn;
  s.ud = ud;
  h = curl_easy_init();
  m = curl_multi_init();
  if (!h || !m) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  s.h = h;
  kube_ratelimit_wait(&c->rl, -1);
  if ((result = setup_handle(c, h, "GET", path, NULL, NULL, 0, &hdrs, curl_err, st)))
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
    pthread_mutex_lock(&cancel->mu);
    cancel->multi = m;
    pthread_mutex_unlock(&cancel->mu);
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
    result = curl_to_err(cc);
    st->http_code = (int)code;
    snprintf(st->message, sizeof(st->message), "GET %s: %s", path,
             curl_err[0] ? curl_err : curl_easy_strerror(cc));
    goto out;
  }
  st->retry_after_s = retry_after_header(h);
  if (code < 200 || code >= 300) {
    kube_status_decode(s.err_body.p, s.err_body.len, (int)code, st);
    result = kube_status_to_err((int)code);
    goto out;
  }
  st->http_code = (int)code;
out:
  if (registered) {
    pthread_mutex_lock(&cancel->mu);
    cancel->multi = NULL;
    pthread_mutex_unlock(&cancel->mu);
  }
  if (added)
    curl_multi_remove_handle(m, h);
  curl_multi_cleanup(m);
  curl_easy_cleanup(h);
  curl_slist_free_all(hdrs);
  free(s.err_body.p);
  return result;
}
