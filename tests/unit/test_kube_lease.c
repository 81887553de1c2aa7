/* test_kube_lease.c - leader-election rounds against a scripted apiserver:
 * create when missing, no takeover of a valid lease, takeover of a released
 * one (transitions + 1), renew keeps acquireTime; option validation and the
 * MicroTime format. Handover timing is in tests/integration. */
#include "test.h"

#include <curl/curl.h>

#include "ctrain/kube_lease.h"
#include "ctrain/kube_time.h"
#include "kube_test_server.h"

#define LEASE(holder, rv, trans)                                                                   \
  "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":\"l\","    \
  "\"namespace\":\"ns\",\"resourceVersion\":\"" rv "\"},\"spec\":{" holder                         \
  "\"leaseDurationSeconds\":15,\"acquireTime\":\"2020-01-01T00:00:00.000000Z\","                   \
  "\"renewTime\":\"2020-01-01T00:00:0" rv ".000000Z\",\"leaseTransitions\":" trans "}}"

static const char *ok(int code, const char *body) {
  return ks_resp_status(code, code == 201 ? "Created" : "OK", "", body);
}

TEST(microtime) {
  struct timespec ts = {.tv_sec = 1700000000, .tv_nsec = 123456789};
  char b[64];
  kube_microtime_format(&ts, b, sizeof(b));
  ASSERT_STR_EQ(b, "2023-11-14T22:13:20.123456Z");
}

TEST(options_validated) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {.port = 1};
  kube_client *c = ks_client_for(&s, NULL);
  kube_lease *l = NULL;
  kube_lease_opts o = {
      .ns = "ns", .name = "l", .identity = "me", .lease_duration_ns = 10, .renew_deadline_ns = 10};
  ASSERT_EQ(kube_lease_new(c, &o, &l), CTRAIN_E_INVAL); /* renew deadline >= duration */
  o.identity = "";
  ASSERT_EQ(kube_lease_new(c, &o, &l), CTRAIN_E_INVAL);
  ks_client_done(c);
}

TEST(rounds) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp = {
          /* 1: missing -> create */
          ks_resp_status(404, "Not Found", "", "{\"kind\":\"Status\",\"reason\":\"NotFound\"}"),
          ok(201, LEASE("\"holderIdentity\":\"me\",", "1", "0")),
          /* 2: held by someone else, just renewed -> stand by */
          ok(200, LEASE("\"holderIdentity\":\"other\",", "2", "3")),
          /* 3: released (no holder) -> take it, transitions 4 */
          ok(200, LEASE("", "3", "3")),
          ok(200, LEASE("\"holderIdentity\":\"me\",", "4", "4")),
          /* 4: ours -> renew, same transitions */
          ok(200, LEASE("\"holderIdentity\":\"me\",", "4", "4")),
          ok(200, LEASE("\"holderIdentity\":\"me\",", "5", "4")),
      }};
  pthread_t t = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_lease_opts o = {.ns = "ns", .name = "l", .identity = "me"};
  kube_lease *l = NULL;
  ASSERT_OK(kube_lease_new(c, &o, &l));
  int leader = -1;
  kube_status st;
  ASSERT_OK(kube_lease_try(l, &leader, &st));
  ASSERT_EQ(leader, 1);
  ASSERT_STR_CONTAINS(s.req[1], "POST /apis/coordination.k8s.io/v1/namespaces/ns/leases HTTP");
  ASSERT_STR_CONTAINS(s.req[1], "\"holderIdentity\":\"me\"");
  ASSERT_STR_CONTAINS(s.req[1], "\"leaseDurationSeconds\":15");
  ASSERT_OK(kube_lease_try(l, &leader, &st));
  ASSERT_EQ(leader, 0);
  char h[32];
  kube_lease_holder(l, h, sizeof(h));
  ASSERT_STR_EQ(h, "other");
  ASSERT_OK(kube_lease_try(l, &leader, &st));
  ASSERT_EQ(leader, 1);
  ASSERT_STR_CONTAINS(s.req[4], "PUT /apis/coordination.k8s.io/v1/namespaces/ns/leases/l HTTP");
  ASSERT_STR_CONTAINS(s.req[4], "\"resourceVersion\":\"3\"");
  ASSERT_STR_CONTAINS(s.req[4], "\"leaseTransitions\":4");
  ASSERT_OK(kube_lease_try(l, &leader, &st));
  ASSERT_EQ(leader, 1);
  ASSERT_STR_CONTAINS(s.req[6], "\"leaseTransitions\":4");
  ASSERT_STR_CONTAINS(s.req[6], "\"acquireTime\":\"2020-01-01T00:00:00.000000Z\"");
  pthread_join(t, NULL);
  ASSERT_EQ(s.nreq, 7);
  kube_lease_free(l);
  ks_client_done(c);
}

TEST_MAIN(T(microtime), T(options_validated), T(rounds))
