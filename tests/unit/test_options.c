/* test_options.c - flag parsing of both programs: defaults, values, and
 * errors that name the flag. */
#include "test.h"

#include "ctrain/ctl_options.h"
#include "ctrain/wk_options.h"

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

TEST(wk_defaults_and_values) {
  wk_options o;
  char err[256] = "";
  unsetenv("CTRAIN_BACKUP_DIR");
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)));
  ASSERT_EQ(o.epochs, 1);
  ASSERT_EQ(o.batch, 32);
  ASSERT_EQ(o.save_freq, 0);
  ASSERT_EQ(o.keep, 2);
  ASSERT_NULL(o.backup_dir);
  setenv("CTRAIN_BACKUP_DIR", "/ckpt", 1);
  ASSERT_OK(wk_options_parse(
      &o, 8, ARGV("w", "train", "--epochs", "3", "--save-freq", "50", "--device", "cpu"), err,
      sizeof(err)));
  ASSERT_EQ(o.epochs, 3);
  ASSERT_EQ(o.save_freq, 50);
  ASSERT_EQ(o.device, WK_DEVICE_CPU);
  ASSERT_STR_EQ(o.backup_dir, "/ckpt");
  unsetenv("CTRAIN_BACKUP_DIR");
}

TEST(wk_errors_name_flag) {
  wk_options o;
  char err[256] = "";
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--batch", "-1"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--batch");
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--save-freq", "often"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--save-freq");
  ASSERT_EQ(wk_options_parse(&o, 2, ARGV("w", "serve"), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "serve");
  ASSERT_EQ(wk_options_parse(&o, 1, ARGV("w"), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "missing command");
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--lr", "nan"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--lr");
}

TEST_MAIN(T(ctl_defaults), T(ctl_values), T(ctl_errors_name_flag), T(wk_defaults_and_values),
          T(wk_errors_name_flag))
