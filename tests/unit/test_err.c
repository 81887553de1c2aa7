/* test_err.c - result names and the exit-code table of docs/design.md. */
#include "test.h"

#include "ctrain/err.h"

TEST(strerror_every_code_named) {
  for (int i = 0; i < CTRAIN_E_LAST; i++) {
    const char *s = ctrain_strerror((ctrain_err)i);
    ASSERT_NOT_NULL(s);
    ASSERT(strcmp(s, "unknown error") != 0);
  }
  ASSERT_STR_EQ(ctrain_strerror((ctrain_err)9999), "unknown error");
  ASSERT_STR_EQ(ctrain_strerror((ctrain_err)-1), "unknown error");
}

TEST(exit_classes_match_design) {
  ASSERT_EQ(ctrain_exit_classify(0), CTRAIN_EXIT_CLASS_SUCCESS);
  ASSERT_EQ(ctrain_exit_classify(64), CTRAIN_EXIT_CLASS_PERMANENT);
  ASSERT_EQ(ctrain_exit_classify(65), CTRAIN_EXIT_CLASS_PERMANENT);
  ASSERT_EQ(ctrain_exit_classify(78), CTRAIN_EXIT_CLASS_PERMANENT);
  ASSERT_EQ(ctrain_exit_classify(75), CTRAIN_EXIT_CLASS_RETRYABLE);
  ASSERT_EQ(ctrain_exit_classify(137), CTRAIN_EXIT_CLASS_RETRYABLE); /* SIGKILL */
  ASSERT_EQ(ctrain_exit_classify(143), CTRAIN_EXIT_CLASS_RETRYABLE); /* SIGTERM */
  ASSERT_EQ(ctrain_exit_classify(1), CTRAIN_EXIT_CLASS_OTHER);
  ASSERT_EQ(ctrain_exit_classify(70), CTRAIN_EXIT_CLASS_OTHER);
  ASSERT_EQ(ctrain_exit_classify(128), CTRAIN_EXIT_CLASS_OTHER);
}

TEST(exit_for_err) {
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_OK), 0);
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_INVAL), 64);
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_DATA), 65);
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_CONFIG), 78);
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_PEER), 75);
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_TIMEOUT), 75);
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_NOSPACE), 75);
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_NOMEM), 70);
}

TEST_MAIN(T(strerror_every_code_named), T(exit_classes_match_design), T(exit_for_err))
