/* http.c - /metrics, /healthz, /readyz for ctrain-controller; see controller/http.h. */
#include "controller/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/httpd.h"

#define REQ_MAX      8192
#define REQ_DEADLINE 5000 /* ms */
#define METRICS_MAX  (4u << 20)

struct ctl_http {
  ctrain_httpd *httpd;
  ctl_http_handlers h;
};

/* A short text answer. The status is set before the body is appended, so a
 * body that could not be allocated still leaves a well-formed answer (an
 * empty body, its Content-Length 0) on a connection that closes after it:
 * the result is dropped on purpose. */
static void reply(ctrain_httpd_response *resp, int status, const char *text) {
  ctrain_ignore(ctrain_httpd_text(resp, status, text));
}

static void handle(void *ud, const ctrain_httpd_request *req, ctrain_httpd_response *resp) {
  ctl_http *s = ud;
  if (strcmp(req->method, "GET") && strcmp(req->method, "HEAD")) {
    reply(resp, 405, "method not allowed\n");
    /* Without the Allow line (out of memory) the 405 still says no. */
    ctrain_ignore(ctrain_httpd_add_header(resp, "Allow", "GET, HEAD"));
  } else if (!strcmp(req->path, "/healthz") || !strcmp(req->path, "/livez")) {
    reply(resp, 200, "ok\n");
  } else if (!strcmp(req->path, "/readyz")) {
    if (!s->h.ready || s->h.ready(s->h.ud))
      reply(resp, 200, "ok\n");
    else
      reply(resp, 503, "not ready\n");
  } else if (!strcmp(req->path, "/metrics") && s->h.render_metrics) {
    if (s->h.render_metrics(s->h.ud, &resp->body) == CTRAIN_OK) {
      resp->status = 200;
      resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    } else {
      reply(resp, 500, "error\n");
    }
  } else {
    reply(resp, 404, "not found\n");
  }
}

/* "host:port", ":port" or "port" (a host in brackets for IPv6) into host
 * (empty: every interface) and port. */
static ctrain_err split_addr(const char *addr, char *host, size_t hostlen, int *port) {
  const char *colon = strrchr(addr, ':'), *ps = colon ? colon + 1 : addr;
  host[0] = '\0';
  if (colon) {
    const char *h = addr, *he = colon;
    if (*h == '[' && he > h && he[-1] == ']')
      h++, he--;
    if ((size_t)(he - h) >= hostlen)
      return CTRAIN_E_INVAL;
    memcpy(host, h, (size_t)(he - h));
    host[he - h] = '\0';
  }
  char *end = NULL;
  long p = strtol(ps, &end, 10);
  if (!*ps || *end || p < 0 || p > 65535)
    return CTRAIN_E_INVAL;
  *port = (int)p;
  return CTRAIN_OK;
}

ctrain_err ctl_http_start(const char *addr, const ctl_http_handlers *h, ctl_http **out,
                          int *port_out, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctl_http *s = NULL;
  char host[256], why[512] = "";
  int port = 0;
  if (split_addr(addr, host, sizeof(host), &port)) {
    snprintf(err, errlen, "--metrics-bind-address: '%s' is not host:port", addr);
    return CTRAIN_E_INVAL;
  }
  s = calloc(1, sizeof(*s));
  if (!s)
    return CTRAIN_E_NOMEM;
  s->h = *h;
  ctrain_httpd_config hc = {.name = "metrics server",
                            .bind_host = host[0] ? host : NULL,
                            .port = port,
                            .deadline_ms = REQ_DEADLINE,
                            .req_max = REQ_MAX,
                            .body_max = METRICS_MAX,
                            .handler = handle,
                            .ud = s};
  result = ctrain_httpd_start(&hc, &s->httpd, port_out, why, sizeof(why));
  if (result) {
    snprintf(err, errlen, "--metrics-bind-address '%s': %s", addr, why);
    free(s);
    return result;
  }
  *out = s;
  return CTRAIN_OK;
}

void ctl_http_stop(ctl_http *s) {
  if (!s)
    return;
  ctrain_httpd_stop(s->httpd);
  free(s);
}
