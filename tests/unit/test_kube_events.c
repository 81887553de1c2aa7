/* test_kube_events.c - the event recorder against a scripted apiserver:
 * first record creates an Event, a repeat patches its count, a different
 * reason is a new Event, a repeat whose Event vanished creates it again.
 * The asynchronous front: emitted events are written in order by the writer
 * thread (and aggregated), a full queue drops and counts, a refused write
 * counts as failed, stop drains what is queued and refuses later emits. */
#include "test.h"

#include <curl/curl.h>
#include <stdatomic.h>
#include <time.h>

#include "ctrain/kube_events.h"
#include "kube_test_server.h"

/* A recorder on a client of the scripted server `s` (started here). */
static kube_events *recorder_for(server *s, pthread_t *t, kube_client **c,
                                 const kube_events_opts *o) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  *t = ks_start_server(s);
  *c = ks_client_for(s, NULL);
  kube_events *ev = NULL;
  ASSERT_OK(kube_events_new(*c, o, &ev));
  return ev;
}

TEST(aggregate) {
  server s = {.resp = {ks_resp_status(201, "Created", "", "{}"),
                       ks_resp_status(200, "OK", "", "{}"),
                       ks_resp_status(201, "Created", "", "{}"),
                       ks_resp_status(404, "Not Found", "", "{\"kind\":\"Status\",\"code\":404}"),
                       ks_resp_status(201, "Created", "", "{}")}};
  pthread_t t;
  kube_client *c;
  kube_events_opts o = {.component = "ctrain-controller", .instance = "pod-1"};
  kube_events *ev = recorder_for(&s, &t, &c, &o);
  cJSON *job = cJSON_Parse("{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\","
                           "\"metadata\":{\"name\":\"mnist\",\"namespace\":\"ml\",\"uid\":\"u-1\","
                           "\"resourceVersion\":\"7\"}}");
  int count = -1;
  ASSERT_OK(kube_events_record(ev, job, "Normal", "PodCreated", &count, "created pod %s-%d",
                               "mnist-worker", 0));
  ASSERT_EQ(count, 1);
  ASSERT_OK(kube_events_record(ev, job, "Normal", "PodCreated", &count, "created pod %s-%d",
                               "mnist-worker", 0));
  ASSERT_EQ(count, 2);
  ASSERT_OK(kube_events_record(ev, job, "Warning", "Restarting", &count, "gang restart %d", 1));
  ASSERT_EQ(count, 1);
  ASSERT_OK(kube_events_record(ev, job, "Normal", "PodCreated", &count, "created pod %s-%d",
                               "mnist-worker", 0));
  ASSERT_EQ(count, 1); /* the old Event was gone: a new one */
  pthread_join(t, NULL);
  ASSERT_STR_CONTAINS(s.req[0], "POST /api/v1/namespaces/ml/events HTTP/1.1");
  ASSERT_STR_CONTAINS(s.req[0], "\"involvedObject\":{\"apiVersion\":\"ctrain.dev/v1alpha1\","
                                "\"kind\":\"TrainingJob\",\"name\":\"mnist\",\"namespace\":\"ml\","
                                "\"uid\":\"u-1\",\"resourceVersion\":\"7\"}");
  ASSERT_STR_CONTAINS(s.req[0],
                      "\"reason\":\"PodCreated\",\"message\":\"created pod mnist-worker-0\"");
  ASSERT_STR_CONTAINS(s.req[0],
                      "\"source\":{\"component\":\"ctrain-controller\",\"host\":\"pod-1\"}");
  ASSERT_STR_CONTAINS(s.req[1], "PATCH /api/v1/namespaces/ml/events/mnist.");
  ASSERT_STR_CONTAINS(s.req[1], "Content-Type: application/merge-patch+json");
  ASSERT_STR_CONTAINS(s.req[1], "{\"count\":2,\"lastTimestamp\":");
  ASSERT_STR_CONTAINS(s.req[2], "\"type\":\"Warning\"");
  ASSERT_STR_CONTAINS(s.req[3], "PATCH");
  ASSERT_STR_CONTAINS(s.req[4], "POST /api/v1/namespaces/ml/events HTTP/1.1");
  cJSON_Delete(job);
  kube_events_free(ev);
  ks_client_done(c);
}

TEST(needs_component) {
  kube_events_opts o = {0};
  kube_events *ev = NULL;
  ASSERT_EQ(kube_events_new((kube_client *)&o, &o, &ev), CTRAIN_E_INVAL);
  kube_events_free(NULL);
}

#define JOB_REF                                                                                    \
  "{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"name\":\"mnist\","           \
  "\"namespace\":\"ml\",\"uid\":\"u-1\"}"

TEST(emit_writes_in_order) {
  server s = {
      .resp = {ks_resp_status(201, "Created", "", "{}"), ks_resp_status(200, "OK", "", "{}"),
               ks_resp_status(201, "Created", "", "{}"), ks_resp_status(201, "Created", "", "{}")}};
  pthread_t t;
  kube_client *c;
  kube_events_opts o = {.component = "ctrain-controller"};
  kube_events *ev = recorder_for(&s, &t, &c, &o);
  cJSON *ref = cJSON_Parse(JOB_REF);
  ASSERT_OK(kube_events_start(ev));
  ASSERT_OK(kube_events_start(ev)); /* a second start does nothing */
  ASSERT_OK(kube_events_emit(ev, ref, "Normal", "SuccessfulCreatePod", "Created pod: %s", "a"));
  ASSERT_OK(kube_events_emit(ev, ref, "Normal", "SuccessfulCreatePod", "Created pod: %s", "a"));
  ASSERT_OK(kube_events_emit(ev, ref, "Warning", "Restarting", "gang restart %d", 1));
  /* Foreign text (an apiserver's message) is escaped: no log injection. */
  ASSERT_OK(
      kube_events_emit(ev, ref, "Warning", "FailedCreatePod", "create: %s", "denied\nFAKE\x1b[2J"));
  ASSERT_OK(kube_events_flush(ev, 10000));
  kube_events_counts n = kube_events_get_counts(ev);
  ASSERT_EQ(n.written, 4);
  ASSERT_EQ(n.failed, 0);
  ASSERT_EQ(n.dropped, 0);
  ASSERT_EQ(n.queued, 0);
  pthread_join(t, NULL);
  /* The ObjectReference became the Event's involvedObject. */
  ASSERT_STR_CONTAINS(s.req[0], "\"involvedObject\":{\"apiVersion\":\"ctrain.dev/v1alpha1\","
                                "\"kind\":\"TrainingJob\",\"name\":\"mnist\",\"namespace\":\"ml\","
                                "\"uid\":\"u-1\"}");
  ASSERT_STR_CONTAINS(s.req[0], "\"message\":\"Created pod: a\"");
  ASSERT_STR_CONTAINS(s.req[1], "PATCH /api/v1/namespaces/ml/events/mnist.");
  ASSERT_STR_CONTAINS(s.req[2], "\"reason\":\"Restarting\",\"message\":\"gang restart 1\"");
  ASSERT_STR_CONTAINS(s.req[3], "\"message\":\"create: denied\\\\nFAKE\\\\x1b[2J\"");
  cJSON_Delete(ref);
  kube_events_free(ev);
  ks_client_done(c);
}

/* A yield callback: hold while *busy. */
static int hold_while(void *ud) {
  return atomic_load((atomic_int *)ud);
}

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TEST(emit_yields_to_creates) {
  server s = {
      .resp = {ks_resp_status(201, "Created", "", "{}"), ks_resp_status(201, "Created", "", "{}")}};
  pthread_t t;
  kube_client *c;
  atomic_int busy = 1;
  kube_events_opts o = {.component = "ctrain-controller",
                        .yield = hold_while,
                        .yield_ud = &busy,
                        .yield_max_ns = 60LL * 1000000000LL};
  kube_events *ev = recorder_for(&s, &t, &c, &o);
  cJSON *ref = cJSON_Parse(JOB_REF);
  ASSERT_OK(kube_events_start(ev));
  ASSERT_OK(kube_events_emit(ev, ref, "Normal", "SuccessfulCreatePod", "Created pods: %s", "a, b"));
  /* Held while the owner is busy: nothing written, flush times out. */
  ASSERT_EQ(kube_events_flush(ev, 150), CTRAIN_E_TIMEOUT);
  ASSERT_EQ(kube_events_get_counts(ev).written, 0);
  atomic_store(&busy, 0);
  ASSERT_OK(kube_events_flush(ev, 10000));
  ASSERT_EQ(kube_events_get_counts(ev).written, 1);
  kube_events_free(ev);

  /* Held at most yield_max_ns, however long the owner stays busy. */
  atomic_store(&busy, 1);
  o.yield_max_ns = 100LL * 1000000LL;
  ASSERT_OK(kube_events_new(c, &o, &ev));
  ASSERT_OK(kube_events_start(ev));
  int64_t t0 = mono_ms();
  ASSERT_OK(kube_events_emit(ev, ref, "Warning", "Restarting", "gang restart %d", 1));
  ASSERT_OK(kube_events_flush(ev, 10000));
  int64_t waited = mono_ms() - t0;
  ASSERT_GE(waited, 90);
  ASSERT_EQ(kube_events_get_counts(ev).written, 1);
  pthread_join(t, NULL);
  ASSERT_STR_CONTAINS(s.req[0], "\"message\":\"Created pods: a, b\"");
  ASSERT_STR_CONTAINS(s.req[1], "\"reason\":\"Restarting\"");
  cJSON_Delete(ref);
  kube_events_free(ev);
  ks_client_done(c);
}

TEST(emit_full_queue_drops) {
  kube_client *c = NULL;
  server s = {0};
  s.port = 9; /* never contacted: the writer is not started */
  c = ks_client_for(&s, NULL);
  kube_events_opts o = {.component = "ctrain-controller", .queue_max = 2};
  kube_events *ev = NULL;
  ASSERT_OK(kube_events_new(c, &o, &ev));
  cJSON *ref = cJSON_Parse(JOB_REF);
  ASSERT_OK(kube_events_emit(ev, ref, "Normal", "A", "one"));
  ASSERT_OK(kube_events_emit(ev, ref, "Normal", "B", "two"));
  ASSERT_EQ(kube_events_emit(ev, ref, "Normal", "C", "three"), CTRAIN_E_TOOBIG);
  kube_events_counts n = kube_events_get_counts(ev);
  ASSERT_EQ(n.queued, 2);
  ASSERT_EQ(n.dropped, 1);
  ASSERT_EQ(kube_events_flush(ev, 50), CTRAIN_E_TIMEOUT); /* nobody writes */
  kube_events_stop(ev, 1000);                             /* no writer: the queue is dropped */
  ASSERT_EQ(kube_events_emit(ev, ref, "Normal", "D", "four"), CTRAIN_E_CANCELLED);
  n = kube_events_get_counts(ev);
  ASSERT_EQ(n.queued, 0);
  ASSERT_EQ(n.dropped, 4);
  ASSERT_EQ(n.written, 0);
  kube_events_stop(ev, 0); /* a second stop does nothing */
  cJSON_Delete(ref);
  kube_events_free(ev);
  ks_client_done(c);
}

TEST(stop_drains_and_counts_failures) {
  server s = {
      .resp = {ks_resp_status(201, "Created", "", "{}"),
               ks_resp_status(403, "Forbidden", "",
                              "{\"kind\":\"Status\",\"code\":403,\"reason\":\"Forbidden\"}"),
               ks_resp_status(201, "Created", "", "{}")}};
  pthread_t t;
  kube_client *c;
  kube_events_opts o = {.component = "ctrain-controller"};
  kube_events *ev = recorder_for(&s, &t, &c, &o);
  cJSON *ref = cJSON_Parse(JOB_REF);
  /* Queued before the writer starts, written once it does. */
  ASSERT_OK(kube_events_emit(ev, ref, "Normal", "A", "one"));
  ASSERT_OK(kube_events_emit(ev, ref, "Normal", "B", "two"));
  ASSERT_OK(kube_events_emit(ev, ref, "Normal", "C", "three"));
  ASSERT_OK(kube_events_start(ev));
  kube_events_stop(ev, 10000);
  kube_events_counts n = kube_events_get_counts(ev);
  ASSERT_EQ(n.written, 2);
  ASSERT_EQ(n.failed, 1);
  ASSERT_EQ(n.dropped, 0);
  ASSERT_EQ(n.queued, 0);
  pthread_join(t, NULL);
  ASSERT_EQ(s.nreq, 3);
  ASSERT_STR_CONTAINS(s.req[2], "\"reason\":\"C\"");
  cJSON_Delete(ref);
  kube_events_free(ev);
  ks_client_done(c);
}

TEST_MAIN(T(aggregate), T(needs_component), T(emit_writes_in_order), T(emit_yields_to_creates),
          T(emit_full_queue_drops), T(stop_drains_and_counts_failures))
