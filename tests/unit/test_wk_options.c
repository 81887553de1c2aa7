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

TEST(wk_device_replicas) {
  wk_options o;
  char err[256] = "";
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)));
  ASSERT_EQ(o.device, WK_DEVICE_AUTO);
  ASSERT_EQ(o.replicas, 0);
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--device", "cpu:2"), err, sizeof(err)));
  ASSERT_EQ(o.device, WK_DEVICE_CPU);
  ASSERT_EQ(o.replicas, 2);
  ASSERT_OK(wk_options_parse(&o, 3, ARGV("w", "--device=gpu:8", "train"), err, sizeof(err)));
  ASSERT_EQ(o.device, WK_DEVICE_GPU);
  ASSERT_EQ(o.replicas, 8);
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--device", "gpu"), err, sizeof(err)));
  ASSERT_EQ(o.device, WK_DEVICE_GPU);
  ASSERT_EQ(o.replicas, 0);
  const char *bad[] = {"cpu:0", "cpu:65", "gpu:", "auto:2", "tpu", "cpu:2x", "cpu2"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ASSERT_EQ(
        wk_options_parse(&o, 4, ARGV("w", "train", "--device", (char *)bad[i]), err, sizeof(err)),
        CTRAIN_E_INVAL);
    ASSERT_STR_CONTAINS(err, "--device: '");
    ASSERT_STR_CONTAINS(err, "is not cpu, cpu:R, gpu, gpu:R or auto");
  }
}

TEST(wk_table_values_and_messages) {
  wk_options o;
  char err[256] = "";
  ASSERT_OK(wk_options_parse(&o, 15,
                             ARGV("w", "train", "--format", "raw", "--shard", "data", "--seed",
                                  "18446744073709551615", "--collective", "ring", "--save-freq",
                                  "epoch", "--nesterov", "--log-level", "debug"),
                             err, sizeof(err)));
  ASSERT_EQ(o.format, DATA_FMT_RAW);
  ASSERT_EQ(o.shard, DATA_SHARD_DATA);
  ASSERT(o.seed == 18446744073709551615ull);
  ASSERT_EQ(o.collective, WK_COLL_RING);
  ASSERT_EQ(o.save_freq, 0);
  ASSERT_EQ(o.nesterov, 1);
  ASSERT_STR_EQ(o.log_level, "debug");
  ASSERT_STR_EQ(o.command, "train");
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--format", "csv"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--format: 'csv' is not idx, raw, tfrecord, numpy or auto");
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--shard", "x"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--shard: 'x' is not auto, file, data or off");
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--lr", "0"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--lr: '0' is not a positive number");
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--momentum", "1"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--momentum: '1' is not a number in [0, 1)");
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--log-level", "loud"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--log-level: 'loud' is not one of debug, info, warn, error");
  ASSERT_EQ(wk_options_parse(&o, 3, ARGV("w", "train", "--data"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--data: missing value");
  ASSERT_EQ(wk_options_parse(&o, 3, ARGV("w", "train", "--bogus"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--bogus: unknown flag");
  ASSERT_EQ(wk_options_parse(&o, 3, ARGV("w", "train", "more"), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "unexpected argument 'more'");
  ASSERT_EQ(wk_options_parse(&o, 2, ARGV("w", "evaluate"), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "evaluate needs --model");
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "-h"), err, sizeof(err)));
  ASSERT_EQ(o.show_help, 1);
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "--version"), err, sizeof(err)));
  ASSERT_EQ(o.show_version, 1);
}

/* --progress-port: the flag, else $CTRAIN_PROGRESS_PORT, else 0 (off);
 * --termination-log: '' turns it off, a path is kept. */
TEST(wk_progress_port_and_termination_log) {
  wk_options o;
  char err[256] = "";
  unsetenv("CTRAIN_PROGRESS_PORT");
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)));
  ASSERT_EQ(o.progress_port, 0);
  setenv("CTRAIN_PROGRESS_PORT", "8471", 1);
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)));
  ASSERT_EQ(o.progress_port, 8471);
  ASSERT_OK(
      wk_options_parse(&o, 4, ARGV("w", "train", "--progress-port", "9000"), err, sizeof(err)));
  ASSERT_EQ(o.progress_port, 9000);
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--progress-port", "0"), err, sizeof(err)));
  ASSERT_EQ(o.progress_port, 0);
  setenv("CTRAIN_PROGRESS_PORT", "http", 1);
  ASSERT_EQ(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "CTRAIN_PROGRESS_PORT: 'http' is not a port in 0..65535");
  unsetenv("CTRAIN_PROGRESS_PORT");
  ASSERT_EQ(
      wk_options_parse(&o, 4, ARGV("w", "train", "--progress-port", "70000"), err, sizeof(err)),
      CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--progress-port");
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--termination-log", "/tmp/t.json"), err,
                             sizeof(err)));
  ASSERT_STR_EQ(o.termination_log, "/tmp/t.json");
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--termination-log", ""), err, sizeof(err)));
  ASSERT_NULL(o.termination_log);
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)));
  if (access("/dev/termination-log", W_OK) == 0)
    ASSERT_STR_EQ(o.termination_log, "/dev/termination-log");
  else
    ASSERT_NULL(o.termination_log);
}

TEST(wk_data_format_flags) {
  wk_options o;
  char err[256] = "";
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)));
  ASSERT_EQ(o.format, DATA_FMT_AUTO);
  ASSERT_EQ(o.compression, DATA_COMP_AUTO);
  ASSERT_EQ(o.image_rank, 0);
  ASSERT_NULL(o.feature_image);
  ASSERT_OK(wk_options_parse(&o, 12,
                             ARGV("w", "train", "--data-format", "tfrecord", "--compression",
                                  "zlib", "--feature-image", "pixels", "--feature-label", "y",
                                  "--image-shape", "28,28,1"),
                             err, sizeof(err)));
  ASSERT_EQ(o.format, DATA_FMT_TFRECORD);
  ASSERT_EQ(o.compression, DATA_COMP_ZLIB);
  ASSERT_STR_EQ(o.feature_image, "pixels");
  ASSERT_STR_EQ(o.feature_label, "y");
  ASSERT_EQ(o.image_rank, 3);
  ASSERT_EQ(o.image_shape[0], 28);
  ASSERT_EQ(o.image_shape[2], 1);
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--image-shape", "784"), err, sizeof(err)));
  ASSERT_EQ(o.image_rank, 1);
  ASSERT_EQ(o.image_shape[0], 784);
  char b0[] = "", b1[] = "0,28", b2[] = "28,", b3[] = "28,28,1,1", b4[] = "65537", b5[] = "x",
       b6[] = "28;28";
  char *bad[] = {b0, b1, b2, b3, b4, b5, b6};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ASSERT_EQ(
        wk_options_parse(&o, 4, ARGV("w", "train", "--image-shape", bad[i]), err, sizeof(err)),
        CTRAIN_E_INVAL);
    ASSERT_STR_CONTAINS(err, "H[,W[,C]], each in 1..65536");
  }
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--compression", "lz4"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_EQ(err, "--compression: 'lz4' is not auto, none, gzip or zlib");
}

TEST(wk_tensorboard_flags) {
  wk_options o;
  char err[256] = "";
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)));
  ASSERT_NULL(o.tensorboard_dir);
  ASSERT_EQ(o.tensorboard_freq, 0);
  ASSERT_OK(wk_options_parse(
      &o, 6, ARGV("w", "train", "--tensorboard-dir", "/tb", "--tensorboard-freq", "50"), err,
      sizeof(err)));
  ASSERT_STR_EQ(o.tensorboard_dir, "/tb");
  ASSERT_EQ(o.tensorboard_freq, 50);
  ASSERT_EQ(
      wk_options_parse(&o, 4, ARGV("w", "train", "--tensorboard-freq", "-1"), err, sizeof(err)),
      CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "a non-negative step count (0: epochs only)");
}

TEST(wk_overlap_flags) {
  wk_options o;
  char err[256] = "";
  ASSERT_OK(wk_options_parse(&o, 2, ARGV("w", "train"), err, sizeof(err)));
  ASSERT_EQ(o.overlap, WK_OVERLAP_AUTO);
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--overlap", "on"), err, sizeof(err)));
  ASSERT_EQ(o.overlap, WK_OVERLAP_ON);
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--overlap", "off"), err, sizeof(err)));
  ASSERT_EQ(o.overlap, WK_OVERLAP_OFF);
  ASSERT_OK(wk_options_parse(&o, 3, ARGV("w", "train", "--no-overlap"), err, sizeof(err)));
  ASSERT_EQ(o.overlap, WK_OVERLAP_OFF);
  ASSERT_OK(wk_options_parse(&o, 5, ARGV("w", "train", "--no-overlap", "--overlap", "off"), err,
                             sizeof(err)));
  ASSERT_EQ(o.overlap, WK_OVERLAP_OFF);
  ASSERT_EQ(wk_options_parse(&o, 5, ARGV("w", "train", "--no-overlap", "--overlap", "on"), err,
                             sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--no-overlap and --overlap on");
  ASSERT_EQ(wk_options_parse(&o, 4, ARGV("w", "train", "--overlap", "sometimes"), err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--overlap");
}

/* Whether `out` has a flag line "  [-h, ]--name[ METAVAR]" ending there or
 * followed by two spaces (the help). */
static int has_flag_line(const char *out, const char *head) {
  size_t n = strlen(head);
  for (const char *at = strstr(out, head); at; at = strstr(at + 1, head)) {
    int line_start = at - out >= 3 && (!strncmp(at - 3, "\n  ", 3) ||
                                       (at - out >= 7 && !strncmp(at - 7, "\n  -h, ", 7)));
    if (line_start && (at[n] == '\n' || (at[n] == ' ' && at[n + 1] == ' ')))
      return 1;
  }
  return 0;
}

/* --help is printed from the flag table: every flag of it, with its metavar,
 * one line each, and no flag line besides. */
TEST(wk_help_lists_the_table) {
  FILE *f = tmpfile();
  ASSERT_NOT_NULL(f);
  wk_options_usage(f);
  long len = ftell(f);
  ASSERT_GT(len, 0);
  char *out = calloc((size_t)len + 1, 1);
  ASSERT_NOT_NULL(out);
  rewind(f);
  ASSERT_EQ(fread(out, 1, (size_t)len, f), len);
  fclose(f);
  size_t nflags = 0;
  const char *name, *metavar;
  while ((name = wk_options_flag(nflags, &metavar))) {
    char head[128];
    snprintf(head, sizeof(head), "--%s%s%s", name, metavar ? " " : "", metavar ? metavar : "");
    if (!has_flag_line(out, head))
      TEST_FAIL_("--help has no line for '%s'", head);
    nflags++;
  }
  ASSERT_GE(nflags, 40);
  size_t lines = 0;
  for (const char *p = strstr(out, "\n  -"); p; p = strstr(p + 1, "\n  -"))
    lines++;
  ASSERT_EQ(lines, nflags);
  free(out);
}

/* The streaming reader's flags: on with --data-stream or an object URI,
 * refused without it, each bound named. */
TEST(wk_stream_flags) {
  wk_options o;
  char err[256] = "";
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--data", "/d/train-*.tfrecord"), err,
                             sizeof(err)));
  ASSERT(!wk_options_streaming(&o));
  ASSERT_EQ(o.shuffle_buffer, -1);
  ASSERT_EQ(o.prefetch, 0);
  ASSERT_OK(wk_options_parse(&o, 4, ARGV("w", "train", "--data", "/d/a.tfrecord,s3://b/p/"), err,
                             sizeof(err)));
  ASSERT(wk_options_streaming(&o));
  ASSERT_OK(wk_options_parse(&o, 11,
                             ARGV("w", "train", "--data", "/d", "--data-stream", "--shuffle-buffer",
                                  "0", "--data-prefetch-bytes", "1048576", "--data-cache", "/c"),
                             err, sizeof(err)));
  ASSERT(wk_options_streaming(&o));
  ASSERT_EQ(o.shuffle_buffer, 0);
  ASSERT_EQ(o.prefetch, 1048576);
  ASSERT_STR_EQ(o.data_cache, "/c");
  ASSERT_EQ(wk_options_parse(&o, 6, ARGV("w", "train", "--data", "/d", "--shuffle-buffer", "9"),
                             err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--shuffle-buffer: applies to the streaming reader");
  ASSERT_EQ(wk_options_parse(&o, 6, ARGV("w", "train", "--data", "/d", "--data-cache", "/c"), err,
                             sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--data-cache");
  ASSERT_EQ(wk_options_parse(&o, 7,
                             ARGV("w", "train", "--data", "s3://b/p/", "--data-prefetch-bytes", "1",
                                  "--data-stream"),
                             err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--data-prefetch-bytes 1:");
  ASSERT_EQ(wk_options_parse(&o, 6, ARGV("w", "train", "--data", "s3://b/p", "--format", "idx"),
                             err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--data-format idx");
  ASSERT_EQ(wk_options_parse(&o, 5,
                             ARGV("w", "train", "--data-stream", "--shuffle-buffer", "99999999"),
                             err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--shuffle-buffer 99999999");
}

TEST_MAIN(T(wk_stream_flags), T(wk_defaults_and_values), T(wk_errors_name_flag),
          T(wk_device_replicas), T(wk_table_values_and_messages), T(wk_data_format_flags),
          T(wk_tensorboard_flags), T(wk_progress_port_and_termination_log), T(wk_overlap_flags),
          T(wk_help_lists_the_table))
