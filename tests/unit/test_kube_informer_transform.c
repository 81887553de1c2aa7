/* test_kube_informer_transform.c - kube_informer_keep_fields (paths,
 * arrays on the way, what is dropped) and an informer with a transform:
 * list items and watch objects are pruned before the cache and the
 * handlers see them, and the owner index still works. */
#include "test.h"

#include <curl/curl.h>

#include "ctrain/kube_informer.h"
#include "kube_test_server.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static char *print(const cJSON *o) {
  char *s = cJSON_PrintUnformatted(o);
  ASSERT_NOT_NULL(s);
  return s;
}

TEST(keep_fields_paths_and_arrays) {
  cJSON *pod = cJSON_Parse(
      "{\"apiVersion\":\"v1\",\"kind\":\"Pod\","
      "\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\",\"uid\":\"u\","
      "\"managedFields\":[{\"manager\":\"m\",\"fieldsV1\":{\"f:spec\":{}}}],"
      "\"labels\":{\"a\":\"1\",\"b\":\"2\"},"
      "\"ownerReferences\":[{\"uid\":\"O\",\"kind\":\"K\",\"controller\":true}]},"
      "\"spec\":{\"nodeName\":\"n1\",\"containers\":[{\"name\":\"c\",\"image\":\"i\"}]},"
      "\"status\":{\"phase\":\"Failed\",\"hostIP\":\"10.0.0.1\","
      "\"conditions\":[{\"type\":\"Ready\",\"status\":\"False\",\"lastProbeTime\":null}],"
      "\"containerStatuses\":[{\"name\":\"c\",\"restartCount\":0,\"imageID\":\"x\","
      "\"state\":{\"terminated\":{\"exitCode\":3,\"reason\":\"Error\"}}},"
      "{\"name\":\"d\",\"ready\":true}]}}");
  ASSERT_NOT_NULL(pod);
  static const char *const paths[] = {"kind",
                                      "metadata.name",
                                      "metadata.namespace",
                                      "metadata.labels",
                                      "metadata.ownerReferences.uid",
                                      "metadata.deletionTimestamp", /* absent: no harm */
                                      "spec.nodeName",
                                      "status.phase",
                                      "status.conditions.type",
                                      "status.containerStatuses.name",
                                      "status.containerStatuses.state"};
  kube_informer_keep_fields(pod, paths, N(paths));
  char *s = print(pod);
  ASSERT_STR_EQ(s, "{\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\","
                   "\"labels\":{\"a\":\"1\",\"b\":\"2\"},\"ownerReferences\":[{\"uid\":\"O\"}]},"
                   "\"spec\":{\"nodeName\":\"n1\"},"
                   "\"status\":{\"phase\":\"Failed\",\"conditions\":[{\"type\":\"Ready\"}],"
                   "\"containerStatuses\":[{\"name\":\"c\",\"state\":{\"terminated\":"
                   "{\"exitCode\":3,\"reason\":\"Error\"}}},{\"name\":\"d\"}]}}");
  cJSON_free(s);
  /* No paths: nothing is kept. A prefix of a name is not the name. */
  cJSON *o = cJSON_Parse("{\"meta\":1,\"metadata\":{\"name\":\"x\"}}");
  static const char *const meta[] = {"meta"};
  kube_informer_keep_fields(o, meta, N(meta));
  s = print(o);
  ASSERT_STR_EQ(s, "{\"meta\":1}");
  cJSON_free(s);
  kube_informer_keep_fields(o, meta, 0);
  s = print(o);
  ASSERT_STR_EQ(s, "{}");
  cJSON_free(s);
  kube_informer_keep_fields(NULL, meta, 1); /* accepted */
  cJSON_Delete(o);
  cJSON_Delete(pod);
}

/* ---- an informer with a transform ------------------------------------------ */

#define OBJ(name, rv, owner, extra)                                                                \
  "{\"metadata\":{\"name\":\"" name "\",\"namespace\":\"ns\",\"resourceVersion\":\"" rv "\""       \
  ",\"managedFields\":[{\"manager\":\"kubectl\"}],\"ownerReferences\":[{\"uid\":\"" owner          \
  "\"}]},\"data\":{\"big\":\"" extra "\",\"keep\":\"k\"}}"
#define EV(type, obj) "{\"type\":\"" type "\",\"object\":" obj "}\n"

static const char *http(const char *body) {
  static char pool[4][2048];
  static int next;
  char *b = pool[next++ % 4];
  snprintf(b, sizeof(pool[0]),
           "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
           "Content-Length: %zu\r\n\r\n%s",
           strlen(body), body);
  return b;
}

typedef struct {
  pthread_mutex_t mu;
  int calls, seen, pruned; /* transform calls; handler calls, of which pruned */
} rec;

static const char *const cm_paths[] = {"metadata.name", "metadata.namespace",
                                       "metadata.resourceVersion", "metadata.ownerReferences",
                                       "data.keep"};

static void transform(void *ud, cJSON *obj) {
  rec *r = ud;
  pthread_mutex_lock(&r->mu);
  r->calls++;
  pthread_mutex_unlock(&r->mu);
  kube_informer_keep_fields(obj, cm_paths, N(cm_paths));
}

static void seen(rec *r, const cJSON *o) {
  const cJSON *md = cJSON_GetObjectItem(o, "metadata"), *data = cJSON_GetObjectItem(o, "data");
  pthread_mutex_lock(&r->mu);
  r->seen++;
  r->pruned += !cJSON_GetObjectItem(md, "managedFields") && !cJSON_GetObjectItem(data, "big") &&
               cJSON_GetObjectItem(data, "keep") && !cJSON_GetObjectItem(o, "kind");
  pthread_mutex_unlock(&r->mu);
}
static void on_add(void *ud, const cJSON *o) {
  seen(ud, o);
}
static void on_update(void *ud, const cJSON *old, const cJSON *cur) {
  seen(ud, old);
  seen(ud, cur);
}

TEST(informer_caches_transformed_objects) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  server s = {.resp = {http("{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{"
                            "\"resourceVersion\":\"10\"},\"items\":[" OBJ(
                                "a", "1", "O1", "xxxx") "," OBJ("b", "2", "O1", "yyyy") "]}"),
                       http(EV("MODIFIED", OBJ("a", "11", "O1", "zzzz"))
                                EV("ADDED", OBJ("c", "12", "O2", "wwww"))),
                       "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                       "Transfer-Encoding: chunked\r\n\r\n"},
              .stream_forever = 1};
  pthread_t srv = ks_start_server(&s);
  kube_client *c = ks_client_for(&s, NULL);
  rec r = {.mu = PTHREAD_MUTEX_INITIALIZER};
  kube_informer_opts o = {.gvr = &KUBE_GVR_CONFIGMAPS,
                          .ns = "ns",
                          .handlers = {on_add, on_update, NULL, &r},
                          .transform = transform,
                          .transform_ud = &r};
  kube_informer *inf = NULL;
  ASSERT_OK(kube_informer_new(c, &o, &inf));
  ASSERT_OK(kube_informer_start(inf));
  ASSERT_OK(kube_informer_wait_synced(inf, 5000));
  for (int i = 0; i < 500 && kube_informer_len(inf) < 3; i++)
    usleep(10000);
  for (int i = 0; i < 500; i++) {
    pthread_mutex_lock(&r.mu);
    int n = r.seen;
    pthread_mutex_unlock(&r.mu);
    if (n >= 5) /* add a, add b, update a (old and new), add c */
      break;
    usleep(10000);
  }
  kube_informer_stop(inf);
  ks_stop_server(&s, srv);
  ASSERT_EQ(kube_informer_len(inf), 3);
  ASSERT_EQ(r.calls, 4); /* once per object that arrived */
  ASSERT_EQ(r.seen, 5);
  ASSERT_EQ(r.pruned, 5); /* the handlers only ever see pruned objects */
  cJSON *a = kube_informer_get(inf, "ns", "a");
  char *txt = print(a);
  /* the list's kind was added before the transform, which drops it */
  ASSERT_STR_EQ(txt, "{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\",\"resourceVersion\":"
                     "\"11\",\"ownerReferences\":[{\"uid\":\"O1\"}]},\"data\":{\"keep\":\"k\"}}");
  cJSON_free(txt);
  cJSON_Delete(a);
  cJSON *owned = NULL;
  ASSERT_OK(kube_informer_by_owner(inf, "O1", &owned));
  ASSERT_EQ(cJSON_GetArraySize(owned), 2);
  cJSON_Delete(owned);
  kube_informer_free(inf);
  ks_client_done(c);
}

TEST_MAIN(T(keep_fields_paths_and_arrays), T(informer_caches_transformed_objects))
