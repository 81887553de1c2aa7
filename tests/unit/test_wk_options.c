/* test_wk_options.c - ctrain-worker's flags: defaults, values, and
 * errors that name the flag. */
#include "test.h"

#include "worker/options.h"

#define ARGV(...) ((char *[]){__VA_ARGS__, NULL})
#define ARGC(...) ((int)(sizeof((char *[]){__VA_ARGS__}) / sizeof(char *)))

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

TEST_MAIN(T(wk_defaults_and_values), T(wk_errors_name_flag))
