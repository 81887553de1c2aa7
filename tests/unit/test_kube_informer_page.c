/* test_kube_informer_page.c - the informer reads a list page item by item
 * out of its text (not as one tree of the page): members in any order,
 * whitespace, strings holding brackets, quotes and escapes, "items": null,
 * an empty page; the objects it caches are the ones the apiserver sent,
 * byte for byte once printed. A page that is not JSON fails the list (the
 * cache and the handlers untouched) and the list is tried again. The watch
 * events it receives are counted by type. */
#include "test.h"

#include <curl/curl.h>

#include "ctrain/kube_informer.h"
#include "kube_test_server.h"

static const char *http(const char *body) {
  static char pool[8][2048];
  static int next;
  char *b = pool[next++ % 8];
  snprintf(b, sizeof(pool[0]),
           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
           "Content-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  return b;
}

#define STREAM_OPEN                                                                                \
  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"

/* An object whose data holds what a scan for brackets could trip on. */
#define ODD_OBJ                                                                                    \
  "{\"metadata\":{\"name\":\"odd\",\"namespace\":\"ns\",\"resourceVersion\":\"2\"},"               \
  "\"data\":{\"k\":\"]}\\\"[{,\\\\\",\"u\":\"\\u00e9\\n\",\"a\":[[1,{\"b\":[]}],-2.5e3,null,true]" \
  ","                                                                                              \
  "\"e\":{}}}"

static kube_informer *start(kube_client *c) {
  kube_informer *inf = NULL;
  kube_informer_opts o = {.gvr = &KUBE_GVR_CONFIGMAPS, .ns = "ns", .page_size = 2};
  ASSERT_OK(kube_informer_new(c, &o, &inf));
  ASSERT_OK(kube_informer_start(inf));
  return inf;
}

static void wait_events(kube_informer *inf, long n) {
  kube_informer_stats st;
  for (int i = 0; i < 500; i++) {
    kube_informer_get_stats(inf, &st);
    if (st.events >= n)
      return;
    usleep(10000);
  }
  ASSERT_EQ(st.events, n);
}

TEST(page_shapes_and_event_counts) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {
      .resp =
          {/* items first, kind and metadata after, whitespace everywhere */
           http(" {\n \"items\" : [ " ODD_OBJ " ,\n"
                " {\"metadata\":{\"name\":\"plain\",\"namespace\":\"ns\","
                "\"resourceVersion\":\"3\"}} ] ,\"kind\":\"ConfigMapList\",\r\n"
                "\"apiVersion\":\"v1\",\"metadata\":{\"continue\":\"c1\"} }\n"),
           /* the last page: no items */
           http("{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":"
                "{\"resourceVersion\":\"10\"},\"items\":null}"),
           http("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"w\",\"namespace\":"
                "\"ns\",\"resourceVersion\":\"11\"}}}\n"
                "{\"type\":\"MODIFIED\",\"object\":{\"metadata\":{\"name\":\"w\",\"namespace\":"
                "\"ns\",\"resourceVersion\":\"12\"}}}\n"
                "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"13\"}}}\n"
                "{\"type\":\"DELETED\",\"object\":{\"metadata\":{\"name\":\"plain\",\"namespace\":"
                "\"ns\",\"resourceVersion\":\"14\"}}}\n"
                "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"15\"}}}\n"),
           STREAM_OPEN},
      .stream_forever = 1};
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_informer *inf = start(c);
  ASSERT_OK(kube_informer_wait_synced(inf, 5000));
  cJSON *odd = kube_informer_get(inf, "ns", "odd");
  ASSERT_NOT_NULL(odd);
  cJSON *sent = cJSON_Parse(ODD_OBJ);
  ASSERT_NOT_NULL(sent);
  /* what the list gives every item that has none */
  cJSON_AddStringToObject(sent, "kind", "ConfigMap");
  cJSON_AddStringToObject(sent, "apiVersion", "v1");
  char *a = cJSON_PrintUnformatted(odd), *b = cJSON_PrintUnformatted(sent);
  ASSERT_STR_EQ(a, b);
  cJSON_free(a);
  cJSON_free(b);
  cJSON_Delete(sent);
  cJSON_Delete(odd);
  wait_events(inf, 3);
  ASSERT_EQ(kube_informer_len(inf), 2); /* odd, w */
  ASSERT_NULL(kube_informer_get(inf, "ns", "plain"));
  kube_informer_stats st;
  kube_informer_get_stats(inf, &st);
  ASSERT_EQ(st.lists, 1);
  ASSERT_EQ(st.events_by_type[KUBE_WATCH_ADDED], 1);
  ASSERT_EQ(st.events_by_type[KUBE_WATCH_MODIFIED], 1);
  ASSERT_EQ(st.events_by_type[KUBE_WATCH_DELETED], 1);
  for (int i = 0; i < 100 && st.events_by_type[KUBE_WATCH_BOOKMARK] < 2; i++) {
    usleep(10000);
    kube_informer_get_stats(inf, &st);
  }
  ASSERT_EQ(st.events_by_type[KUBE_WATCH_BOOKMARK], 2);
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  ASSERT_STR_CONTAINS(s.req[1], "continue=c1");
  ASSERT_STR_CONTAINS(s.req[2], "resourceVersion=10");
  kube_informer_free(inf);
  ks_client_done(c);
}

TEST(page_not_json_fails_the_list_then_retries) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {.resp =
                  {/* cut off inside an item: nothing of it is cached */
                   http("{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{},"
                        "\"items\":[{\"metadata\":{\"name\":\"x\",\"namespace\":\"ns\"}},"
                        "{\"metadata\":{\"name\":\"y\""),
                   http("[]"), /* JSON, not a list object */
                   http("{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":"
                        "{\"resourceVersion\":\"5\"},\"items\":[]}"),
                   STREAM_OPEN},
              .stream_forever = 1};
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  kube_informer *inf = start(c);
  ASSERT_OK(kube_informer_wait_synced(inf, 10000));
  ASSERT_EQ(kube_informer_len(inf), 0);
  ASSERT_NULL(kube_informer_get(inf, "ns", "x"));
  kube_informer_stats st;
  kube_informer_get_stats(inf, &st);
  ASSERT_EQ(st.lists, 1);
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  ASSERT_GE(s.nreq, 3); /* the two bad pages, the good one */
  kube_informer_free(inf);
  ks_client_done(c);
}

TEST_MAIN(T(page_shapes_and_event_counts), T(page_not_json_fails_the_list_then_retries))
