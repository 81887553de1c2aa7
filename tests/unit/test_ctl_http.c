/* test_ctl_http.c - the controller's /healthz /readyz /metrics routes
 * (controller/http.c) and its liveness probe under 1,000
 * idle connections. */
#include "test.h"

#include <stdatomic.h>

#include "controller/http.h"
#include "ctrain/clock.h"
#include "test_http_client.h"

static ctrain_err render(void *ud, ctrain_buf *out) {
  (void)ud;
  return ctrain_buf_printf(out, "ctrain_up 1\n");
}

static int not_ready(void *ud) {
  (void)ud;
  return 0;
}

static ctl_http *start(int ready, int *port) {
  ctl_http *s = NULL;
  char err[256] = "";
  ctl_http_handlers h = {.render_metrics = render, .ready = ready ? NULL : not_ready};
  if (ctl_http_start("127.0.0.1:0", &h, &s, port, err, sizeof(err)))
    TEST_FAIL_("ctl_http_start: %s", err);
  ASSERT_GT(*port, 0);
  return s;
}

TEST(routes) {
  int port = 0;
  ctl_http *s = start(0, &port);
  char resp[4096];
  ASSERT_EQ(http_raw(port, "GET /healthz HTTP/1.1\r\n\r\n", resp, sizeof(resp)), 200);
  ASSERT_EQ(http_raw(port, "GET /readyz HTTP/1.1\r\n\r\n", resp, sizeof(resp)), 503);
  ASSERT_EQ(http_raw(port, "GET /metrics HTTP/1.1\r\n\r\n", resp, sizeof(resp)), 200);
  ASSERT_STR_EQ(body_of(resp), "ctrain_up 1\n");
  ASSERT_EQ(http_raw(port, "POST /healthz HTTP/1.1\r\n\r\n", resp, sizeof(resp)), 405);
  ctl_http_stop(s);
  ctl_http_stop(NULL);
}

/* 16 idle connections used to fail the probe (16 slots); now 1,000,
 * re-opened as they are dropped: /healthz within 1 s, /metrics within 2 s. */
TEST(healthz_is_answered_under_1000_idle_connections) {
  int port = 0;
  ctl_http *s = start(1, &port);
  hostile_load h;
  hostile_start(&h, port, 1000);
  ctrain_sleep_ns(500000000);
  enum { R = 10 };
  double probe[R], metrics[R];
  char resp[4096];
  for (int i = 0; i < R; i++) {
    int64_t t0 = ctrain_mono_ns();
    ASSERT_EQ(http_raw(port, "GET /healthz HTTP/1.1\r\n\r\n", resp, sizeof(resp)), 200);
    probe[i] = (double)(ctrain_mono_ns() - t0) / 1e6;
    ASSERT_LT(probe[i], 1000);
    t0 = ctrain_mono_ns();
    ASSERT_EQ(http_raw(port, "GET /metrics HTTP/1.1\r\n\r\n", resp, sizeof(resp)), 200);
    metrics[i] = (double)(ctrain_mono_ns() - t0) / 1e6;
    ASSERT_LT(metrics[i], 2000);
    ctrain_sleep_ns(100000000);
  }
  long opened = atomic_load(&h.opened);
  hostile_stop(&h);
  latency_figures p = latency_of(probe, R), m = latency_of(metrics, R);
  printf("# under 1000 idle connections (%ld opened): /healthz median %.1f max %.1f ms, "
         "/metrics median %.1f max %.1f ms\n",
         opened, p.median_ms, p.max_ms, m.median_ms, m.max_ms);
  ctl_http_stop(s);
}

TEST_MAIN(T(routes), T(healthz_is_answered_under_1000_idle_connections))
