/* test_ctl_leader.c - the leader label on the controller's own pod: the
 * merge patch that sets or removes it, sent to that pod; a pod gone is no
 * error when removing, and an error names the pod and the apiserver's
 * answer. */
#include "test.h"
#include "kube_test_server.h"

#include "controller/leader.h"

TEST(patch_bodies) {
  char buf[128];
  ASSERT_OK(leader_patch(1, buf, sizeof(buf)));
  ASSERT_STR_EQ(buf, "{\"metadata\":{\"labels\":{\"ctrain.dev/leader\":\"true\"}}}");
  ASSERT_OK(leader_patch(0, buf, sizeof(buf)));
  ASSERT_STR_EQ(buf, "{\"metadata\":{\"labels\":{\"ctrain.dev/leader\":null}}}");
  ASSERT_EQ(leader_patch(1, buf, 16), CTRAIN_E_TOOBIG);
}

TEST(mark_sends_a_merge_patch_to_the_pod) {
  static const char *forbidden =
      "{\"kind\":\"Status\",\"reason\":\"Forbidden\",\"message\":\"pods \\\"ctl-0\\\" is "
      "forbidden: cannot patch\",\"code\":403}";
  static const char *missing =
      "{\"kind\":\"Status\",\"reason\":\"NotFound\",\"message\":\"pods \\\"ctl-0\\\" not "
      "found\",\"code\":404}";
  server s = {.resp = {ks_resp200("{\"kind\":\"Pod\"}"),
                       ks_resp_status(404, "Not Found", "", missing),
                       ks_resp_status(403, "Forbidden", "", forbidden),
                       ks_resp_status(404, "Not Found", "", missing)}};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  char err[1400] = "";
  ASSERT_OK(leader_mark(c, "ctrain-system", "ctl-0", 1, err, sizeof(err)));
  ASSERT_OK(leader_mark(c, "ctrain-system", "ctl-0", 0, err, sizeof(err))); /* gone: fine */
  ASSERT_EQ(leader_mark(c, "ctrain-system", "ctl-0", 1, err, sizeof(err)), CTRAIN_E_AUTH);
  ASSERT_STR_CONTAINS(err, "setting label ctrain.dev/leader on pod ctrain-system/ctl-0");
  ASSERT_STR_CONTAINS(err, "HTTP 403 Forbidden: pods \"ctl-0\" is forbidden: cannot patch");
  ASSERT_EQ(leader_mark(c, "ctrain-system", "ctl-0", 1, err, sizeof(err)), CTRAIN_E_NOTFOUND);
  ks_stop_server(&s, t);
  ASSERT_STR_CONTAINS(s.req[0], "PATCH /api/v1/namespaces/ctrain-system/pods/ctl-0 HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[0], "application/merge-patch+json");
  ASSERT_STR_CONTAINS(s.req[0],
                      "\r\n\r\n{\"metadata\":{\"labels\":{\"ctrain.dev/leader\":\"true\"}}}");
  ASSERT_STR_CONTAINS(s.req[1], "{\"ctrain.dev/leader\":null}");
  ks_client_done(c);
}

TEST_MAIN(T(patch_bodies), T(mark_sends_a_merge_patch_to_the_pod))
