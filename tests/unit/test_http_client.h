/* test_http_client.h - a loopback HTTP client for the unit tests of the
 * servers over ctrain_httpd (test_common_httpd, test_progress): connect,
 * send a whole request, read the response until the server closes. Static
 * inline functions; include from the test file. */
#ifndef CTRAIN_TEST_HTTP_CLIENT_H
#define CTRAIN_TEST_HTTP_CLIENT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "test.h"

static inline int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT(fd >= 0);
  ASSERT_OK(connect(fd, (struct sockaddr *)&a, sizeof(a)));
  return fd;
}

/* Reads until the server closes; the status code. The 60 s is a guard
 * against a server that never answers (the test fails instead of hanging),
 * not a bound on how fast it answers. */
static inline int read_resp(int fd, char *resp, size_t cap) {
  size_t len = 0;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    ASSERT_EQ(poll(&p, 1, 60000), 1);
    ssize_t r = recv(fd, resp + len, cap - 1 - len, 0);
    ASSERT(r >= 0);
    if (r == 0)
      break;
    len += (size_t)r;
    ASSERT_LT(len, cap - 1);
  }
  resp[len] = '\0';
  int code = 0;
  if (sscanf(resp, "HTTP/1.1 %d", &code) != 1)
    TEST_FAIL_("not an HTTP/1.1 response: \"%s\"", resp);
  return code;
}

static inline int http_raw(int port, const char *raw, char *resp, size_t cap) {
  int fd = connect_to(port);
  size_t n = strlen(raw);
  ASSERT_EQ(send(fd, raw, n, MSG_NOSIGNAL), (long long)n);
  int code = read_resp(fd, resp, cap);
  close(fd);
  return code;
}

static inline const char *body_of(const char *resp) {
  const char *b = strstr(resp, "\r\n\r\n");
  ASSERT_NOT_NULL(b);
  return b + 4;
}

/* ---- hostile load: idle connections re-opened as they are dropped ------- */

/* n connections to port that send nothing, on their own thread; one the
 * server closes is re-opened at once (non-blocking connects, so a server
 * that leaves them in SYN retries does not stall the thread). */
typedef struct {
  int port, n;
  atomic_int stop;
  atomic_long opened; /* connections opened, the first n included */
  pthread_t thread;
  int *fds;
} hostile_load;

static inline int hostile_open(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) && errno != EINPROGRESS) {
    close(fd);
    fd = -1;
  }
  return fd;
}

static inline void *hostile_run(void *arg) {
  hostile_load *h = arg;
  struct pollfd *p = calloc((size_t)h->n, sizeof(*p));
  ASSERT_NOT_NULL(p);
  while (!atomic_load(&h->stop)) {
    for (int i = 0; i < h->n; i++) {
      if (h->fds[i] < 0 && (h->fds[i] = hostile_open(h->port)) >= 0)
        atomic_fetch_add(&h->opened, 1);
      p[i] = (struct pollfd){.fd = h->fds[i], .events = POLLIN};
    }
    if (poll(p, (nfds_t)h->n, 20) <= 0)
      continue;
    for (int i = 0; i < h->n; i++)
      if (p[i].revents && h->fds[i] >= 0) { /* dropped (EOF, reset): again */
        close(h->fds[i]);
        h->fds[i] = -1;
      }
  }
  free(p);
  return NULL;
}

/* Raises RLIMIT_NOFILE for n connections plus the test's own. */
static inline void hostile_start(hostile_load *h, int port, int n) {
  struct rlimit rl;
  ASSERT_OK(getrlimit(RLIMIT_NOFILE, &rl));
  if (rl.rlim_cur < (rlim_t)n + 256) {
    rl.rlim_cur = (rlim_t)n + 256 < rl.rlim_max ? (rlim_t)n + 256 : rl.rlim_max;
    ASSERT_OK(setrlimit(RLIMIT_NOFILE, &rl));
  }
  ASSERT_GE((long long)rl.rlim_cur, (long long)n + 64);
  h->port = port;
  h->n = n;
  atomic_store(&h->stop, 0);
  atomic_store(&h->opened, 0);
  h->fds = malloc((size_t)n * sizeof(*h->fds));
  ASSERT_NOT_NULL(h->fds);
  for (int i = 0; i < n; i++)
    h->fds[i] = -1;
  ASSERT_OK(pthread_create(&h->thread, NULL, hostile_run, h));
}

static inline void hostile_stop(hostile_load *h) {
  atomic_store(&h->stop, 1);
  pthread_join(h->thread, NULL);
  for (int i = 0; i < h->n; i++)
    if (h->fds[i] >= 0)
      close(h->fds[i]);
  free(h->fds);
}

/* Latency figures of `n` timed requests (ms). */
typedef struct {
  double max_ms, median_ms;
} latency_figures;

static inline int latency_cmp_(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static inline latency_figures latency_of(double *ms, int n) {
  qsort(ms, (size_t)n, sizeof(*ms), latency_cmp_);
  return (latency_figures){.max_ms = ms[n - 1], .median_ms = ms[n / 2]};
}

#endif
