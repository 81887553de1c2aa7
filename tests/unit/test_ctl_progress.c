/* test_ctl_progress.c - the controller's reading of a chief's /progress
 * (controller/progress.h): the answer as status.progress, the read token. */
#include "test.h"

#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controller/progress.h"

#define NOW 1700000000LL /* 2023-11-14T22:13:20Z */

static const char *ANSWER =
    "{\"state\":\"Training\",\"rank\":0,\"epoch\":2,\"epochs\":2,\"step\":19,"
    "\"steps_per_epoch\":1875,\"global_step\":1894,\"replicas_in_sync\":4,\"workers\":3,"
    "\"samples_per_sec\":16500.5432,\"loss\":0.401234,\"accuracy\":0.84,\"val_loss\":0.44,"
    "\"val_accuracy\":null,\"step_ms\":1.1,\"median_ms\":0.85,\"slowest_ratio\":2.1234,"
    "\"slowest_rank\":2,\"worker_ms\":[0.85,0.8,1.8],\"backup_step\":null}";

static double num(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  ASSERT(cJSON_IsNumber(v));
  return v->valuedouble;
}

TEST(answer_becomes_status_progress) {
  cJSON *p = NULL;
  int rank = 0;
  double ratio = 0;
  ASSERT_OK(ctl_progress_parse(ANSWER, strlen(ANSWER), NOW, &p, &rank, &ratio, NULL, 0));
  ASSERT_EQ(num(p, "epoch"), 2);
  ASSERT_EQ(num(p, "epochs"), 2);
  ASSERT_EQ(num(p, "step"), 19);
  ASSERT_EQ(num(p, "stepsPerEpoch"), 1875);
  ASSERT_EQ(num(p, "replicasInSync"), 4);
  ASSERT_NEAR(num(p, "samplesPerSec"), 16500.5, 1e-9);
  ASSERT_NEAR(num(p, "loss"), 0.4012, 1e-12);
  ASSERT_NEAR(num(p, "accuracy"), 0.84, 1e-12);
  ASSERT_NEAR(num(p, "valLoss"), 0.44, 1e-12);
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(p, "valAccuracy")); /* null: left out */
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(p, "backupStep"));
  const cJSON *sw = cJSON_GetObjectItemCaseSensitive(p, "slowestWorker");
  ASSERT_EQ(num(sw, "rank"), 2);
  ASSERT_NEAR(num(sw, "ratio"), 2.12, 1e-12);
  ASSERT_STR_EQ(cJSON_GetObjectItemCaseSensitive(p, "lastPollTime")->valuestring,
                "2023-11-14T22:13:20Z");
  ASSERT_EQ(rank, 2);
  ASSERT_NEAR(ratio, 2.1234, 1e-12);
  /* Nothing the schema would prune (a status that differs after every write). */
  const char *allowed[] = {"epoch",         "epochs",        "step",           "globalStep",
                           "stepsPerEpoch", "samplesPerSec", "loss",           "accuracy",
                           "valLoss",       "valAccuracy",   "replicasInSync", "backupStep",
                           "slowestWorker", "lastPollTime"};
  const cJSON *it;
  cJSON_ArrayForEach(it, p) {
    int ok = 0;
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
      ok |= !strcmp(it->string, allowed[i]);
    if (!ok)
      TEST_FAIL_("unexpected field %s", it->string);
  }
  cJSON_Delete(p);
}

/* What python/ctrain_keras serves from a stock TensorFlow chief (its test,
 * 2 workers under MultiWorkerMirroredStrategy, rank 1 slowed), verbatim. */
TEST(keras_callback_answer) {
  static const char *keras =
      "{\"state\":\"Training\",\"rank\":0,\"epoch\":2,\"epochs\":2,\"step\":64,"
      "\"steps_per_epoch\":64,\"global_step\":128,\"replicas_in_sync\":2,\"workers\":2,"
      "\"samples_per_sec\":744.1,\"loss\":0.660629,\"accuracy\":0.7771,\"val_loss\":null,"
      "\"val_accuracy\":null,\"step_ms\":36.21,\"median_ms\":36.21,\"slowest_ratio\":2.375,"
      "\"slowest_rank\":1,\"worker_ms\":[36.21,86.003],\"backup_step\":null}\n";
  cJSON *p = NULL;
  int rank = 0;
  double ratio = 0;
  ASSERT_OK(ctl_progress_parse(keras, strlen(keras), NOW, &p, &rank, &ratio, NULL, 0));
  ASSERT_EQ(num(p, "epoch"), 2);
  ASSERT_NEAR(num(p, "accuracy"), 0.7771, 1e-12);
  ASSERT_NEAR(num(p, "samplesPerSec"), 744.1, 1e-9);
  ASSERT_EQ(rank, 1);
  ASSERT_NEAR(ratio, 2.375, 1e-12);
  cJSON_Delete(p);
}

TEST(single_worker_has_no_straggler) {
  const char *a = "{\"epoch\":1,\"workers\":1,\"slowest_rank\":0,\"slowest_ratio\":1.0,"
                  "\"worker_ms\":[0.85]}";
  cJSON *p = NULL;
  int rank = 0;
  double ratio = 0;
  ASSERT_OK(ctl_progress_parse(a, strlen(a), NOW, &p, &rank, &ratio, NULL, 0));
  ASSERT_EQ(rank, -1);
  ASSERT(isnan(ratio));
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(p, "slowestWorker"));
  cJSON_Delete(p);
  const char *b = "{\"state\":\"Starting\",\"epoch\":null,\"workers\":2,\"slowest_rank\":-1,"
                  "\"slowest_ratio\":null}";
  ASSERT_OK(ctl_progress_parse(b, strlen(b), NOW, &p, &rank, &ratio, NULL, 0));
  ASSERT_EQ(rank, -1);
  ASSERT_EQ(cJSON_GetArraySize(p), 1); /* lastPollTime only */
  cJSON_Delete(p);
}

TEST(not_json_is_a_parse_error) {
  const char *bad[] = {"", "Unauthorized", "[1,2]", "{\"epoch\":", "null"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cJSON *p = (cJSON *)1;
    int rank = 0;
    double ratio = 0;
    ASSERT_EQ(ctl_progress_parse(bad[i], strlen(bad[i]), NOW, &p, &rank, &ratio, NULL, 0),
              CTRAIN_E_PARSE);
    ASSERT_NULL(p);
    ASSERT_EQ(rank, -1);
  }
}

/* {"epoch":1e300} made every status write of the job fail
 * with 422 (written back as 1e+300, not an int64), {"slowest_rank":1e300}
 * was an undefined float-to-int cast. Such an answer is a failed poll. */
TEST(out_of_range_values_are_a_failed_poll) {
  static const char *const bad[][2] = {
      {"{\"epoch\":1e300}", "epoch: 1e+300"},
      {"{\"step\":1e15}", "step: 1e+15"},
      {"{\"epochs\":-1}", "epochs: -1"},
      {"{\"epoch\":1.5}", "epoch: 1.5 is not an integer"},
      {"{\"loss\":-1e300}", "loss: -1e+300"},
      {"{\"samples_per_sec\":\"fast\"}", "samples_per_sec is not a number"},
      {"{\"workers\":3,\"slowest_rank\":1e300,\"slowest_ratio\":2}", "slowest_rank: 1e+300"},
      {"{\"workers\":3,\"slowest_rank\":-2,\"slowest_ratio\":2}", "slowest_rank: -2"},
      {"{\"workers\":3,\"slowest_rank\":3,\"slowest_ratio\":2}", "slowest_rank 3 is not below"},
      {"{\"workers\":3,\"slowest_rank\":1,\"slowest_ratio\":1e300}", "slowest_ratio: 1e+300"},
      {"{\"workers\":1e300}", "workers: 1e+300"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    cJSON *p = (cJSON *)1;
    int rank = 0;
    double ratio = 0;
    char why[256] = "";
    ASSERT_EQ(
        ctl_progress_parse(bad[i][0], strlen(bad[i][0]), NOW, &p, &rank, &ratio, why, sizeof(why)),
        CTRAIN_E_PARSE);
    ASSERT_NULL(p);
    ASSERT_EQ(rank, -1);
    ASSERT_STR_CONTAINS(why, bad[i][1]);
  }
  /* At the bounds: accepted, and written back without an exponent. */
  const char *ok = "{\"epoch\":999999999999999,\"step\":0,\"loss\":-999999999999999,"
                   "\"workers\":4097,\"slowest_rank\":4096,\"slowest_ratio\":1e6}";
  cJSON *p = NULL;
  int rank = 0;
  double ratio = 0;
  ASSERT_OK(ctl_progress_parse(ok, strlen(ok), NOW, &p, &rank, &ratio, NULL, 0));
  ASSERT_EQ(rank, 4096);
  char *text = cJSON_PrintUnformatted(p);
  ASSERT_STR_CONTAINS(text, "\"epoch\":999999999999999,");
  ASSERT_STR_CONTAINS(text, "\"loss\":-999999999999999,");
  cJSON_free(text);
  cJSON_Delete(p);
}

/* The worker's derivation (worker/progress.h): hex(HMAC-SHA256(token, label)). */
TEST(read_token_is_the_workers_hmac) {
  char out[CTRAIN_PROGRESS_TOKEN_HEX + 1];
  ctrain_progress_read_token("0123abcd", out);
  ASSERT_STR_EQ(out, "b3593b36a07d0723d5191710fd1435fad3dd1c95a3fb2afb63ce65a3d2f7926d");
}

/* The deadline judges the chief's position in the whole
 * run, so its global step (the ctrain worker's and ctrain_keras's
 * global_step) becomes status.progress.globalStep, bounded as the other
 * integers. */
TEST(global_step_becomes_status_progress) {
  cJSON *p = NULL;
  int rank = 0;
  double ratio = 0;
  ASSERT_OK(ctl_progress_parse(ANSWER, strlen(ANSWER), NOW, &p, &rank, &ratio, NULL, 0));
  ASSERT_EQ(num(p, "globalStep"), 1894);
  cJSON_Delete(p);
  const char *one = "{\"epoch\":3,\"step\":1,\"steps_per_epoch\":1,\"global_step\":3}";
  ASSERT_OK(ctl_progress_parse(one, strlen(one), NOW, &p, &rank, &ratio, NULL, 0));
  ASSERT_EQ(num(p, "epoch"), 3);
  ASSERT_EQ(num(p, "step"), 1);
  ASSERT_EQ(num(p, "globalStep"), 3);
  cJSON_Delete(p);
  const char *none = "{\"epoch\":3,\"step\":1,\"global_step\":null}";
  ASSERT_OK(ctl_progress_parse(none, strlen(none), NOW, &p, &rank, &ratio, NULL, 0));
  ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(p, "globalStep"));
  cJSON_Delete(p);
  char why[256] = "";
  const char *bad = "{\"global_step\":1e300}";
  p = (cJSON *)1;
  ASSERT_EQ(ctl_progress_parse(bad, strlen(bad), NOW, &p, &rank, &ratio, why, sizeof(why)),
            CTRAIN_E_PARSE);
  ASSERT_NULL(p);
  ASSERT_STR_CONTAINS(why, "global_step: 1e+300");
}

TEST_MAIN(T(answer_becomes_status_progress), T(keras_callback_answer),
          T(single_worker_has_no_straggler), T(out_of_range_values_are_a_failed_poll),
          T(not_json_is_a_parse_error), T(read_token_is_the_workers_hmac),
          T(global_step_becomes_status_progress))
