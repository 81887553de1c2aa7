/* test_train_report.c - the chief's reports: the slowest worker against the
 * median, and the termination message (fields, nulls, escaping, the 4 KiB
 * cap, the file). */
#include "test.h"

#include <cjson/cJSON.h>
#include <fcntl.h>

#include "worker/train_report.h"

static double num(const cJSON *j, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);
  if (!cJSON_IsNumber(v))
    TEST_FAIL_("termination message: %s is not a number", k);
  return v->valuedouble;
}

static void final_snapshot(progress_snapshot *s) {
  progress_snapshot_init(s);
  s->state = PROGRESS_SUCCEEDED;
  s->epoch = 5;
  s->global_step = 9375;
  s->loss = 0.301234;
  s->accuracy = 0.889;
  s->val_loss = 0.35;
  s->val_accuracy = 0.8731;
  s->samples_per_sec = 20000.5;
  s->replicas_in_sync = 2;
}

TEST(slowest_and_median) {
  double ms[] = {2.0, 9.0, 3.0, 1.0}, median = 0;
  ASSERT_EQ(train_report_slowest(ms, 4, &median), 1);
  ASSERT_NEAR(median, 2.0, 0); /* the lower median of an even count */
  double two[] = {4.0, 12.0};
  ASSERT_EQ(train_report_slowest(two, 2, &median), 1);
  ASSERT_NEAR(median, 4.0, 0); /* two workers: the slow one against the other (ratio 3) */
  double one[] = {5.0};
  ASSERT_EQ(train_report_slowest(one, 1, &median), 0);
  ASSERT_NEAR(median, 5.0, 0);
}

TEST(termination_json_success) {
  progress_snapshot s;
  final_snapshot(&s);
  char out[TRAIN_REPORT_TERMINATION_MAX];
  size_t n = train_report_termination_json(&s, "/models/fmnist", NULL, out, sizeof(out));
  ASSERT_EQ(n, strlen(out));
  ASSERT_EQ(out[n - 1], '\n');
  cJSON *j = cJSON_Parse(out);
  ASSERT_NOT_NULL(j);
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(j, "state")->valuestring, "Succeeded");
  ASSERT_NEAR(num(j, "loss"), 0.301234, 1e-9);
  ASSERT_NEAR(num(j, "accuracy"), 0.889, 1e-9);
  ASSERT_NEAR(num(j, "val_loss"), 0.35, 1e-9);
  ASSERT_NEAR(num(j, "val_accuracy"), 0.8731, 1e-9);
  ASSERT_NEAR(num(j, "samples_per_sec"), 20000.5, 1e-9);
  ASSERT_NEAR(num(j, "epochs"), 5, 0);
  ASSERT_NEAR(num(j, "steps"), 9375, 0);
  ASSERT_NEAR(num(j, "replicas_in_sync"), 2, 0);
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(j, "model")->valuestring, "/models/fmnist");
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(j, "error"));
  cJSON_Delete(j);
}

TEST(termination_json_failure_nulls_escapes_and_fits_4k) {
  progress_snapshot s;
  progress_snapshot_init(&s);
  s.state = PROGRESS_FAILED;
  /* An error longer than the message may be, with quotes, a backslash, a
   * newline and multi-byte UTF-8 to cut. */
  char err[6000];
  size_t k = 0;
  k += (size_t)snprintf(err, sizeof(err), "peer \"rank 1\" lost\\\n");
  while (k + 3 < sizeof(err)) {
    memcpy(err + k, "\xc3\xa9", 2); /* é */
    k += 2;
  }
  err[k] = '\0';
  char model[3000];
  memset(model, 'm', sizeof(model) - 1);
  model[sizeof(model) - 1] = '\0';
  char out[TRAIN_REPORT_TERMINATION_MAX];
  size_t n = train_report_termination_json(&s, model, err, out, sizeof(out));
  ASSERT_LT(n, TRAIN_REPORT_TERMINATION_MAX);
  cJSON *j = cJSON_Parse(out);
  if (!j)
    TEST_FAIL_("not JSON: %s", out);
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(j, "state")->valuestring, "Failed");
  ASSERT(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "loss")));
  ASSERT(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "val_accuracy")));
  const char *e = cJSON_GetObjectItemCaseSensitive(j, "error")->valuestring;
  ASSERT_NOT_NULL(e);
  ASSERT(!strncmp(e, "peer \"rank 1\" lost\\\n\xc3\xa9", 22));
  ASSERT_GT(strlen(e), 1000);
  ASSERT_EQ(strlen(e) % 2, 0); /* 20 ASCII bytes then whole é's: no cut character */
  ASSERT_GT(strlen(cJSON_GetObjectItemCaseSensitive(j, "model")->valuestring), 1000);
  cJSON_Delete(j);
  /* A NULL model is null; a diverged loss is a short number, not 300
   * digits. */
  s.loss = 1e300;
  s.accuracy = -1e300;
  train_report_termination_json(&s, NULL, "x", out, sizeof(out));
  j = cJSON_Parse(out);
  ASSERT_NOT_NULL(j);
  ASSERT(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "model")));
  ASSERT_NEAR(num(j, "loss") / 1e300, 1.0, 1e-6);
  ASSERT_NEAR(num(j, "accuracy") / 1e300, -1.0, 1e-6);
  ASSERT_LT(strlen(out), 300);
  cJSON_Delete(j);
}

TEST(termination_file_written_once_replacing) {
  char path[] = "/tmp/test_train_report_XXXXXX";
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  ASSERT_EQ(write(fd, "old content that is longer than nothing", 39), 39);
  close(fd);
  progress_snapshot s;
  final_snapshot(&s);
  char err[256] = "", buf[TRAIN_REPORT_TERMINATION_MAX + 1];
  ASSERT_OK(train_report_termination(path, &s, "/out", NULL, err, sizeof(err)));
  fd = open(path, O_RDONLY);
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  ASSERT_GT(n, 0);
  buf[n] = '\0';
  char want[TRAIN_REPORT_TERMINATION_MAX];
  train_report_termination_json(&s, "/out", NULL, want, sizeof(want));
  ASSERT_STR_EQ(buf, want);
  unlink(path);
  ASSERT_EQ(train_report_termination("/nonexistent-dir/x", &s, NULL, NULL, err, sizeof(err)),
            CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "--termination-log /nonexistent-dir/x");
}

TEST_MAIN(T(slowest_and_median), T(termination_json_success),
          T(termination_json_failure_nulls_escapes_and_fits_4k),
          T(termination_file_written_once_replacing))
