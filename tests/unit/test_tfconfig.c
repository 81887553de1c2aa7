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

/* A repeated key made the count come from one list and the
 * addresses from the other (heap-buffer-overflow, or a NULL address). Every
 * object level is checked, before anything is looked up. */
TEST(duplicate_keys_are_config_errors) {
  /* Short list first: 1 address copied into a world of 3 (NULL addresses). */
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"],\"worker\":[\"a:1\",\"b:1\",\"c:1\"]},"
             "\"task\":{\"type\":\"worker\",\"index\":2}}",
             CTRAIN_E_CONFIG, "TF_CONFIG: cluster: duplicate key 'worker'");
  /* Long list first: 3 addresses written into a world of 1 (overflow). */
  expect_err("{\"cluster\":{\"worker\":[\"a:1\",\"b:1\",\"c:1\"],\"worker\":[\"a:1\"]},"
             "\"task\":{\"type\":\"worker\",\"index\":0}}",
             CTRAIN_E_CONFIG, "TF_CONFIG: cluster: duplicate key 'worker'");
  expect_err("{\"cluster\":{\"chief\":[\"c:1\"],\"worker\":[\"a:1\"],\"chief\":[\"d:1\"]},"
             "\"task\":{\"type\":\"chief\"}}",
             CTRAIN_E_CONFIG, "cluster: duplicate key 'chief'");
  /* Top level: an empty first cluster would have meant local training. */
  expect_err("{\"cluster\":{},\"cluster\":{\"worker\":[\"a:1\",\"b:1\"]},"
             "\"task\":{\"type\":\"worker\",\"index\":1}}",
             CTRAIN_E_CONFIG, "TF_CONFIG: duplicate key 'cluster'");
  expect_err("{\"cluster\":{\"worker\":[\"a:1\",\"b:1\"]},\"task\":{\"type\":\"worker\"},"
             "\"task\":{\"type\":\"worker\",\"index\":1}}",
             CTRAIN_E_CONFIG, "TF_CONFIG: duplicate key 'task'");
  /* Inside task. */
  expect_err("{\"cluster\":{\"worker\":[\"a:1\",\"b:1\"]},"
             "\"task\":{\"type\":\"worker\",\"index\":0,\"index\":1}}",
             CTRAIN_E_CONFIG, "TF_CONFIG: task: duplicate key 'index'");
  expect_err("{\"cluster\":{\"chief\":[\"c:1\"],\"worker\":[\"a:1\"]},"
             "\"task\":{\"type\":\"chief\",\"type\":\"worker\"}}",
             CTRAIN_E_CONFIG, "TF_CONFIG: task: duplicate key 'type'");
  /* Even where we do not read the value: parsers disagree on the winner. */
  expect_err("{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\"},"
             "\"environment\":\"cloud\",\"environment\":\"google\"}",
             CTRAIN_E_CONFIG, "duplicate key 'environment'");
  /* Many members: the sorted path of the check. */
  char big[4096];
  size_t n = (size_t)snprintf(big, sizeof(big),
                              "{\"cluster\":{\"worker\":[\"a:1\"]},"
                              "\"task\":{\"type\":\"worker\"}");
  for (int i = 0; i < 100; i++)
    n += (size_t)snprintf(big + n, sizeof(big) - n, ",\"k%d\":%d", i, i);
  snprintf(big + n, sizeof(big) - n, ",\"k42\":0}");
  expect_err(big, CTRAIN_E_CONFIG, "TF_CONFIG: duplicate key 'k42'");
  big[n] = '}';
  big[n + 1] = 0;
  tfconfig tc;
  char err[256] = "";
  ASSERT_OK(parse(&tc, big, err));
  ASSERT_EQ(tc.world, 1);
  tfconfig_free(&tc);
  /* The same key in different objects is fine. */
  ASSERT_OK(parse(&tc,
                  "{\"cluster\":{\"worker\":[\"a:1\"]},\"task\":{\"type\":\"worker\"},"
                  "\"x\":{\"type\":1},\"y\":[{\"type\":1},{\"type\":2}]}",
                  err));
  tfconfig_free(&tc);
}

static void split_ok(const char *addr, const char *host, const char *port) {
  char h[TFCONFIG_HOST_MAX + 1], p[TFCONFIG_PORT_MAX + 1], err[256] = "";
  ctrain_err rc = tfconfig_split_hostport(addr, h, sizeof(h), p, sizeof(p), err, sizeof(err));
  if (rc)
    TEST_FAIL_("tfconfig_split_hostport(\"%s\"): %d: %s", addr, rc, err);
  ASSERT_STR_EQ(h, host);
  ASSERT_STR_EQ(p, port);
}

static void split_bad(const char *addr, const char *needle) {
  char h[TFCONFIG_HOST_MAX + 1] = "x", p[TFCONFIG_PORT_MAX + 1] = "x", err[512] = "";
  ASSERT_EQ(tfconfig_split_hostport(addr, h, sizeof(h), p, sizeof(p), err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, needle);
  ASSERT_STR_EQ(h, "");
  ASSERT_STR_EQ(p, "");
}

/* One host:port parser with range checks. */
TEST(split_hostport) {
  split_ok("a:1", "a", "1");
  split_ok("mnist-worker-1.mnist.ml.svc:2222", "mnist-worker-1.mnist.ml.svc", "2222");
  split_ok("127.0.0.1:65535", "127.0.0.1", "65535");
  split_ok("_svc.host.:80", "_svc.host.", "80");
  split_ok("[::1]:2222", "::1", "2222");
  split_ok("[fe80::1%eth0]:2222", "fe80::1%eth0", "2222");
  split_ok("[2001:db8::ffff:10.0.0.1]:1", "2001:db8::ffff:10.0.0.1", "1");
  split_bad(NULL, "empty");
  split_bad("", "empty");
  split_bad("nohostport", "address 'nohostport' is not \"host:port\"");
  split_bad(":2222", "empty host");
  split_bad("a:", "empty port");
  split_bad("a:0", "port 0 is not in 1..65535");
  split_bad("a:99999", "port 99999 is not in 1..65535");
  split_bad("a:65536", "port 65536 is not in 1..65535");
  split_bad("a:4294967297", "not in 1..65535");
  split_bad("a:+80", "not a decimal number");
  split_bad("a:-1", "not a decimal number");
  split_bad("a: 80", "not a decimal number");
  split_bad("a:80 ", "not a decimal number");
  split_bad("a:0x50", "not a decimal number");
  split_bad("a:http", "not a decimal number");
  split_bad("::1:2222", "write an IPv6 address as [v6]:port");
  split_bad("a:1:2", "more than one ':'");
  split_bad("[::1]2222", "expected ':port' after ']'");
  split_bad("[::1]", "expected ':port' after ']'");
  split_bad("[::1:2222", "'[' without ']'");
  split_bad("[]:1", "empty host");
  split_bad("[zz::1]:1", "not an IPv6 address");
  split_bad("[10.0.0.1]:1", "not an IPv6 address");
  split_bad("[fe80::1%]:1", "empty IPv6 zone");
  split_bad("[fe80::1%e/0]:1", "bad character in IPv6 zone");
  split_bad("a b:1", "bad character 0x20 in host");
  split_bad("a/b:1", "bad character 0x2f");
  split_bad("h\xc3\xa9:1", "bad character 0xc3");
  /* Length limits: 253-byte host is fine, 254 is not, nor a host that does
   * not fit the caller's buffer, nor an address over TFCONFIG_ADDR_MAX. */
  char addr[600], host[300];
  memset(host, 'h', 253);
  host[253] = 0;
  snprintf(addr, sizeof(addr), "%s:1", host);
  split_ok(addr, host, "1");
  snprintf(addr, sizeof(addr), "%sh:1", host);
  split_bad(addr, "host longer than 253 bytes");
  memset(addr, 'h', 590);
  addr[590] = 0;
  split_bad(addr, "longer than 261 bytes");
  char h[8], p[2], err[256] = "";
  ASSERT_EQ(tfconfig_split_hostport("longhost:1", h, sizeof(h), p, 6, err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "host longer than 7 bytes");
  ASSERT_EQ(tfconfig_split_hostport("h:12", h, sizeof(h), p, sizeof(p), err, sizeof(err)),
            CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "port longer than 1 bytes");
}

/* Every address, own and peers (the evaluator's too), is
 * checked at parse time, so a bad one is exit 78 naming the task, never a
 * failed listen (75, retried forever) or a port that wraps (99999 listened
 * on 34463) or a random one (0). */
TEST(every_address_is_checked) {
  expect_err("{\"cluster\":{\"worker\":[\"nohostport\",\"b:2\"]},"
             "\"task\":{\"type\":\"worker\",\"index\":0}}",
             CTRAIN_E_CONFIG,
             "TF_CONFIG: cluster.worker[0] (worker 0, this task's own address): address "
             "'nohostport' is not \"host:port\"");
  expect_err("{\"cluster\":{\"worker\":[\"nohostport\",\"b:2\"]},"
             "\"task\":{\"type\":\"worker\",\"index\":1}}",
             CTRAIN_E_CONFIG,
             "TF_CONFIG: cluster.worker[0] (worker 0): address 'nohostport' is not \"host:port\"");
  expect_err("{\"cluster\":{\"chief\":[\"c:99999\"],\"worker\":[\"w:1\"]},"
             "\"task\":{\"type\":\"chief\",\"index\":0}}",
             CTRAIN_E_CONFIG,
             "cluster.chief[0] (chief 0, this task's own address): address "
             "'c:99999': port 99999 is not in 1..65535");
  expect_err("{\"cluster\":{\"chief\":[\"c:1\"],\"worker\":[\"w:1\",\"v:0\"]},"
             "\"task\":{\"type\":\"chief\",\"index\":0}}",
             CTRAIN_E_CONFIG, "cluster.worker[1] (worker 1): address 'v:0': port 0");
  expect_err("{\"cluster\":{\"worker\":[\"w:1\"],\"evaluator\":[\"e\"]},"
             "\"task\":{\"type\":\"worker\",\"index\":0}}",
             CTRAIN_E_CONFIG, "cluster.evaluator[0] (evaluator 0): address 'e'");
  expect_err("{\"cluster\":{\"worker\":[\"w:1\"],\"evaluator\":[\"e:1:2\"]},"
             "\"task\":{\"type\":\"evaluator\"}}",
             CTRAIN_E_CONFIG, "cluster.evaluator[0] (evaluator 0, this task's own address)");
  /* Valid forms all parse, IPv6 included, and come back verbatim. */
  tfconfig tc;
  char err[256] = "";
  ASSERT_OK(parse(&tc,
                  "{\"cluster\":{\"chief\":[\"[::1]:2222\"],\"worker\":[\"10.0.0.2:1\","
                  "\"w.ns.svc:65535\"],\"evaluator\":[\"[fe80::1%eth0]:9\"]},"
                  "\"task\":{\"type\":\"worker\",\"index\":1}}",
                  err));
  ASSERT_STR_EQ(tc.addrs[0], "[::1]:2222");
  ASSERT_STR_EQ(tc.self_addr, "w.ns.svc:65535");
  tfconfig_free(&tc);
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

/* The kubelet's expansion of the one reference $(var) in `tmpl` (the only
 * '$' in what tfconfig_render_ref writes): `value` in its place. */
static char *expand(const char *tmpl, const char *var, const char *value) {
  char ref[64];
  snprintf(ref, sizeof(ref), "$(%s)", var);
  const char *at = strstr(tmpl, ref);
  if (!at || strchr(at + 1, '$') || strchr(tmpl, '$') != at)
    return NULL;
  size_t n = strlen(tmpl) - strlen(ref) + strlen(value) + 1;
  char *s = malloc(n);
  if (s)
    snprintf(s, n, "%.*s%s%s", (int)(at - tmpl), tmpl, value, at + strlen(ref));
  return s;
}

/* The cluster stored once plus each pod's reference, expanded, is the pod's
 * whole TF_CONFIG; the size computed without rendering is the rendered one. */
TEST(render_ref_expands_to_render) {
  static const struct {
    const char *job, *ns;
    int port, chief, workers, eval;
  } cases[] = {{"mnist", "ml", 2222, 1, 2, 1},
               {"a", "b", 1, 0, 1, 0},
               {"j", "default", 65535, 1, 10, 0},
               {"j", "default", 80, 0, 11, 1},
               {"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuv",
                "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk", 65535, 1, 4096,
                1}};
  char err[256] = "";
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    tfconfig_render_args a = {.job = cases[k].job,
                              .ns = cases[k].ns,
                              .port = cases[k].port,
                              .n_chief = cases[k].chief,
                              .n_worker = cases[k].workers,
                              .n_evaluator = cases[k].eval,
                              .type = TFCONFIG_EVALUATOR, /* unused by the cluster */
                              .index = 7};
    char *cluster = NULL;
    size_t size = 0;
    ASSERT_OK(tfconfig_render_cluster(&a, &cluster, err, sizeof(err)));
    ASSERT_OK(tfconfig_cluster_size(&a, &size));
    ASSERT_EQ(size, strlen(cluster));
    const int counts[3] = {a.n_chief, a.n_worker, a.n_evaluator};
    for (int t = 0; t < 3; t++) {
      for (int i = 0; i<counts[t]; i += counts[t]> 3 ? counts[t] - 1 : 1) {
        char *whole = NULL, *ref = NULL;
        a.type = (tfconfig_task_type)t;
        a.index = i;
        ASSERT_OK(tfconfig_render(&a, &whole, err, sizeof(err)));
        ASSERT_OK(tfconfig_render_ref(&a, "CTRAIN_TF_CLUSTER", &ref, err, sizeof(err)));
        ASSERT(strlen(ref) < 128);
        char *x = expand(ref, "CTRAIN_TF_CLUSTER", cluster);
        ASSERT_NOT_NULL(x);
        ASSERT_STR_EQ(x, whole);
        free(x);
        free(whole);
        free(ref);
      }
    }
    if (k == 4)
      printf("cluster of %d workers, longest names: %zu bytes\n", a.n_worker, size);
    free(cluster);
  }
  tfconfig_render_args a = {
      .job = "j", .ns = "n", .port = 1, .n_worker = 2, .type = TFCONFIG_WORKER, .index = 2};
  char *ref = NULL;
  ASSERT_EQ(tfconfig_render_ref(&a, "V", &ref, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "worker 2");
  a.index = 1;
  ASSERT_EQ(tfconfig_render_ref(&a, "A-B", &ref, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_EQ(tfconfig_render_ref(&a, "1A", &ref, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NULL(ref);
}

TEST_MAIN(T(no_config_is_local), T(ranks_with_chief), T(ranks_without_chief),
          T(errors_name_the_field), T(duplicate_keys_are_config_errors), T(split_hostport),
          T(every_address_is_checked), T(render_round_trips), T(render_ref_expands_to_render))
