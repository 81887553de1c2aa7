/* test_ctl_straggler.c - straggler detection over polls (controller/straggler.h). */
#include "test.h"

#include <math.h>

#include "controller/straggler.h"

TEST(two_polls_over_threshold_flag) {
  ctl_straggler s;
  ctl_straggler_init(&s);
  ASSERT_EQ(ctl_straggler_observe(&s, 2, 2.1, 1.5, 100), 0);
  ASSERT_EQ(s.flagged, 0);
  ASSERT_EQ(ctl_straggler_observe(&s, 2, 2.3, 1.5, 110), 1);
  ASSERT_EQ(s.flagged, 1);
  ASSERT_EQ(s.rank, 2);
  ASSERT_NEAR(s.ratio, 2.3, 1e-12);
  ASSERT_EQ(s.since, 100);
  ASSERT_EQ(ctl_straggler_observe(&s, 2, 1.6, 1.5, 120), 0); /* still over: still flagged */
  ASSERT_EQ(s.flagged, 1);
  ASSERT_EQ(ctl_straggler_observe(&s, 2, 1.2, 1.5, 130), 1); /* caught up */
  ASSERT_EQ(s.flagged, 0);
  ASSERT_EQ(s.rank, -1);
}

TEST(one_slow_poll_is_noise) {
  ctl_straggler s;
  ctl_straggler_init(&s);
  for (int i = 0; i < 10; i++) {
    ASSERT_EQ(ctl_straggler_observe(&s, 1, i % 2 ? 3.0 : 1.0, 1.5, i * 10), 0);
    ASSERT_EQ(s.flagged, 0);
  }
}

TEST(threshold_is_inclusive_and_unknown_clears) {
  ctl_straggler s;
  ctl_straggler_init(&s);
  ctl_straggler_observe(&s, 1, 1.5, 1.5, 0);
  ASSERT_EQ(ctl_straggler_observe(&s, 1, 1.5, 1.5, 10), 1);
  ASSERT_EQ(ctl_straggler_observe(&s, 1, NAN, 1.5, 20), 1);
  ASSERT_EQ(s.flagged, 0);
  ctl_straggler_observe(&s, 1, 2, 1.5, 30);
  ctl_straggler_observe(&s, 1, 2, 1.5, 40);
  ASSERT_EQ(ctl_straggler_observe(&s, -1, 2, 1.5, 50), 1);
}

TEST(another_rank_slowest_starts_over) {
  ctl_straggler s;
  ctl_straggler_init(&s);
  ctl_straggler_observe(&s, 1, 2, 1.5, 0);
  ctl_straggler_observe(&s, 1, 2, 1.5, 10);
  ASSERT_EQ(s.flagged, 1);
  ASSERT_EQ(ctl_straggler_observe(&s, 3, 2, 1.5, 20), 1); /* rank 1 caught up; 3 is new */
  ASSERT_EQ(s.flagged, 0);
  ASSERT_EQ(ctl_straggler_observe(&s, 3, 2, 1.5, 30), 1);
  ASSERT_EQ(s.rank, 3);
  ASSERT_EQ(s.since, 20);
}

TEST_MAIN(T(two_polls_over_threshold_flag), T(one_slow_poll_is_noise),
          T(threshold_is_inclusive_and_unknown_clears), T(another_rank_slowest_starts_over))
