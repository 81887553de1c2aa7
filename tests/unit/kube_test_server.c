/* kube_test_server.c - the scripted HTTP/1.1 server of the kube_* unit
 * tests (kube_test_server.h). */
#include "kube_test_server.h"

#include <stdio.h>
#include <string.h>

static void *serve(void *arg) {
  server *s = arg;
  int i = 0;
  while (s->resp[i]) {
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0)
      return NULL;
    s->cfd = fd;
    s->nconn++;
    char buf[8192];
    size_t have = 0;
    while (s->resp[i]) {
      /* Read one request: headers, then Content-Length bytes of body. */
      char *end = NULL;
      while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - have - 1);
        if (n <= 0)
          goto next_conn;
        have += (size_t)n;
      }
      buf[have] = '\0';
      size_t hlen = (size_t)(end - buf) + 4, clen = 0;
      char *cl = strcasestr(buf, "Content-Length:");
      if (cl && cl < end)
        clen = strtoul(cl + 15, NULL, 10);
      while (have < hlen + clen) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - have - 1);
        if (n <= 0)
          goto next_conn;
        have += (size_t)n;
      }
      buf[have] = '\0';
      snprintf(s->req[i], sizeof(s->req[i]), "%.*s", (int)(hlen + clen), buf);
      memmove(buf, buf + hlen + clen, have - hlen - clen);
      have -= hlen + clen;
      s->nreq++;
      while (s->hold == i + 1) {
        s->held = i + 1;
        usleep(1000);
      }
      const char *r = s->resp[i++];
      if (write(fd, r, strlen(r)) < 0)
        goto next_conn;
      if (!s->resp[i] && s->stream_forever) {
        char tmp[256];
        while (read(fd, tmp, sizeof(tmp)) > 0)
          ;
      }
      if (strstr(r, "Connection: close"))
        break;
    }
  next_conn:
    close(fd);
  }
  return NULL;
}

pthread_t ks_start_server(server *s) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof(a);
  s->lfd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT(s->lfd >= 0);
  ASSERT_OK(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)));
  ASSERT_OK(listen(s->lfd, 8));
  ASSERT_OK(getsockname(s->lfd, (struct sockaddr *)&a, &al));
  s->port = ntohs(a.sin_port);
  pthread_t t;
  ASSERT_OK(pthread_create(&t, NULL, serve, s));
  return t;
}

/* Ends a server that may be blocked on a kept-open stream and joins it, so
 * the test may read s->req without racing the server thread. */
void ks_stop_server(server *s, pthread_t t) {
  shutdown(s->lfd, SHUT_RDWR);
  int fd = s->cfd;
  if (fd > 0)
    shutdown(fd, SHUT_RDWR);
  pthread_join(t, NULL);
  close(s->lfd);
}

kube_client *ks_client_for(server *s, const kube_client_opts *o) {
  char kc[512], err[256];
  snprintf(kc, sizeof(kc),
           "current-context: t\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:%d'}\n"
           "users:\n- name: u\n  user: {token: tok-123}\n"
           "contexts:\n- name: t\n  context: {cluster: c, user: u}\n",
           s->port);
  kube_config *cfg = NULL;
  ASSERT_OK(kube_config_parse(kc, strlen(kc), "test", NULL, NULL, &cfg, err, sizeof(err)));
  kube_client *c = NULL;
  ASSERT_OK(kube_client_new(cfg, o, &c, err, sizeof(err)));
  return c;
}

/* Frees a client made by ks_client_for and its config. */
void ks_client_done(kube_client *c) {
  kube_config *cfg = kube_client_config(c);
  kube_client_free(c);
  kube_config_free(cfg);
}

const char *ks_resp200(const char *body) {
  static char bufs[8][1024];
  static int n;
  char *b = bufs[n++ % 8];
  snprintf(b, 1024,
           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  return b;
}

const char *ks_resp_status(int code, const char *reason, const char *extra_hdr, const char *body) {
  static char bufs[8][2048];
  static int n;
  char *b = bufs[n++ % 8];
  snprintf(b, 2048,
           "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%sContent-Length: %zu\r\n\r\n%s",
           code, reason, extra_hdr, strlen(body), body);
  return b;
}

void ks_note_first_bytes(first_bytes *f) {
  int64_t none = 0;
  atomic_compare_exchange_strong(&f->first_ns, &none, ctrain_mono_ns());
}

ctrain_err ks_on_first_bytes(void *ud, const char *d, size_t n) {
  (void)d;
  (void)n;
  ks_note_first_bytes(ud);
  return CTRAIN_OK;
}

double ks_next_look_s(long wait_ms) {
  server s = {.resp = {"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n6\r\nline1\n\r\n"},
              .stream_forever = 1};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  first_bytes fb = {0};
  kube_status st;
  ASSERT_EQ(
      kube_client_stream(c, "/api/v1/pods?watch=1", ks_on_first_bytes, &fb, NULL, wait_ms, &st),
      CTRAIN_E_TIMEOUT);
  int64_t end = ctrain_mono_ns();
  ASSERT_GT(atomic_load(&fb.first_ns), 0);
  ks_stop_server(&s, t);
  ks_client_done(c);
  double look = (double)(end - atomic_load(&fb.first_ns)) / 1e9;
  printf("# a stream silent for %ld ms: noticed %.3f s after its bytes\n", wait_ms, look);
  return look;
}

/* Waits for f's first bytes, then wait_ms; when that was (mono ns). */
int64_t ks_wait_after_first_bytes(first_bytes *f, long wait_ms) {
  while (!atomic_load(&f->first_ns))
    usleep(1000);
  ctrain_sleep_ns(atomic_load(&f->first_ns) + wait_ms * 1000000LL - ctrain_mono_ns());
  return ctrain_mono_ns();
}

/* A cancel fired at fired_ns, `after_ms` after a stream's bytes, returned at
 * end_ns: woken at once, not at the stream's next poll, i.e. under half of
 * what the unwoken loop waits (`look`, ks_next_look_s of this run, less
 * after_ms; no wall-clock ceiling, which flakes on a loaded machine). */
void ks_assert_woken(int64_t end_ns, int64_t fired_ns, double look, long after_ms) {
  double latency = (double)(end_ns - fired_ns) / 1e9;
  double unwoken = look - (double)after_ms / 1e3; /* what a cancel that did not wake it waits */
  printf("# cancelled %.3f s after the fire; not woken, it would have waited %.3f s\n", latency,
         unwoken);
  ASSERT_LT((int64_t)(latency * 2e6), (int64_t)(unwoken * 1e6)); /* microseconds */
}
