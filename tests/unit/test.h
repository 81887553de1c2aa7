/* test.h - a small assertion header and runner in the libuv test/task.h style.
 *
 * Each test file defines its tests with TEST(name) and lists them in
 * TEST_MAIN(...). Every test runs in its own forked process with a timeout
 * (TEST_TIMEOUT_S, default 30 s), so a crash or hang fails that test alone.
 * A test that returns ends its process normally (exit, not _exit), so in the
 * ASan build LeakSanitizer checks each test on its own and a leak fails it:
 * free what a test allocates. Assertions are never compiled out and print
 * both operands. Run one test with `./test_x name`. TEST_SKIP("why") ends a
 * test that cannot run here (no GPU): it prints "# SKIP why", then the runner
 * reports "ok N - name # SKIP", and
 * the executable exits TEST_SKIP_CODE when nothing failed and something was
 * skipped, which ctest reports as skipped (SKIP_RETURN_CODE), not passed. */
#ifndef CTRAIN_TEST_H
#define CTRAIN_TEST_H

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef TEST_TIMEOUT_S
#define TEST_TIMEOUT_S 30
#endif

#define TEST_SKIP_CODE 77

/* Ends the running test (its own process) as skipped, printing why. */
#define TEST_SKIP(...)                                                                             \
  do {                                                                                             \
    printf("# SKIP ");                                                                             \
    printf(__VA_ARGS__);                                                                           \
    putchar('\n');                                                                                 \
    fflush(NULL);                                                                                  \
    exit(TEST_SKIP_CODE);                                                                          \
  } while (0)

#define TEST_FAIL_(...)                                                                            \
  do {                                                                                             \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                                \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fputc('\n', stderr);                                                                           \
    abort();                                                                                       \
  } while (0)

#define ASSERT(expr)                                                                               \
  do {                                                                                             \
    if (!(expr))                                                                                   \
      TEST_FAIL_("assertion failed: %s", #expr);                                                   \
  } while (0)

#define ASSERT_INT_OP_(a, op, b)                                                                   \
  do {                                                                                             \
    long long a_ = (long long)(a), b_ = (long long)(b);                                            \
    if (!(a_ op b_))                                                                               \
      TEST_FAIL_("%s %s %s: %lld vs %lld", #a, #op, #b, a_, b_);                                   \
  } while (0)

#define ASSERT_EQ(a, b) ASSERT_INT_OP_(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_INT_OP_(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_INT_OP_(a, <, b)
#define ASSERT_LE(a, b) ASSERT_INT_OP_(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_INT_OP_(a, >, b)
#define ASSERT_GE(a, b) ASSERT_INT_OP_(a, >=, b)

#define ASSERT_OK(expr)                                                                            \
  do {                                                                                             \
    int r_ = (int)(expr);                                                                          \
    if (r_ != 0)                                                                                   \
      TEST_FAIL_("%s returned %d, expected 0", #expr, r_);                                         \
  } while (0)

#define ASSERT_STR_EQ(a, b)                                                                        \
  do {                                                                                             \
    const char *a_ = (a), *b_ = (b);                                                               \
    if (!a_ || !b_ || strcmp(a_, b_))                                                              \
      TEST_FAIL_("%s == %s: \"%s\" vs \"%s\"", #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");    \
  } while (0)

#define ASSERT_STR_CONTAINS(hay, needle)                                                           \
  do {                                                                                             \
    const char *h_ = (hay), *n_ = (needle);                                                        \
    if (!h_ || !strstr(h_, n_))                                                                    \
      TEST_FAIL_("%s does not contain \"%s\": \"%s\"", #hay, n_, h_ ? h_ : "(null)");              \
  } while (0)

#define ASSERT_NEAR(a, b, tol)                                                                     \
  do {                                                                                             \
    double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                                 \
    if (!(fabs(a_ - b_) <= t_))                                                                    \
      TEST_FAIL_("|%s - %s| <= %g: %.9g vs %.9g (diff %.3g)", #a, #b, t_, a_, b_, fabs(a_ - b_));  \
  } while (0)

#define ASSERT_NULL(p)     ASSERT((p) == NULL)
#define ASSERT_NOT_NULL(p) ASSERT((p) != NULL)

typedef struct {
  const char *name;
  void (*fn)(void);
} test_entry;

#define TEST(name) static void test_##name(void)
#define T(name)                                                                                    \
  { #name, test_##name }

/* Runs the listed tests, each in a child process with a timeout; prints
 * libuv-style "ok N - name" lines and returns 1 when a test failed, else
 * TEST_SKIP_CODE when one was skipped, else 0. */
static inline int test_run_all(const test_entry *tests, int n, int argc, char **argv) {
  int failed = 0, ran = 0, skipped = 0;
  printf("1..%d\n", n);
  for (int i = 0; i < n; i++) {
    if (argc > 1 && strcmp(argv[1], tests[i].name))
      continue;
    ran++;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(TEST_TIMEOUT_S);
      tests[i].fn();
      fflush(NULL);
      exit(0); /* normally, so LeakSanitizer runs its check */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
      printf("ok %d - %s\n", i + 1, tests[i].name);
    } else if (WIFEXITED(st) && WEXITSTATUS(st) == TEST_SKIP_CODE) {
      skipped++;
      printf("ok %d - %s # SKIP\n", i + 1, tests[i].name);
    } else {
      failed++;
      if (WIFSIGNALED(st))
        printf("not ok %d - %s (signal %d%s)\n", i + 1, tests[i].name, WTERMSIG(st),
               WTERMSIG(st) == SIGALRM ? ": timeout" : "");
      else
        printf("not ok %d - %s (exit %d)\n", i + 1, tests[i].name, WEXITSTATUS(st));
    }
  }
  if (ran == 0) {
    printf("no test named '%s'\n", argc > 1 ? argv[1] : "");
    return 1;
  }
  printf("# %d passed, %d skipped, %d failed\n", ran - failed - skipped, skipped, failed);
  return failed ? 1 : skipped ? TEST_SKIP_CODE : 0;
}

#define TEST_MAIN(...)                                                                             \
  int main(int argc, char **argv) {                                                                \
    static const test_entry tests_[] = {__VA_ARGS__};                                              \
    return test_run_all(tests_, (int)(sizeof(tests_) / sizeof(tests_[0])), argc, argv);            \
  }

#endif
