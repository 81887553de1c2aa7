/* test_tfconfig.c - TF_CONFIG parsing, TF's validation errors, ranks, rendering. */
#include "test.h"

#include "ctrain/tfconfig.h"

#define CLUSTER3                                                                                   \
  "\"cluster\":{\"chief\":[\"c0:2222\"],\"worker\":[\"w0:2222\",\"w1:2222\"],"                     \
  "\"evaluator\":[\"e0:2222\"]}"

static ctrain_err parse(tfconfig *tc, const char *json, char *err) {
  return tfconfig_parse(tc, json, err, 256);
}

TEST(no_config_is_local) {
  tfconfig tc;
  char err[256] = "";
  ASSERT_OK(parse(&tc, NULL, err));
  ASSERT_EQ(tc.local, 1);
  ASSERT_EQ(tc.world, 1);
  ASSERT_EQ(tc.rank, 0);
  ASSERT_EQ(tc.is_chief, 1);
  tfconfig_free(&tc);
  ASSERT_OK(parse(&tc, "  ", err));
  ASSERT_EQ(tc.local, 1);
  ASSERT_OK(parse(&tc, "{}", err));
  ASSERT_EQ(tc.local, 1);
  ASSERT_OK(parse(&tc, "{\"cluster\":{},\"task\":{\"type\":\"worker\",\"index\":3}}", err));
  ASSERT_EQ(tc.local, 1);
  tfconfig_free(&tc);
}

TEST(ranks_with_chief) {
  tfconfig tc;
  char err[256] = "";
  ASSERT_OK(parse(&tc, "{" CLUSTER3 ",\"task\":{\"type\":\"chief\",\"index\":0}}", err));
  ASSERT_EQ(tc.rank, 0);
  ASSERT_EQ(tc.world, 3);
  ASSERT_EQ(tc.is_chief, 1);
  ASSERT_STR_EQ(tc.addrs[0], "c0:2222");
  ASSERT_STR_EQ(tc.addrs[1], "w0:2222");
  ASSERT_STR_EQ(tc.addrs[2], "w1:2222");
  tfconfig_free(&tc);
  ASSERT_OK(parse(&tc, "{" CLUSTER3 ",\"task\":{\"type\":\"worker\",\"index\":1}}", err));
  ASSERT_EQ(tc.rank, 2);
  ASSERT_EQ(tc.is_chief, 0);
  ASSERT_STR_EQ(tc.self_addr, "w1:2222");
  tfconfig_free(&tc);
  ASSERT_OK(parse(&tc, "{" CLUSTER3 ",\"task\":{\"type\":\"evaluator\",\"index\":0}}", err));
  ASSERT_EQ(tc.rank, -1);
  ASSERT_EQ(tc.world, 3);
  ASSERT_EQ(tc.n_evaluator, 1);
  ASSERT_STR_EQ(tc.self_addr, "e0:2222");
  tfconfig_free(&tc);
}

TEST(ranks_without_chief) {
  tfconfig tc;
  char err[256] = "";
  ASSERT_OK(parse(&tc,
                  "{\"cluster\":{\"worker\":[\"a:1\",\"b:2\"]},"
                  "\"task\":{\"type\":\"worker\",\"index\":\"1\"},\"environment\":\"cloud\"}",
                  err));
  ASSERT_EQ(tc.rank, 1);
  ASSERT_EQ(tc.world, 2);
  ASSERT_EQ(tc.is_chief, 0);
  tfconfig_free(&tc);
  ASSERT_OK(parse(
      &tc, "{\"cluster\":{\"worker\":[\"a:1\",\"b:2\"]},\"task\":{\"type\":\"worker\"}}", err));
  ASSERT_EQ(tc.rank, 0);
  ASSERT_EQ(tc.is_chief, 1);
  tfconfig_free(&tc);
}

static void expect_err(const char *json, ctrain_err code, const char *needle) {
  tfconfig tc;
  char err[256] = "";
  ASSERT_EQ(parse(&tc, json, err), code);
  ASSERT_STR_CONTAINS(err, needle);
  ASSERT_NULL(tc.addrs);
  ASSERT_EQ(tc.world, 0);
}

TEST(errors_name_the_field) {
  expect_err("{\"cluster\":", CTRAIN_E_PARSE, "malformed JSON");
  expect_err("[1,2]", CTRAIN_E_CONFIG, "JSON object");
  expect_err("{\"cluster\":{\"master\":[\"a:1\"]},\"task\":{\"type\":\"master\",\"index\":0}}",
             CTRAIN_E_CONFIG, "cluster.master: unrecognized task type 'master'");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"boss\",\"index\":0}}",
             CTRAIN_E_CONFIG, "task.type: unrecognized task type 'boss'");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"chief\",\"index\":0}}",
             CTRAIN_E_CONFIG, "'chief' not found in cluster");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":1}}",
             CTRAIN_E_CONFIG, "task.index: the `task_id` 1 exceeds the maximum id of worker");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":-1}}",
             CTRAIN_E_CONFIG, "task.index");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\",\"index\":0.5}}",
             CTRAIN_E_CONFIG, "task.index");
  expect_err("{\"cluster\":{\"chief\":[\"a:1\",\"b:1\"]},\"task\":{\"type\":\"chief\"}}",
             CTRAIN_E_CONFIG, "cluster.chief: the `chief` job should have at most one task");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"],\"evaluator\":[\"e:1\",\"f:1\"]},"
             "\"task\":{\"type\":\"worker\"}}",
             CTRAIN_E_CONFIG, "cluster.evaluator");
  expect_err("{\"cluster\":{\"worker\":\"a:1\"},\"task\":{\"type\":\"worker\"}}", CTRAIN_E_CONFIG,
             "cluster.worker must be a list");
  expect_err("{\"cluster\":{\"worker\":{\"0\":\"a:1\"}},\"task\":{\"type\":\"worker\"}}",
             CTRAIN_E_CONFIG, "cluster.worker must be a list");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\", 7]},\"task\":{\"type\":\"worker\"}}",
             CTRAIN_E_CONFIG, "cluster.worker[1]");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"]}}", CTRAIN_E_CONFIG, "task:");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"],\"ps\":[\"p:1\"]},\"task\":{\"type\":\"worker\"}}",
             CTRAIN_E_CONFIG, "cluster.ps");
  expect_err("{\"cluster\":{\"evaluator\":[\"e:1\"]},\"task\":{\"type\":\"evaluator\"}}",
             CTRAIN_E_CONFIG, "no chief or worker");
}

TEST(render_round_trips) {
  tfconfig_render_args a = {.job = "mnist",
                            .ns = "ml",
                            .port = 2222,
                            .n_chief = 1,
                            .n_worker = 2,
                            .n_evaluator = 1,
                            .type = TFCONFIG_WORKER,
                            .index = 1};
  char *json = NULL;
  char err[256] = "";
  ASSERT_OK(tfconfig_render(&a, &json, err, sizeof(err)));
  ASSERT_STR_EQ(json, "{\"cluster\":{\"chief\":[\"mnist-chief-0.mnist.ml.svc:2222\"],"
                      "\"worker\":[\"mnist-worker-0.mnist.ml.svc:2222\","
                      "\"mnist-worker-1.mnist.ml.svc:2222\"],"
                      "\"evaluator\":[\"mnist-evaluator-0.mnist.ml.svc:2222\"]},"
                      "\"task\":{\"type\":\"worker\",\"index\":1},\"environment\":\"cloud\"}");
  tfconfig tc;
  ASSERT_OK(tfconfig_parse(&tc, json, err, sizeof(err)));
  ASSERT_EQ(tc.rank, 2);
  ASSERT_EQ(tc.world, 3);
  ASSERT_STR_EQ(tc.self_addr, "mnist-worker-1.mnist.ml.svc:2222");
  tfconfig_free(&tc);
  free(json);
  a.type = TFCONFIG_CHIEF;
  a.index = 0;
  a.n_chief = 0;
  ASSERT_EQ(tfconfig_render(&a, &json, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_NULL(json);
  ASSERT_STR_CONTAINS(err, "'chief' not found");
  a.port = 0;
  ASSERT_EQ(tfconfig_render(&a, &json, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "port");
}

TEST_MAIN(T(no_config_is_local), T(ranks_with_chief), T(ranks_without_chief),
          T(errors_name_the_field), T(render_round_trips))
