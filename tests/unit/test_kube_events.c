/* test_kube_events.c - the event recorder against a scripted apiserver:
 * first record creates an Event, a repeat patches its count, a different
 * reason is a new Event, a repeat whose Event vanished creates it again. */
#include "test.h"

#include <curl/curl.h>

#include "ctrain/kube_events.h"
#include "test_kube_server.h"

TEST(aggregate) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {.resp = {resp_status(201, "Created", "", "{}"), resp_status(200, "OK", "", "{}"),
                       resp_status(201, "Created", "", "{}"),
                       resp_status(404, "Not Found", "", "{\"kind\":\"Status\",\"code\":404}"),
                       resp_status(201, "Created", "", "{}")}};
  pthread_t t = start_server(&s);
  kube_client *c = client_for(&s, NULL);
  kube_events_opts o = {.component = "ctrain-controller", .instance = "pod-1"};
  kube_events *ev = NULL;
  ASSERT_OK(kube_events_new(c, &o, &ev));
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
  client_done(c);
}

TEST(needs_component) {
  kube_events_opts o = {0};
  kube_events *ev = NULL;
  ASSERT_EQ(kube_events_new((kube_client *)&o, &o, &ev), CTRAIN_E_INVAL);
  kube_events_free(NULL);
}

TEST_MAIN(T(aggregate), T(needs_component))
