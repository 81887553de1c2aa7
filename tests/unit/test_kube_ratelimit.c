/* test_kube_ratelimit.c - token bucket on a fake clock: burst, refill rate,
 * debt ordering, try and bounded wait. */
#include "test.h"

#include "ctrain/clock.h"
#include "ctrain/kube_ratelimit.h"

static int64_t fake_now;
static int64_t fake_clock(void *ctx) {
  (void)ctx;
  return fake_now;
}

#define MS 1000000LL

TEST(burst_then_rate) {
  kube_ratelimit rl;
  fake_now = 1000 * MS;
  kube_ratelimit_init(&rl, 10, 3, fake_clock, NULL);
  ASSERT_EQ(kube_ratelimit_reserve(&rl), 0);
  ASSERT_EQ(kube_ratelimit_reserve(&rl), 0);
  ASSERT_EQ(kube_ratelimit_reserve(&rl), 0);
  /* Empty: the next waits 100 ms, the one after 200 ms (in order). */
  ASSERT_EQ(kube_ratelimit_reserve(&rl), 100 * MS);
  ASSERT_EQ(kube_ratelimit_reserve(&rl), 200 * MS);
  fake_now += 200 * MS; /* pays the debt exactly */
  ASSERT_EQ(kube_ratelimit_try(&rl), 0);
  fake_now += 100 * MS;
  ASSERT_EQ(kube_ratelimit_try(&rl), 1);
  ASSERT_EQ(kube_ratelimit_try(&rl), 0);
  /* Long idle refills only up to burst. */
  fake_now += 3600 * 1000 * MS;
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(kube_ratelimit_try(&rl), 1);
  ASSERT_EQ(kube_ratelimit_try(&rl), 0);
  kube_ratelimit_destroy(&rl);
}

TEST(bounded_wait_takes_nothing) {
  kube_ratelimit rl;
  fake_now = 0;
  kube_ratelimit_init(&rl, 1, 1, fake_clock, NULL);
  ASSERT_OK(kube_ratelimit_wait(&rl, 0));
  ASSERT_EQ(kube_ratelimit_wait(&rl, 10 * MS), CTRAIN_E_TIMEOUT);
  /* The refused wait took no token: one second later one is there. */
  fake_now += 1000 * MS;
  ASSERT_EQ(kube_ratelimit_try(&rl), 1);
  kube_ratelimit_destroy(&rl);
}

TEST(unlimited) {
  kube_ratelimit rl;
  kube_ratelimit_init(&rl, 0, 1, NULL, NULL);
  for (int i = 0; i < 1000; i++)
    ASSERT_EQ(kube_ratelimit_reserve(&rl), 0);
  kube_ratelimit_destroy(&rl);
}

TEST(real_clock_rate) {
  kube_ratelimit rl;
  kube_ratelimit_init(&rl, 100, 1, NULL, NULL);
  double a = ctrain_mono_s();
  for (int i = 0; i < 11; i++)
    ASSERT_OK(kube_ratelimit_wait(&rl, -1));
  double s = ctrain_mono_s() - a;
  ASSERT_NEAR(s, 0.100, 0.05);
  kube_ratelimit_destroy(&rl);
}

TEST_MAIN(T(burst_then_rate), T(bounded_wait_takes_nothing), T(unlimited), T(real_clock_rate))
