/* test_ctl_uninstall.c - ctrain-controller --release-finalizers against a
 * scripted apiserver (kube_test_server.h): the list pages by label and
 * continue token and starts again on 410; only pods that hold our finalizer
 * are patched, by a JSON patch that tests the uid and the finalizer at its
 * index; a failed test reads the pod and patches the new index; a pod that
 * cannot be released is named and the result is an error; a list that
 * fails says so. tests/integration/test_uninstall.py runs it against a real
 * kube-apiserver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "controller/options.h"
#include "controller/uninstall.h"
#include "kube_test_server.h"

#define POD(ns, name, uid, fins)                                                                   \
  "{\"metadata\":{\"namespace\":\"" ns "\",\"name\":\"" name "\",\"uid\":\"" uid                   \
  "\",\"finalizers\":" fins "}}"

/* What one run printed and returned. */
typedef struct {
  ctrain_err result;
  char *out;
} run_result;

/* Runs the one-shot as main would, with `ns` as --namespace (NULL: all),
 * against `s`, through a kubeconfig file that names it. */
static run_result run(server *s, const char *ns) {
  char path[] = "/tmp/ctrain-test-uninstall-XXXXXX";
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  char kc[512];
  int n = snprintf(kc, sizeof(kc),
                   "current-context: t\nclusters:\n- name: c\n  cluster: {server: "
                   "'http://127.0.0.1:%d'}\nusers:\n- name: u\n  user: {token: tok}\n"
                   "contexts:\n- name: t\n  context: {cluster: c, user: u}\n",
                   s->port);
  ASSERT_EQ(write(fd, kc, (size_t)n), n);
  close(fd);
  char nsflag[128];
  snprintf(nsflag, sizeof(nsflag), "--namespace=%s", ns ? ns : "");
  char *argv[] = {"ctrain-controller", "--release-finalizers", "--kubeconfig", path, nsflag, NULL};
  ctl_options o;
  char err[256];
  ASSERT_OK(ctl_options_parse(&o, ns ? 5 : 4, argv, err, sizeof(err)));
  ASSERT_EQ(o.release_finalizers, 1);
  run_result r = {0};
  size_t len = 0;
  FILE *f = open_memstream(&r.out, &len);
  ASSERT_NOT_NULL(f);
  r.result = ctl_release_finalizers(&o, f);
  fclose(f);
  unlink(path);
  printf("# %s", r.out);
  return r;
}

TEST(pages_restarts_and_patches_only_ours) {
  server s = {
      .resp = {
          /* 0: the first page: ours after another finalizer; a pod without ours. */
          ks_resp200("{\"metadata\":{\"continue\":\"c1\"},\"items\":[" POD(
              "n1", "a", "ua",
              "[\"x.io/keep\",\"ctrain.dev/attempt\"]") "," POD("n1", "b", "ub",
                                                                "[\"x.io/keep\"]") "]}"),
          ks_resp200("{}"), /* 1: a's patch */
          /* 2: the second page: the token expired. */
          ks_resp_status(410, "Gone", "",
                         "{\"kind\":\"Status\",\"reason\":\"Expired\",\"code\":410,"
                         "\"message\":\"continue token expired\"}"),
          /* 3: the list again, a released already. */
          ks_resp200("{\"metadata\":{},\"items\":[" POD("n1", "a", "ua", "[\"x.io/keep\"]") "," POD(
              "n2", "c", "uc", "[\"ctrain.dev/attempt\"]") "]}"),
          /* 4: c's patch: its test fails, someone added a finalizer before ours. */
          ks_resp_status(422, "Unprocessable Entity", "",
                         "{\"kind\":\"Status\",\"reason\":\"Invalid\",\"code\":422,"
                         "\"message\":\"the server rejected our request: test failed\"}"),
          ks_resp200(POD("n2", "c", "uc", "[\"y.io/other\",\"ctrain.dev/attempt\"]")), /* 5: read */
          ks_resp200("{}"), /* 6: c's patch at its index now */
      }};
  pthread_t t = ks_start_server(&s);
  run_result r = run(&s, NULL);
  pthread_join(t, NULL);
  ASSERT_OK(r.result);
  ASSERT_STR_CONTAINS(
      r.out, "released finalizer ctrain.dev/attempt from 2 pods in 2 namespaces (all namespaces)");
  ASSERT_EQ(s.nreq, 7);
  ASSERT_STR_CONTAINS(s.req[0],
                      "GET /api/v1/pods?labelSelector=ctrain.dev%2Fjob-name&limit=500 HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[1], "PATCH /api/v1/namespaces/n1/pods/a HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[1], "application/json-patch+json");
  ASSERT_STR_CONTAINS(s.req[1], "[{\"op\":\"test\",\"path\":\"/metadata/uid\",\"value\":\"ua\"},"
                                "{\"op\":\"test\",\"path\":\"/metadata/finalizers/1\",\"value\":"
                                "\"ctrain.dev/attempt\"},{\"op\":\"remove\",\"path\":\"/metadata/"
                                "finalizers/1\"}]");
  ASSERT_STR_CONTAINS(s.req[2], "GET /api/v1/pods?labelSelector=ctrain.dev%2Fjob-name&limit=500"
                                "&continue=c1 HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[3],
                      "GET /api/v1/pods?labelSelector=ctrain.dev%2Fjob-name&limit=500 HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[4], "PATCH /api/v1/namespaces/n2/pods/c HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[4], "\"path\":\"/metadata/finalizers/0\"");
  ASSERT_STR_CONTAINS(s.req[5], "GET /api/v1/namespaces/n2/pods/c HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[6], "PATCH /api/v1/namespaces/n2/pods/c HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[6], "{\"op\":\"remove\",\"path\":\"/metadata/finalizers/1\"}");
  free(r.out);
}

TEST(a_pod_that_stays_is_named) {
  server s = {
      .resp = {ks_resp200("{\"metadata\":{},\"items\":[" POD("n3", "d", "ud",
                                                             "[\"ctrain.dev/attempt\"]") "]}"),
               ks_resp_status(403, "Forbidden", "",
                              "{\"kind\":\"Status\",\"reason\":\"Forbidden\",\"code\":403,"
                              "\"message\":\"pods \\\"d\\\" is forbidden: by a webhook\"}")}};
  pthread_t t = ks_start_server(&s);
  run_result r = run(&s, "n3");
  pthread_join(t, NULL);
  ASSERT_NE(r.result, CTRAIN_OK);
  ASSERT_STR_CONTAINS(s.req[0], "GET /api/v1/namespaces/n3/pods?labelSelector=");
  ASSERT_STR_CONTAINS(r.out, "from 0 pods in 0 namespaces (n3); 1 pod still holding it:");
  ASSERT_STR_CONTAINS(r.out, "n3/d: ");
  ASSERT_STR_CONTAINS(r.out, "HTTP 403 Forbidden: pods \"d\" is forbidden: by a webhook");
  ASSERT_STR_CONTAINS(r.out, "run ctrain-controller --release-finalizers again");
  free(r.out);
}

TEST(a_list_that_fails_says_so) {
  server s = {.resp = {ks_resp_status(403, "Forbidden", "",
                                      "{\"kind\":\"Status\",\"reason\":\"Forbidden\",\"code\":403,"
                                      "\"message\":\"pods is forbidden: cannot list\"}")}};
  pthread_t t = ks_start_server(&s);
  run_result r = run(&s, "n4");
  pthread_join(t, NULL);
  ASSERT_NE(r.result, CTRAIN_OK);
  ASSERT_STR_CONTAINS(r.out, "cannot list pods in n4: ");
  ASSERT_STR_CONTAINS(r.out, "(HTTP 403 Forbidden: pods is forbidden: cannot list)");
  free(r.out);
}

static void setup(void) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
}

#define WRAP(name)                                                                                 \
  static void test_##name##_wrapped(void) {                                                        \
    setup();                                                                                       \
    test_##name();                                                                                 \
    curl_global_cleanup();                                                                         \
  }
#define TC(name)                                                                                   \
  { #name, test_##name##_wrapped }
WRAP(pages_restarts_and_patches_only_ours)
WRAP(a_pod_that_stays_is_named)
WRAP(a_list_that_fails_says_so)

TEST_MAIN(TC(pages_restarts_and_patches_only_ours), TC(a_pod_that_stays_is_named),
          TC(a_list_that_fails_says_so))
