/* test_ctl_options.c - ctrain-controller's flags: defaults, values, and
 * errors that name the flag. */
#include "test.h"

#include "controller/options.h"

#define ARGV(...) ((char *[]){__VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)))

TEST(ctl_defaults) {
  ctl_options o;
  char err[256] = "";
  ASSERT_OK(ctl_options_parse(&o, 1, ARGV("ctrain-controller"), err, sizeof(err)));
  ASSERT_EQ(o.workers, 16);
  ASSERT_EQ(o.leader_elect, 1);
  ASSERT_STR_EQ(o.metrics_addr, ":8080");
  ASSERT_NULL(o.kubeconfig);
}

TEST(ctl_values) {
  ctl_options o;
  char err[256] = "";
  ASSERT_OK(ctl_options_parse(
      &o, 6, ARGV("c", "--workers", "8", "--leader-elect=false", "--kubeconfig", "/tmp/kc"), err,
      sizeof(err)));
  ASSERT_EQ(o.workers, 8);
  ASSERT_EQ(o.leader_elect, 0);
  ASSERT_STR_EQ(o.kubeconfig, "/tmp/kc");
}

TEST(ctl_errors_name_flag) {
  ctl_options o;
  char err[256] = "";
  ASSERT_EQ(ctl_options_parse(&o, 3, ARGV("c", "--workers", "0"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--workers");
  ASSERT_EQ(ctl_options_parse(&o, 2, ARGV("c", "--bogus"), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--bogus");
  ASSERT_EQ(ctl_options_parse(&o, 3, ARGV("c", "--log-format", "xml"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--log-format");
  ASSERT_EQ(ctl_options_parse(&o, 2, ARGV("c", "--kubeconfig"), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--kubeconfig");
}

TEST_MAIN(T(ctl_defaults), T(ctl_values), T(ctl_errors_name_flag))
