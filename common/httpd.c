/* httpd.c - the small HTTP/1.x server; see ctrain/httpd.h. */
#include "ctrain/httpd.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctrain/clock.h"
#include "ctrain/log.h"

#define METHOD_MAX  16
#define HEADERS_MAX 16384 /* extra response header bytes */

/* ---- the request parser -------------------------------------------------- */

size_t ctrain_httpd_head_len(const char *buf, size_t len) {
  for (size_t i = 0; i < len; i++) {
    if (buf[i] != '\n')
      continue;
    if (i + 1 < len && buf[i + 1] == '\n')
      return i + 2;
    if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
      return i + 3;
  }
  return 0;
}

/* Request line `METHOD SP target [SP version]`; the header lines follow.
 * Lenient as the servers it replaces: leading blanks and a missing version
 * are accepted, the version is not checked. */
ctrain_err ctrain_httpd_parse(char *buf, size_t len, ctrain_httpd_request *req) {
  buf[len] = '\0';
  if (memchr(buf, '\0', len))
    return CTRAIN_E_PARSE;
  char *p = buf, *eol = strchr(buf, '\n');
  req->headers = eol ? eol + 1 : buf + len;
  if (eol) {
    *eol = '\0';
    if (eol > buf && eol[-1] == '\r')
      eol[-1] = '\0';
  }
  while (*p == ' ' || *p == '\t')
    p++;
  size_t m = strcspn(p, " \t");
  if (!m || m > METHOD_MAX || !p[m])
    return CTRAIN_E_PARSE;
  for (size_t i = 0; i < m; i++)
    if (!isgraph((unsigned char)p[i]))
      return CTRAIN_E_PARSE;
  p[m] = '\0';
  req->method = p;
  p += m + 1;
  while (*p == ' ' || *p == '\t')
    p++;
  size_t t = strcspn(p, " \t");
  if (!t)
    return CTRAIN_E_PARSE;
  p[t] = '\0';
  req->path = p;
  char *q = strchr(p, '?');
  if (q == p) /* no path */
    return CTRAIN_E_PARSE;
  if (q) {
    *q = '\0';
    req->query = q + 1;
  } else {
    req->query = p + t; /* "" */
  }
  return CTRAIN_OK;
}

ctrain_err ctrain_httpd_header(const ctrain_httpd_request *req, const char *name, char *out,
                               size_t outlen) {
  size_t nl = strlen(name);
  for (const char *line = req->headers; line && *line;) {
    const char *next = strchr(line, '\n');
    if (!strncasecmp(line, name, nl) && line[nl] == ':') {
      const char *v = line + nl + 1, *end;
      while (*v == ' ' || *v == '\t')
        v++;
      end = next ? next : v + strlen(v);
      while (end > v && (end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
        end--;
      if ((size_t)(end - v) >= outlen)
        return CTRAIN_E_TOOBIG;
      memcpy(out, v, (size_t)(end - v));
      out[end - v] = '\0';
      return CTRAIN_OK;
    }
    line = next ? next + 1 : NULL;
  }
  return CTRAIN_E_NOTFOUND;
}

/* ---- responses ----------------------------------------------------------- */

ctrain_err ctrain_httpd_add_header(ctrain_httpd_response *resp, const char *name,
                                   const char *value) {
  if (strpbrk(name, "\r\n:") || strpbrk(value, "\r\n"))
    return CTRAIN_E_INVAL;
  return ctrain_buf_printf(&resp->headers, "%s: %s\r\n", name, value);
}

ctrain_err ctrain_httpd_text(ctrain_httpd_response *resp, int status, const char *text) {
  resp->status = status;
  resp->content_type = "text/plain";
  ctrain_buf_clear(&resp->body);
  return ctrain_buf_append(&resp->body, text, strlen(text));
}

static const char *reason(int code) {
  switch (code) {
  case 200:
    return "OK";
  case 204:
    return "No Content";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 403:
    return "Forbidden";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 413:
    return "Content Too Large";
  case 431:
    return "Request Header Fields Too Large";
  case 500:
    return "Internal Server Error";
  case 503:
    return "Service Unavailable";
  default:
    return code < 400 ? "OK" : code < 500 ? "Client Error" : "Server Error";
  }
}

/* ---- the server ---------------------------------------------------------- */

typedef enum {
  CONN_READ,  /* reading the request head */
  CONN_WRITE, /* sending the response */
  CONN_DRAIN, /* answered, our side shut: reading what the client still sends */
} conn_state;

typedef struct {
  int fd; /* -1: free slot */
  conn_state state;
  int64_t born;     /* monotonic ns of the accept */
  int64_t deadline; /* monotonic ns */
  size_t len;       /* request bytes read; while draining, bytes discarded */
  char *req;        /* req_max + 1 bytes */
  char *out;        /* the whole response, once the request is complete */
  size_t olen, off; /* response length, bytes sent */
} conn;

struct ctrain_httpd {
  int fd;
  int wake[2]; /* self-pipe: stop writes, the loop wakes */
  pthread_t thread;
  int started;
  ctrain_httpd_config cfg; /* defaults filled in */
  char name[64];
  conn *conns;          /* cfg.max_conns */
  char *reqmem;         /* their request buffers, one allocation */
  struct pollfd *pfds;  /* 2 + max_conns */
  int *idx;             /* pfds[2 + k] is conns[idx[k]] */
  int64_t accept_after; /* out of descriptors: accept again from then (monotonic ns) */
  int64_t shed;         /* connections dropped to make room (debug logs) */
};

/* The whole response into c->out (NULL when out of memory: the connection
 * is closed unanswered). */
static void serialize(conn *c, ctrain_httpd_response *r, int head_only) {
  ctrain_buf b;
  ctrain_buf_init(&b, 0);
  c->out = NULL;
  if (!ctrain_buf_printf(&b,
                         "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                         "Cache-Control: no-store\r\nConnection: close\r\n",
                         r->status, reason(r->status),
                         r->content_type ? r->content_type : "text/plain", r->body.len) &&
      !ctrain_buf_append(&b, r->headers.p ? r->headers.p : "", r->headers.len) &&
      !ctrain_buf_append(&b, "\r\n", 2) &&
      (head_only || !ctrain_buf_append(&b, r->body.p ? r->body.p : "", r->body.len)))
    c->out = ctrain_buf_take(&b, &c->olen);
  c->off = 0;
  c->state = CONN_WRITE;
  ctrain_buf_free(&b);
}

/* The server's own short answers (400, 500, 431). The status is set before
 * the body is appended, so a body that could not be allocated still leaves a
 * well-formed answer (an empty body) on a connection that closes after it:
 * the result is dropped on purpose. */
static void reply(ctrain_httpd_response *resp, int status, const char *text) {
  ctrain_ignore(ctrain_httpd_text(resp, status, text));
}

/* A complete head of hl bytes in c->req: parse, ask the handler, serialize. */
static void handle(ctrain_httpd *s, conn *c, size_t hl) {
  ctrain_httpd_request req;
  ctrain_httpd_response resp = {0};
  int head_only = 0;
  ctrain_buf_init(&resp.body, s->cfg.body_max);
  ctrain_buf_init(&resp.headers, HEADERS_MAX);
  if (ctrain_httpd_parse(c->req, hl, &req)) {
    reply(&resp, 400, "bad request\n");
  } else {
    s->cfg.handler(s->cfg.ud, &req, &resp);
    head_only = !strcmp(req.method, "HEAD");
    if (!resp.status) {
      ctrain_buf_clear(&resp.headers);
      reply(&resp, 500, "error\n");
    }
  }
  serialize(c, &resp, head_only);
  ctrain_buf_free(&resp.body);
  ctrain_buf_free(&resp.headers);
}

static void conn_close(conn *c) {
  if (c->fd >= 0)
    close(c->fd);
  free(c->out);
  c->fd = -1;
  c->state = CONN_READ;
  c->out = NULL;
  c->len = c->olen = c->off = 0;
}

/* Reads what is there; once the head is complete (or over the cap),
 * prepares the response. -1: close the connection. */
static int conn_read(ctrain_httpd *s, conn *c) {
  size_t max = s->cfg.req_max;
  ssize_t r = recv(c->fd, c->req + c->len, max - c->len, 0);
  if (r < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  if (r == 0)
    return -1;
  c->len += (size_t)r;
  size_t hl = ctrain_httpd_head_len(c->req, c->len);
  if (hl) {
    handle(s, c, hl);
    return c->out ? 0 : -1;
  }
  if (c->len >= max) {
    ctrain_httpd_response resp = {0};
    ctrain_buf_init(&resp.body, 0);
    ctrain_buf_init(&resp.headers, 0);
    reply(&resp, 431, "too large\n");
    serialize(c, &resp, 0);
    ctrain_buf_free(&resp.body);
    return c->out ? 0 : -1;
  }
  return 0;
}

/* Sends what the socket takes. Once all is sent, shuts our side (the FIN
 * follows the answer) and drains: a close with unread bytes (the rest of
 * an oversized head, a body) would be a reset, and a reset makes the
 * client's kernel drop the answer it has not read yet. -1: failed (close). */
static int conn_write(conn *c) {
  ssize_t w = send(c->fd, c->out + c->off, c->olen - c->off, MSG_NOSIGNAL);
  if (w < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  c->off += (size_t)w;
  if (c->off < c->olen)
    return 0;
  if (shutdown(c->fd, SHUT_WR))
    return -1;
  free(c->out);
  c->out = NULL;
  c->state = CONN_DRAIN;
  c->len = 0;
  int64_t drain = ctrain_mono_ns() + (int64_t)CTRAIN_HTTPD_DRAIN_MS * 1000000;
  if (drain < c->deadline)
    c->deadline = drain;
  return 0;
}

/* Discards what the client still sends; -1 at its end (or past the
 * budget): close. */
static int conn_drain(conn *c) {
  char sink[4096];
  ssize_t r = recv(c->fd, sink, sizeof(sink), 0);
  if (r < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  c->len += (size_t)r;
  return r == 0 || c->len > CTRAIN_HTTPD_DRAIN_MAX ? -1 : 0;
}

/* How readily a connection is shed to make room, lowest first: answered
 * and draining, then silent (nothing read), then a partial head, then one
 * being answered. */
static int shed_rank(const conn *c) {
  if (c->state == CONN_DRAIN)
    return 0;
  if (c->state == CONN_READ)
    return c->len == 0 ? 1 : 2;
  return 3;
}

/* The connection to shed for a new one: of those older than the grace
 * time, the lowest rank, the oldest within it; NULL when none is old
 * enough. *ready (optional) gets when the youngest-to-be-eligible one will
 * be, INT64_MAX when none. */
static conn *pick_victim(ctrain_httpd *s, int64_t now, int64_t *ready) {
  conn *v = NULL;
  int64_t grace = (int64_t)CTRAIN_HTTPD_GRACE_MS * 1000000, soonest = INT64_MAX;
  for (int i = 0; i < s->cfg.max_conns; i++) {
    conn *c = &s->conns[i];
    if (c->fd < 0)
      continue;
    if (now - c->born < grace) {
      if (c->born + grace < soonest)
        soonest = c->born + grace;
      continue;
    }
    if (!v || shed_rank(c) < shed_rank(v) || (shed_rank(c) == shed_rank(v) && c->born < v->born))
      v = c;
  }
  if (ready)
    *ready = v ? now : soonest;
  return v;
}

/* Accepts what waits in the backlog, at most a quarter of the table per
 * round so that the connections just accepted are read before any is shed;
 * with the table full, each new one takes the slot of pick_victim's. */
static void accept_some(ctrain_httpd *s) {
  int batch = s->cfg.max_conns / 4 > 0 ? s->cfg.max_conns / 4 : 1;
  for (int n = 0; n < batch; n++) {
    int64_t now = ctrain_mono_ns();
    conn *c = NULL, *victim = NULL;
    for (int i = 0; i < s->cfg.max_conns && !c; i++)
      if (s->conns[i].fd < 0)
        c = &s->conns[i];
    if (!c && !(victim = pick_victim(s, now, NULL)))
      return;
    int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* The listening socket stays readable: pause, or the loop spins. */
        LOG_WARN("%s: accept: %s; pausing %d ms", s->name, strerror(errno),
                 CTRAIN_HTTPD_ACCEPT_PAUSE_MS);
        s->accept_after = now + (int64_t)CTRAIN_HTTPD_ACCEPT_PAUSE_MS * 1000000;
      }
      return;
    }
    if (victim) {
      conn_close(victim);
      c = victim;
      if (!(s->shed++ & 1023))
        LOG_DEBUG("%s: connection table full (%d): shedding the oldest idle ones (%" PRId64
                  " so far)",
                  s->name, s->cfg.max_conns, s->shed);
    }
    c->fd = fd;
    c->state = CONN_READ;
    c->len = 0;
    c->born = now;
    c->deadline = now + (int64_t)s->cfg.deadline_ms * 1000000;
  }
}

static void *loop(void *arg) {
  ctrain_httpd *s = arg;
  struct pollfd *p = s->pfds;
  for (;;) {
    int n = 2, busy = 0;
    int64_t now = ctrain_mono_ns(), next = INT64_MAX;
    p[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    for (int i = 0; i < s->cfg.max_conns; i++) {
      conn *c = &s->conns[i];
      if (c->fd < 0)
        continue;
      if (now >= c->deadline) { /* slow client: drop it */
        conn_close(c);
        continue;
      }
      busy++;
      if (c->deadline < next)
        next = c->deadline;
      s->idx[n - 2] = i;
      p[n++] = (struct pollfd){.fd = c->fd, .events = c->state == CONN_WRITE ? POLLOUT : POLLIN};
    }
    /* Full: new connections wait in the backlog until a slot frees or a
     * connection has had its grace time and may be shed. */
    int listen = now >= s->accept_after;
    if (!listen && s->accept_after < next)
      next = s->accept_after;
    if (listen && busy >= s->cfg.max_conns) {
      int64_t ready = INT64_MAX;
      pick_victim(s, now, &ready);
      listen = ready <= now;
      if (!listen && ready < next)
        next = ready;
    }
    p[1] = (struct pollfd){.fd = listen ? s->fd : -1, .events = POLLIN};
    int timeout = next == INT64_MAX ? -1 : (int)((next - now) / 1000000 + 1);
    if (poll(p, (nfds_t)n, timeout) < 0) {
      if (errno == EINTR)
        continue;
      LOG_WARN("%s: poll: %s", s->name, strerror(errno));
      break;
    }
    if (p[0].revents)
      break;
    for (int k = 2; k < n; k++) {
      conn *c = &s->conns[s->idx[k - 2]];
      if (!p[k].revents)
        continue;
      int rc;
      if (c->state == CONN_WRITE)
        rc = conn_write(c);
      else if (c->state == CONN_DRAIN)
        rc = conn_drain(c);
      else if (!(rc = conn_read(s, c)) && c->state == CONN_WRITE)
        rc = conn_write(c); /* the answer is ready: usually it fits at once */
      if (rc || (p[k].revents & POLLNVAL) || ((p[k].revents & POLLERR) && !(p[k].revents & POLLIN)))
        conn_close(c);
    }
    if (p[1].revents & POLLIN)
      accept_some(s);
  }
  return NULL;
}

/* A listening socket on host:port; NULL host: IPv6 any with IPv4 mapped,
 * else IPv4 any. -1 with errno (-2: the host does not resolve), the reason
 * in why. */
static int listen_on(const char *host, int port, char *why, size_t whylen) {
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
  int fd = -1, one = 1, zero = 0;
  if (!host) {
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    a6.sin6_addr = in6addr_any;
    fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && !setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) &&
        !setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) &&
        !bind(fd, (struct sockaddr *)&a6, sizeof(a6)) && !listen(fd, SOMAXCONN))
      return fd;
    if (fd >= 0)
      close(fd);
    host = "0.0.0.0"; /* no IPv6 here */
  }
  hints.ai_family = AF_UNSPEC;
  int gai = getaddrinfo(host, ps, &hints, &ai);
  if (gai) {
    snprintf(why, whylen, "%s: %s", host, gai_strerror(gai));
    return -2;
  }
  fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
    int e = errno;
    snprintf(why, whylen, "%s:%d: %s", host, port, strerror(e));
    if (fd >= 0)
      close(fd);
    freeaddrinfo(ai);
    errno = e;
    return -1;
  }
  freeaddrinfo(ai);
  return fd;
}

ctrain_err ctrain_httpd_start(const ctrain_httpd_config *cfg, ctrain_httpd **out, int *port_out,
                              char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_httpd *s = NULL;
  char why[512] = "";
  const char *name = cfg->name ? cfg->name : "http server";
  if (!cfg->handler || cfg->port < 0 || cfg->port > 65535 || cfg->max_conns < 0 ||
      cfg->deadline_ms < 0)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "%s: bad configuration", name);
  s = calloc(1, sizeof(*s));
  if (!s)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", name);
  s->fd = s->wake[0] = s->wake[1] = -1;
  s->cfg = *cfg;
  snprintf(s->name, sizeof(s->name), "%s", name);
  if (!s->cfg.max_conns)
    s->cfg.max_conns = CTRAIN_HTTPD_MAX_CONNS;
  if (!s->cfg.deadline_ms)
    s->cfg.deadline_ms = CTRAIN_HTTPD_DEADLINE_MS;
  if (!s->cfg.req_max)
    s->cfg.req_max = CTRAIN_HTTPD_REQ_MAX;
  if (!s->cfg.body_max)
    s->cfg.body_max = CTRAIN_HTTPD_BODY_MAX;
  int nc = s->cfg.max_conns;
  s->conns = calloc((size_t)nc, sizeof(*s->conns));
  for (int i = 0; s->conns && i < nc; i++)
    s->conns[i].fd = -1;
  s->reqmem = calloc((size_t)nc, s->cfg.req_max + 1);
  s->pfds = calloc((size_t)nc + 2, sizeof(*s->pfds));
  s->idx = calloc((size_t)nc, sizeof(*s->idx));
  if (!s->conns || !s->reqmem || !s->pfds || !s->idx)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", name);
  for (int i = 0; i < nc; i++)
    s->conns[i].req = s->reqmem + (size_t)i * (s->cfg.req_max + 1);
  s->fd = listen_on(cfg->bind_host, cfg->port, why, sizeof(why));
  if (s->fd < 0)
    CTRAIN_FAIL(s->fd == -2 ? CTRAIN_E_INVAL : CTRAIN_E_NET, "%s on port %d: %s", name, cfg->port,
                why);
  if (port_out) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(s->fd, (struct sockaddr *)&ss, &sl))
      CTRAIN_FAIL(CTRAIN_E_NET, "%s: getsockname: %s", name, strerror(errno));
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
  }
  if (fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK) ||
      pipe2(s->wake, O_CLOEXEC | O_NONBLOCK))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: %s", name, strerror(errno));
  if ((errno = pthread_create(&s->thread, NULL, loop, s)))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: thread: %s", name, strerror(errno));
  s->started = 1;
  *out = s;
  s = NULL;
out:
  ctrain_httpd_stop(s);
  return result;
}

void ctrain_httpd_stop(ctrain_httpd *s) {
  if (!s)
    return;
  if (s->started) {
    if (write(s->wake[1], "x", 1) < 0)
      LOG_WARN("%s: wake: %s", s->name, strerror(errno));
    pthread_join(s->thread, NULL);
  }
  for (int i = 0; s->conns && i < s->cfg.max_conns; i++)
    conn_close(&s->conns[i]);
  if (s->fd >= 0)
    close(s->fd);
  if (s->wake[0] >= 0)
    close(s->wake[0]);
  if (s->wake[1] >= 0)
    close(s->wake[1]);
  if (s->reqmem) /* requests may have held credentials */
    explicit_bzero(s->reqmem, (size_t)s->cfg.max_conns * (s->cfg.req_max + 1));
  free(s->conns);
  free(s->reqmem);
  free(s->pfds);
  free(s->idx);
  free(s);
}
