/* http.c - /metrics, /healthz, /readyz for ctrain-controller; see controller/http.h. */
#include "controller/http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctrain/log.h"

#define REQ_MAX      8192
#define REQ_DEADLINE 5000 /* ms */
#define METRICS_MAX  (4u << 20)

struct ctl_http {
  int fd;
  int wake[2]; /* self-pipe: stop() writes, the accept loop wakes */
  pthread_t thread;
  int started;
  ctl_http_handlers h;
};

static void respond(int fd, int code, const char *reason, const char *ctype, const char *body,
                    size_t blen) {
  char head[256];
  int n = snprintf(head, sizeof(head),
                   "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n",
                   code, reason, ctype, blen);
  if (n > 0 && write(fd, head, (size_t)n) < 0)
    return;
  size_t off = 0;
  while (off < blen) {
    ssize_t w = write(fd, body + off, blen - off);
    if (w <= 0)
      return;
    off += (size_t)w;
  }
}

/* Reads the request head (up to the blank line) with a deadline and a cap. */
static int read_request(int fd, char *buf, size_t cap) {
  size_t len = 0;
  while (len + 1 < cap) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, REQ_DEADLINE) <= 0)
      return -1;
    ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r <= 0)
      return -1;
    len += (size_t)r;
    buf[len] = '\0';
    if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
      return 0;
  }
  return -1;
}

static void serve(ctl_http *s, int fd) {
  char req[REQ_MAX];
  if (read_request(fd, req, sizeof(req)))
    return;
  char method[8] = "", path[256] = "";
  if (sscanf(req, "%7s %255s", method, path) != 2) {
    respond(fd, 400, "Bad Request", "text/plain", "bad request\n", 12);
    return;
  }
  char *q = strchr(path, '?');
  if (q)
    *q = '\0';
  if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
    respond(fd, 405, "Method Not Allowed", "text/plain", "method not allowed\n", 19);
  } else if (!strcmp(path, "/healthz") || !strcmp(path, "/livez")) {
    respond(fd, 200, "OK", "text/plain", "ok\n", 3);
  } else if (!strcmp(path, "/readyz")) {
    if (!s->h.ready || s->h.ready(s->h.ud))
      respond(fd, 200, "OK", "text/plain", "ok\n", 3);
    else
      respond(fd, 503, "Service Unavailable", "text/plain", "not ready\n", 10);
  } else if (!strcmp(path, "/metrics") && s->h.render_metrics) {
    ctrain_buf b;
    ctrain_buf_init(&b, METRICS_MAX);
    if (s->h.render_metrics(s->h.ud, &b) == CTRAIN_OK)
      respond(fd, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.len);
    else
      respond(fd, 500, "Internal Server Error", "text/plain", "error\n", 6);
    ctrain_buf_free(&b);
  } else {
    respond(fd, 404, "Not Found", "text/plain", "not found\n", 10);
  }
}

static void *loop(void *arg) {
  ctl_http *s = arg;
  for (;;) {
    struct pollfd p[2] = {{.fd = s->fd, .events = POLLIN}, {.fd = s->wake[0], .events = POLLIN}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (p[1].revents)
      break;
    if (!(p[0].revents & POLLIN))
      continue;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0)
      continue;
    serve(s, c);
    close(c);
  }
  return NULL;
}

ctrain_err ctl_http_start(const char *addr, const ctl_http_handlers *h, ctl_http **out,
                          int *port_out, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctl_http *s = NULL;
  struct addrinfo *ai = NULL;
  char host[256] = "", port[16] = "";
  const char *colon = strrchr(addr, ':');
  if (colon) {
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof(host) || strlen(colon + 1) >= sizeof(port)) {
      snprintf(err, errlen, "--metrics-bind-address: '%s' is too long", addr);
      return CTRAIN_E_INVAL;
    }
    memcpy(host, addr, hl);
    host[hl] = '\0';
    snprintf(port, sizeof(port), "%s", colon + 1);
  } else {
    snprintf(port, sizeof(port), "%s", addr);
  }
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
  if (gai) {
    snprintf(err, errlen, "--metrics-bind-address '%s': %s", addr, gai_strerror(gai));
    return CTRAIN_E_INVAL;
  }
  s = calloc(1, sizeof(*s));
  if (!s) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  s->fd = -1;
  s->wake[0] = s->wake[1] = -1;
  s->h = *h;
  s->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  if (s->fd < 0 || setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
      bind(s->fd, ai->ai_addr, ai->ai_addrlen) || listen(s->fd, 64)) {
    snprintf(err, errlen, "metrics server on '%s': %s", addr, strerror(errno));
    result = CTRAIN_E_NET;
    goto out;
  }
  if (port_out) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    getsockname(s->fd, (struct sockaddr *)&ss, &sl);
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
  }
  if (pipe(s->wake) || pthread_create(&s->thread, NULL, loop, s)) {
    snprintf(err, errlen, "metrics server: %s", strerror(errno));
    result = CTRAIN_E_IO;
    goto out;
  }
  s->started = 1;
  *out = s;
  s = NULL;
out:
  if (ai)
    freeaddrinfo(ai);
  if (s)
    ctl_http_stop(s);
  return result;
}

void ctl_http_stop(ctl_http *s) {
  if (!s)
    return;
  if (s->started) {
    if (write(s->wake[1], "x", 1) < 0)
      LOG_WARN("metrics server: wake: %s", strerror(errno));
    pthread_join(s->thread, NULL);
  }
  if (s->fd >= 0)
    close(s->fd);
  if (s->wake[0] >= 0)
    close(s->wake[0]);
  if (s->wake[1] >= 0)
    close(s->wake[1]);
  free(s);
}
