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

TEST(ctl_every_flag) {
  ctl_options o;
  char err[256] = "";
  ASSERT_OK(ctl_options_parse(&o, 17,
                              ARGV("c", "--context=ctx", "--namespace", "ml", "--kube-api-qps",
                                   "2.5", "--kube-api-burst=7", "--leader-elect",
                                   "--leader-elect-lease-name", "l", "--leader-elect-namespace=lns",
                                   "--metrics-bind-address", "127.0.0.1:0", "--log-level=warning",
                                   "--log-format", "text", "--version"),
                              err, sizeof(err)));
  ASSERT_STR_EQ(o.context, "ctx");
  ASSERT_STR_EQ(o.namespace_, "ml");
  ASSERT(o.qps == 2.5);
  ASSERT_EQ(o.burst, 7);
  ASSERT_EQ(o.leader_elect, 1);
  ASSERT_STR_EQ(o.lease_name, "l");
  ASSERT_STR_EQ(o.lease_namespace, "lns");
  ASSERT_STR_EQ(o.metrics_addr, "127.0.0.1:0");
  ASSERT_STR_EQ(o.log_level, "warning");
  ASSERT_STR_EQ(o.log_format, "text");
  ASSERT_EQ(o.show_version, 1);
  ASSERT_EQ(o.show_help, 0);
  ASSERT_OK(ctl_options_parse(&o, 2, ARGV("c", "-h"), err, sizeof(err)));
  ASSERT_EQ(o.show_help, 1);
}

TEST(ctl_error_messages) {
  static const struct {
    const char *arg, *msg;
  } cases[] = {
      {"--workers=x", "--workers: 'x' is not an integer in 1..256"},
      {"--kube-api-qps=0", "--kube-api-qps: '0' is not a positive number"},
      {"--kube-api-burst=0", "--kube-api-burst: '0' is not a positive integer"},
      {"--leader-elect=maybe", "--leader-elect: 'maybe' is not true or false"},
      {"--log-level=loud", "--log-level: 'loud' is not one of debug, info, warn, error"},
      {"--log-format=xml", "--log-format: 'xml' is not text or json"},
      {"--version=1", "--version: takes no value"},
      {"extra", "unexpected argument 'extra'"},
      {"--kubeconfig", "--kubeconfig: missing value"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ctl_options o;
    char err[256] = "";
    char *argv[] = {"c", (char *)cases[i].arg, NULL};
    ASSERT_EQ(ctl_options_parse(&o, 2, argv, err, sizeof(err)), CTRAIN_E_INVAL);
    ASSERT_STR_EQ(err, cases[i].msg);
  }
}

TEST(ctl_progress_flags) {
  ctl_options o;
  char err[256] = "";
  ASSERT_OK(ctl_options_parse(&o, 1, ARGV("c"), err, sizeof(err)));
  ASSERT_NEAR(o.progress_interval_s, 10.0, 0);
  ASSERT_NEAR(o.straggler_threshold, 1.5, 0);
  ASSERT_EQ(o.progress_concurrency, 4);
  ASSERT_OK(ctl_options_parse(&o, 7,
                              ARGV("c", "--progress-interval", "0", "--straggler-threshold", "2.5",
                                   "--progress-concurrency", "2"),
                              err, sizeof(err)));
  ASSERT_NEAR(o.progress_interval_s, 0.0, 0);
  ASSERT_NEAR(o.straggler_threshold, 2.5, 0);
  ASSERT_EQ(o.progress_concurrency, 2);
  ASSERT_EQ(ctl_options_parse(&o, 3, ARGV("c", "--straggler-threshold", "1"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--straggler-threshold");
  ASSERT_EQ(ctl_options_parse(&o, 3, ARGV("c", "--progress-interval", "-1"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--progress-interval");
}

/* The Lease timings (client-go's three), and their order enforced. */
TEST(ctl_lease_flags) {
  ctl_options o;
  char err[256] = "";
  ASSERT_OK(ctl_options_parse(&o, 1, ARGV("c"), err, sizeof(err)));
  ASSERT(o.lease_s == 15 && o.renew_s == 10 && o.retry_s == 2);
  ASSERT_OK(
      ctl_options_parse(&o, 4,
                        ARGV("c", "--leader-elect-lease-duration=8",
                             "--leader-elect-renew-deadline=5", "--leader-elect-retry-period=0.5"),
                        err, sizeof(err)));
  ASSERT(o.lease_s == 8 && o.renew_s == 5 && o.retry_s == 0.5);
  /* 9 s under the default 10 s renew deadline: refused, naming both. */
  ASSERT_EQ(
      ctl_options_parse(&o, 2, ARGV("c", "--leader-elect-lease-duration=9"), err, sizeof(err)),
      CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--leader-elect-renew-deadline (10 s)");
  ASSERT_STR_CONTAINS(err, "--leader-elect-lease-duration (9 s)");
  ASSERT_EQ(ctl_options_parse(&o, 2, ARGV("c", "--leader-elect-retry-period=0"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--leader-elect-retry-period");
}

TEST_MAIN(T(ctl_lease_flags), T(ctl_progress_flags), T(ctl_defaults), T(ctl_values),
          T(ctl_errors_name_flag), T(ctl_every_flag), T(ctl_error_messages))
