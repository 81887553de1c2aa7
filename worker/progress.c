/* progress.c - the progress port's server and renderers; see progress.h. */
#include "worker/progress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctrain/clock.h"
#include "ctrain/log.h"

void progress_snapshot_init(progress_snapshot *s) {
  memset(s, 0, sizeof(*s));
  s->state = PROGRESS_STARTING;
  s->samples_per_sec = s->loss = s->accuracy = NAN;
  s->val_loss = s->val_accuracy = NAN;
  s->step_ms = s->median_ms = s->slowest_ratio = NAN;
  s->slowest_rank = -1;
  s->backup_step = -1;
}

void progress_read_token(const char *job_token, char out[PROGRESS_TOKEN_HEX + 1]) {
  unsigned char mac[32];
  unsigned int mlen = 0;
  static const char hex[] = "0123456789abcdef";
  HMAC(EVP_sha256(), job_token, (int)strlen(job_token), (const unsigned char *)PROGRESS_READ_LABEL,
       strlen(PROGRESS_READ_LABEL), mac, &mlen);
  for (unsigned i = 0; i < 32; i++) {
    out[2 * i] = hex[mac[i] >> 4];
    out[2 * i + 1] = hex[mac[i] & 15];
  }
  out[PROGRESS_TOKEN_HEX] = '\0';
}

static const char *state_name(progress_state s) {
  switch (s) {
  case PROGRESS_TRAINING:
    return "Training";
  case PROGRESS_SUCCEEDED:
    return "Succeeded";
  case PROGRESS_FAILED:
    return "Failed";
  default:
    return "Starting";
  }
}

/* A JSON number, or null when not finite. */
static ctrain_err json_num(ctrain_buf *b, const char *key, double v, int decimals) {
  ctrain_err result = ctrain_buf_printf(b, ",\"%s\":", key);
  if (result)
    return result;
  if (!isfinite(v))
    return ctrain_buf_append(b, "null", 4);
  char num[64];
  if (fabs(v) < 1e9)
    snprintf(num, sizeof(num), "%.*f", decimals, v);
  else /* a diverged loss: no 300-digit number */
    snprintf(num, sizeof(num), "%.6e", v);
  return ctrain_buf_append(b, num, strlen(num));
}

ctrain_err progress_render_json(const progress_snapshot *s, ctrain_buf *b) {
  ctrain_err result = ctrain_buf_printf(
      b,
      "{\"state\":\"%s\",\"rank\":%d,\"epoch\":%d,\"epochs\":%d,\"step\":%llu,"
      "\"steps_per_epoch\":%llu,\"global_step\":%llu,\"replicas_in_sync\":%d,\"workers\":%d",
      state_name(s->state), s->rank, s->epoch, s->epochs, (unsigned long long)s->step,
      (unsigned long long)s->steps_per_epoch, (unsigned long long)s->global_step,
      s->replicas_in_sync, s->workers);
  const struct {
    const char *k;
    double v;
    int decimals;
  } nums[] = {{"samples_per_sec", s->samples_per_sec, 1},
              {"loss", s->loss, 6},
              {"accuracy", s->accuracy, 6},
              {"val_loss", s->val_loss, 6},
              {"val_accuracy", s->val_accuracy, 6},
              {"step_ms", s->step_ms, 3},
              {"median_ms", s->median_ms, 3},
              {"slowest_ratio", s->slowest_ratio, 3}};
  for (size_t i = 0; !result && i < sizeof(nums) / sizeof(nums[0]); i++)
    result = json_num(b, nums[i].k, nums[i].v, nums[i].decimals);
  if (!result)
    result = s->slowest_rank >= 0 ? ctrain_buf_printf(b, ",\"slowest_rank\":%d", s->slowest_rank)
                                  : ctrain_buf_printf(b, ",\"slowest_rank\":null");
  if (!result)
    result = ctrain_buf_printf(b, ",\"worker_ms\":[");
  for (int i = 0; !result && i < s->n_worker_ms && i < PROGRESS_MAX_WORKERS; i++) {
    double v = s->worker_ms[i];
    result = isfinite(v) ? ctrain_buf_printf(b, "%s%.3f", i ? "," : "", v)
                         : ctrain_buf_printf(b, "%snull", i ? "," : "");
  }
  if (!result)
    result = s->backup_step >= 0
                 ? ctrain_buf_printf(b, "],\"backup_step\":%lld}\n", (long long)s->backup_step)
                 : ctrain_buf_printf(b, "],\"backup_step\":null}\n");
  return result;
}

/* One gauge with its HELP and TYPE lines; NaN when not known. */
static ctrain_err gauge(ctrain_buf *b, const char *name, const char *help, double v) {
  char num[64];
  if (isnan(v))
    snprintf(num, sizeof(num), "NaN");
  else
    snprintf(num, sizeof(num), "%.9g", v);
  return ctrain_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name,
                           num);
}

ctrain_err progress_render_metrics(const progress_snapshot *s, ctrain_buf *b) {
  const struct {
    const char *name, *help;
    double v;
  } g[] = {
      {"ctrain_worker_rank", "This worker's rank (chief 0).", s->rank},
      {"ctrain_worker_epoch", "Epoch in progress, 1-based (0: not started).", s->epoch},
      {"ctrain_worker_epochs", "Epochs to train.", s->epochs},
      {"ctrain_worker_step", "Steps done of the epoch in progress.", (double)s->step},
      {"ctrain_worker_steps_per_epoch", "Steps per epoch.", (double)s->steps_per_epoch},
      {"ctrain_worker_global_step", "Optimizer steps since the job's start.",
       (double)s->global_step},
      {"ctrain_worker_samples_per_second", "Global training throughput this epoch.",
       s->samples_per_sec},
      {"ctrain_worker_loss", "Training loss (running mean of the epoch).", s->loss},
      {"ctrain_worker_accuracy", "Training accuracy (running mean of the epoch).", s->accuracy},
      {"ctrain_worker_val_loss", "Loss on the test data after the last epoch.", s->val_loss},
      {"ctrain_worker_val_accuracy", "Accuracy on the test data after the last epoch.",
       s->val_accuracy},
      {"ctrain_worker_replicas_in_sync", "Replicas in sync (workers x local replicas).",
       s->replicas_in_sync},
      {"ctrain_worker_step_seconds", "This worker's compute time per step this epoch.",
       s->step_ms / 1000.0},
      {"ctrain_worker_backup_step", "Global step of the newest backup (NaN: none).",
       s->backup_step >= 0 ? (double)s->backup_step : NAN},
      {"ctrain_worker_state", "0 starting, 1 training, 2 succeeded, 3 failed.", s->state},
  };
  ctrain_err result = CTRAIN_OK;
  for (size_t i = 0; !result && i < sizeof(g) / sizeof(g[0]); i++)
    result = gauge(b, g[i].name, g[i].help, g[i].v);
  return result;
}

/* ---- the server ---------------------------------------------------------- */

typedef struct {
  int fd;           /* -1: free slot */
  int64_t deadline; /* monotonic ns */
  size_t len;       /* request bytes read */
  char *out;        /* the response, once the request is complete */
  size_t olen, off; /* response length, bytes sent */
  char req[PROGRESS_REQ_MAX + 1];
} conn;

struct progress_server {
  int fd;
  int wake[2]; /* self-pipe: progress_stop writes, the loop wakes */
  pthread_t thread;
  int started, chief;
  char token[PROGRESS_TOKEN_HEX + 1];
  pthread_mutex_t mu; /* guards snap */
  progress_snapshot snap;
  conn conns[PROGRESS_MAX_CONNS];
};

void progress_publish(progress_server *s, const progress_snapshot *snap) {
  if (!s)
    return;
  pthread_mutex_lock(&s->mu);
  s->snap = *snap;
  pthread_mutex_unlock(&s->mu);
}

/* The value of header `name` in the request head (NUL-terminated), trimmed,
 * into out; -1 when absent or too long. */
static int header_value(const char *req, const char *name, char *out, size_t outlen) {
  size_t nl = strlen(name);
  for (const char *line = strchr(req, '\n'); line; line = strchr(line, '\n')) {
    line++;
    if (strncasecmp(line, name, nl) || line[nl] != ':')
      continue;
    const char *v = line + nl + 1, *end = v;
    while (*v == ' ' || *v == '\t')
      v++;
    end = v;
    while (*end && *end != '\r' && *end != '\n')
      end++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
      end--;
    if ((size_t)(end - v) >= outlen)
      return -1;
    memcpy(out, v, (size_t)(end - v));
    out[end - v] = '\0';
    return 0;
  }
  return -1;
}

/* `Authorization: Bearer <token>` with the read token, compared in constant
 * time (the length is not secret). */
static int authorized(const progress_server *s, const char *req) {
  char v[256];
  if (header_value(req, "Authorization", v, sizeof(v)) || strncasecmp(v, "Bearer ", 7))
    return 0;
  const char *t = v + 7;
  while (*t == ' ')
    t++;
  int ok = strlen(t) == PROGRESS_TOKEN_HEX && !CRYPTO_memcmp(t, s->token, PROGRESS_TOKEN_HEX);
  OPENSSL_cleanse(v, sizeof(v));
  return ok;
}

/* The whole response into c->out (malloc'd). */
static void respond(conn *c, int code, const char *reason, const char *extra, const char *ctype,
                    const char *body, size_t blen, int head_only) {
  ctrain_buf b;
  ctrain_buf_init(&b, 0);
  if (ctrain_buf_printf(&b,
                        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                        "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n",
                        code, reason, ctype, blen, extra ? extra : "") ||
      (!head_only && ctrain_buf_append(&b, body, blen))) {
    ctrain_buf_free(&b);
    c->out = NULL;
    return;
  }
  c->out = ctrain_buf_take(&b, &c->olen);
  c->off = 0;
}

static void handle(progress_server *s, conn *c) {
  char method[8] = "", path[256] = "";
  if (sscanf(c->req, "%7s %255s", method, path) != 2) {
    respond(c, 400, "Bad Request", NULL, "text/plain", "bad request\n", 12, 0);
    return;
  }
  char *q = strchr(path, '?');
  if (q)
    *q = '\0';
  int head = !strcmp(method, "HEAD");
  if (!head && strcmp(method, "GET")) {
    respond(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n", "text/plain",
            "method not allowed\n", 19, 0);
    return;
  }
  if (!strcmp(path, "/healthz")) {
    respond(c, 200, "OK", NULL, "text/plain", "ok\n", 3, head);
    return;
  }
  int is_progress = !strcmp(path, "/progress") && s->chief, is_metrics = !strcmp(path, "/metrics");
  if (!is_progress && !is_metrics) {
    respond(c, 404, "Not Found", NULL, "text/plain", "not found\n", 10, head);
    return;
  }
  if (!authorized(s, c->req)) {
    respond(c, 401, "Unauthorized", "WWW-Authenticate: Bearer realm=\"ctrain\"\r\n", "text/plain",
            "unauthorized\n", 13, head);
    return;
  }
  progress_snapshot *snap = malloc(sizeof(*snap));
  if (!snap) {
    respond(c, 503, "Service Unavailable", NULL, "text/plain", "busy\n", 5, head);
    return;
  }
  pthread_mutex_lock(&s->mu);
  *snap = s->snap;
  pthread_mutex_unlock(&s->mu);
  ctrain_buf body;
  ctrain_buf_init(&body, 1 << 20);
  ctrain_err result =
      is_progress ? progress_render_json(snap, &body) : progress_render_metrics(snap, &body);
  free(snap);
  if (result)
    respond(c, 500, "Internal Server Error", NULL, "text/plain", "error\n", 6, head);
  else if (is_progress)
    respond(c, 200, "OK", NULL, "application/json", body.p, body.len, head);
  else
    respond(c, 200, "OK", NULL, "text/plain; version=0.0.4; charset=utf-8", body.p, body.len, head);
  ctrain_buf_free(&body);
}

static void conn_close(conn *c) {
  if (c->fd >= 0)
    close(c->fd);
  free(c->out);
  c->fd = -1;
  c->out = NULL;
  c->len = c->olen = c->off = 0;
}

/* Reads what is there; once the head is complete, prepares the response.
 * -1: close the connection. */
static int conn_read(progress_server *s, conn *c) {
  ssize_t r = recv(c->fd, c->req + c->len, PROGRESS_REQ_MAX - c->len, 0);
  if (r < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  if (r == 0)
    return -1;
  c->len += (size_t)r;
  c->req[c->len] = '\0';
  if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n")) {
    handle(s, c);
    return c->out ? 0 : -1;
  }
  if (c->len >= PROGRESS_REQ_MAX) {
    respond(c, 431, "Request Header Fields Too Large", NULL, "text/plain", "too large\n", 10, 0);
    return c->out ? 0 : -1;
  }
  return 0;
}

/* Sends what the socket takes; -1: done or failed (close). */
static int conn_write(conn *c) {
  ssize_t w = send(c->fd, c->out + c->off, c->olen - c->off, MSG_NOSIGNAL);
  if (w < 0)
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
  c->off += (size_t)w;
  return c->off < c->olen ? 0 : -1;
}

static void accept_one(progress_server *s) {
  int slot = -1;
  for (int i = 0; i < PROGRESS_MAX_CONNS && slot < 0; i++)
    if (s->conns[i].fd < 0)
      slot = i;
  if (slot < 0)
    return;
  int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0)
    return;
  conn *c = &s->conns[slot];
  c->fd = fd;
  c->len = 0;
  c->req[0] = '\0';
  c->deadline = ctrain_mono_ns() + (int64_t)PROGRESS_DEADLINE_MS * 1000000;
}

static void *loop(void *arg) {
  progress_server *s = arg;
  for (;;) {
    struct pollfd p[2 + PROGRESS_MAX_CONNS];
    int idx[PROGRESS_MAX_CONNS], n = 2, busy = 0;
    int64_t now = ctrain_mono_ns(), next = INT64_MAX;
    p[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    for (int i = 0; i < PROGRESS_MAX_CONNS; i++) {
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
      idx[n - 2] = i;
      p[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
    }
    /* Full: new connections wait in the backlog until a slot frees. */
    p[1] = (struct pollfd){.fd = busy < PROGRESS_MAX_CONNS ? s->fd : -1, .events = POLLIN};
    int timeout = next == INT64_MAX ? -1 : (int)((next - now) / 1000000 + 1);
    if (poll(p, (nfds_t)n, timeout) < 0) {
      if (errno == EINTR)
        continue;
      LOG_WARN("progress server: poll: %s", strerror(errno));
      break;
    }
    if (p[0].revents)
      break;
    for (int k = 2; k < n; k++) {
      conn *c = &s->conns[idx[k - 2]];
      if (!p[k].revents)
        continue;
      int rc = c->out ? conn_write(c) : conn_read(s, c);
      if (!rc && c->out && !(p[k].events & POLLOUT))
        rc = conn_write(c); /* the answer is ready: usually it fits at once */
      if (rc || (p[k].revents & (POLLERR | POLLNVAL)))
        conn_close(c);
    }
    if (p[1].revents & POLLIN)
      accept_one(s);
  }
  return NULL;
}

/* A listening socket on host:port; NULL host: IPv6 any with IPv4 mapped,
 * else IPv4 any. -1 with errno. */
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
        !bind(fd, (struct sockaddr *)&a6, sizeof(a6)) && !listen(fd, 64))
      return fd;
    if (fd >= 0)
      close(fd);
    host = "0.0.0.0"; /* no IPv6 in this pod */
  }
  hints.ai_family = AF_UNSPEC;
  int gai = getaddrinfo(host, ps, &hints, &ai);
  if (gai) {
    snprintf(why, whylen, "%s: %s", host, gai_strerror(gai));
    errno = EINVAL;
    return -1;
  }
  fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
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

ctrain_err progress_start(const progress_config *cfg, progress_server **out, int *port_out,
                          char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  progress_server *s = NULL;
  char why[512] = "";
  if (!cfg->read_token || strlen(cfg->read_token) != PROGRESS_TOKEN_HEX)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "progress server: no read token");
  s = calloc(1, sizeof(*s));
  if (!s)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "progress server: out of memory");
  s->fd = s->wake[0] = s->wake[1] = -1;
  for (int i = 0; i < PROGRESS_MAX_CONNS; i++)
    s->conns[i].fd = -1;
  memcpy(s->token, cfg->read_token, PROGRESS_TOKEN_HEX + 1);
  s->chief = cfg->chief;
  progress_snapshot_init(&s->snap);
  pthread_mutex_init(&s->mu, NULL);
  s->fd = listen_on(cfg->bind_host, cfg->port, why, sizeof(why));
  if (s->fd < 0)
    CTRAIN_FAIL(CTRAIN_E_NET, "progress server on port %d: %s", cfg->port, why);
  if (port_out) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(s->fd, (struct sockaddr *)&ss, &sl))
      CTRAIN_FAIL(CTRAIN_E_NET, "progress server: getsockname: %s", strerror(errno));
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
  }
  if (fcntl(s->fd, F_SETFL, fcntl(s->fd, F_GETFL) | O_NONBLOCK) ||
      pipe2(s->wake, O_CLOEXEC | O_NONBLOCK))
    CTRAIN_FAIL(CTRAIN_E_IO, "progress server: %s", strerror(errno));
  if ((errno = pthread_create(&s->thread, NULL, loop, s)))
    CTRAIN_FAIL(CTRAIN_E_IO, "progress server: thread: %s", strerror(errno));
  s->started = 1;
  *out = s;
  s = NULL;
out:
  progress_stop(s);
  return result;
}

void progress_stop(progress_server *s) {
  if (!s)
    return;
  if (s->started) {
    if (write(s->wake[1], "x", 1) < 0)
      LOG_WARN("progress server: wake: %s", strerror(errno));
    pthread_join(s->thread, NULL);
  }
  for (int i = 0; i < PROGRESS_MAX_CONNS; i++)
    conn_close(&s->conns[i]);
  if (s->fd >= 0)
    close(s->fd);
  if (s->wake[0] >= 0)
    close(s->wake[0]);
  if (s->wake[1] >= 0)
    close(s->wake[1]);
  pthread_mutex_destroy(&s->mu);
  OPENSSL_cleanse(s->token, sizeof(s->token));
  free(s);
}
