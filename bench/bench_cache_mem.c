/* bench_cache_mem.c - what the controller's pod cache costs per pod: N
 * pods, as the controller builds them (podbuild_pod, 4-worker jobs)
 * with what the apiserver and KWOK add (uid, resourceVersion, defaults,
 * managedFields of two managers, a Running status), go through the real
 * informer (kube_informer, ctl_cache_pod_fields, the client's paged list and
 * its watch) from a small apiserver on loopback run in a forked child, so
 * this process's RSS is the client's alone.
 *
 *   bench_cache_mem [--pods N] [--page P] [--arenas A] [--watch-only 1]
 *   bench_cache_mem --dump    (one pod as sent, then as cached)
 *
 * --watch-only 1: an empty list, then each pod ADDED, Running, Succeeded by
 * watch (as in bench/scale.py, where the controller makes the pods).
 * Phases, each with its own VmHWM (reset through /proc/self/clear_refs):
 *   list     the first list (P per page) into an empty cache
 *   relist   a watch answered 410: a second list, every pod changed, while
 *            the first cache is live
 *   watch    N MODIFIED events (every pod Succeeded)
 * Prints VmRSS/VmHWM and the heap in use (mallinfo2) per phase, bytes per
 * cached pod, and the ratio of the cached pod to the baseline measured in
 * the same run: the pod's JSON as the apiserver sends it. --arenas sets
 * M_ARENA_MAX (0: glibc's default; the controller sets 2, controller/main.c). */
#include <malloc.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "controller/cachefields.h"
#include "controller/jobspec.h"
#include "controller/podbuild.h"
#include "ctrain/json.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "ctrain/kube_informer.h"

#define WORKERS 4
#define NS      "scale"

static int npods = 10000, page = 500;
static int watch_only; /* --watch-only: the first list is empty, every pod comes by watch */

/* ---- the pods ------------------------------------------------------------- */

/* managedFields' fieldsV1 of `o`: every key as "f:<key>", arrays of named
 * objects as "k:{"name":...}", other arrays as "." (near enough to the
 * apiserver's in size and shape). */
static cJSON *fields_v1(const cJSON *o) {
  cJSON *f = cJSON_CreateObject(), *c;
  cJSON_ArrayForEach(c, o) {
    char k[512];
    if (cJSON_IsArray(o)) {
      const char *name = ctrain_json_str(c, "name");
      if (!name)
        name = ctrain_json_str(c, "type");
      snprintf(k, sizeof(k), "k:{\"name\":\"%s\"}", name ? name : "");
    } else {
      snprintf(k, sizeof(k), "f:%s", c->string);
    }
    cJSON_AddItemToObject(
        f, k, cJSON_IsObject(c) || cJSON_IsArray(c) ? fields_v1(c) : cJSON_CreateObject());
  }
  if (cJSON_IsObject(o) || cJSON_IsArray(o))
    cJSON_AddItemToObject(f, ".", cJSON_CreateObject());
  return f;
}

static void add_managed(cJSON *md, const char *manager, const char *sub, const char *ts,
                        const cJSON *of) {
  cJSON *mf = cJSON_GetObjectItemCaseSensitive(md, "managedFields");
  if (!mf)
    mf = cJSON_AddArrayToObject(md, "managedFields");
  cJSON *e = cJSON_CreateObject();
  cJSON_AddStringToObject(e, "manager", manager);
  cJSON_AddStringToObject(e, "operation", "Update");
  cJSON_AddStringToObject(e, "apiVersion", "v1");
  cJSON_AddStringToObject(e, "time", ts);
  cJSON_AddStringToObject(e, "fieldsType", "FieldsV1");
  cJSON_AddItemToObject(e, "fieldsV1", fields_v1(of));
  if (sub)
    cJSON_AddStringToObject(e, "subresource", sub);
  cJSON_AddItemToArray(mf, e);
}

/* Pod i (job i / WORKERS, worker i % WORKERS) of list generation `gen`,
 * as the apiserver would send it: JSON text (malloc'd). succeeded: its
 * containers terminated with exit 0. */
static char *raw_pod(int i, int gen, int succeeded) {
  char job_json[1024], err[256];
  int j = i / WORKERS, idx = i % WORKERS;
  snprintf(job_json, sizeof(job_json),
           "{\"apiVersion\":\"ctrain.dev/v1alpha1\",\"kind\":\"TrainingJob\",\"metadata\":{"
           "\"name\":\"s-%d\",\"namespace\":\"" NS "\",\"uid\":\"6f1c2a4e-0b7d-4c1e-9a3f-%012d\","
           "\"generation\":1},\"spec\":{\"port\":2222,\"replicaSpecs\":{\"Worker\":{\"replicas\":"
           "%d,\"template\":{\"metadata\":{\"annotations\":{\"ctrain.dev/sim-exit\":\"0\","
           "\"ctrain.dev/sim-after\":\"30s\"}},\"spec\":{\"containers\":[{\"name\":\"worker\","
           "\"image\":\"ctrain:latest\"}]}}}}}}",
           j, j, WORKERS);
  cJSON *job = cJSON_Parse(job_json), *pod = NULL;
  job_spec js;
  jobspec_read(job, &js);
  js.name_tag = "a1b2c3d4";
  if (podbuild_pod(&js, PODBUILD_WORKER, idx, 1, &pod, err, sizeof(err))) {
    fprintf(stderr, "podbuild_pod: %s\n", err);
    exit(1);
  }
  const char *t0 = "2026-03-01T10:00:00Z", *t1 = "2026-03-01T10:00:02Z",
             *t2 = "2026-03-01T10:00:32Z";
  cJSON *md = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
  cJSON *spec = cJSON_GetObjectItemCaseSensitive(pod, "spec");
  add_managed(md, "ctrain-controller", NULL, t0, spec);
  char s[128];
  snprintf(s, sizeof(s), "0c9d7e21-5a43-4f8b-b2d6-%012d", i);
  cJSON_AddStringToObject(md, "uid", s);
  snprintf(s, sizeof(s), "%d", 1000000 + gen * 100000 + i);
  cJSON_AddStringToObject(md, "resourceVersion", s);
  cJSON_AddStringToObject(md, "creationTimestamp", t0);
  /* The apiserver's defaults, the scheduler's node. */
  snprintf(s, sizeof(s), "kwok-node-%d", i % 1000);
  cJSON_AddStringToObject(spec, "nodeName", s);
  cJSON_AddStringToObject(spec, "dnsPolicy", "ClusterFirst");
  cJSON_AddBoolToObject(spec, "enableServiceLinks", 1);
  cJSON_AddStringToObject(spec, "preemptionPolicy", "PreemptLowerPriority");
  cJSON_AddNumberToObject(spec, "priority", 0);
  cJSON_AddStringToObject(spec, "schedulerName", "default-scheduler");
  cJSON_AddStringToObject(spec, "serviceAccount", "default");
  cJSON_AddStringToObject(spec, "serviceAccountName", "default");
  cJSON_AddNumberToObject(spec, "terminationGracePeriodSeconds", 30);
  cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(spec, "containers")) {
    cJSON_AddStringToObject(c, "imagePullPolicy", "Always");
    cJSON_AddItemToObject(c, "resources", cJSON_CreateObject());
    cJSON_AddStringToObject(c, "terminationMessagePath", "/dev/termination-log");
    cJSON_AddStringToObject(c, "terminationMessagePolicy", "File");
  }
  /* KWOK's status (tools/kwok/stages.yaml), the scheduler's condition. */
  char ip[32], host[32];
  snprintf(ip, sizeof(ip), "10.%d.%d.%d", 1 + i / 65536, (i / 256) % 256, i % 256);
  snprintf(host, sizeof(host), "172.18.%d.%d", (i % 1000) / 256, (i % 1000) % 256);
  char st[2048];
  snprintf(
      st, sizeof(st),
      "{\"phase\":\"%s\",\"conditions\":["
      "{\"type\":\"PodScheduled\",\"status\":\"True\",\"lastProbeTime\":null,"
      "\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"Initialized\",\"status\":\"True\",\"lastProbeTime\":null,"
      "\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"Ready\",\"status\":\"%s\",\"lastProbeTime\":null,\"lastTransitionTime\":\"%s\"},"
      "{\"type\":\"ContainersReady\",\"status\":\"%s\",\"lastProbeTime\":null,"
      "\"lastTransitionTime\":\"%s\"}],"
      "\"containerStatuses\":[{\"image\":\"ctrain:latest\",\"imageID\":\"\",\"name\":\"worker\","
      "\"ready\":%s,\"restartCount\":0,\"started\":%s,\"state\":%s}],"
      "\"hostIP\":\"%s\",\"hostIPs\":[{\"ip\":\"%s\"}],\"podIP\":\"%s\",\"podIPs\":[{\"ip\":"
      "\"%s\"}],\"qosClass\":\"BestEffort\",\"startTime\":\"%s\"}",
      succeeded ? "Succeeded" : "Running", t0, t1, succeeded ? "False" : "True", t1,
      succeeded ? "False" : "True", t1, succeeded ? "false" : "true", succeeded ? "false" : "true",
      succeeded ? "{\"terminated\":{\"exitCode\":0,\"reason\":\"Completed\",\"startedAt\":"
                  "\"2026-03-01T10:00:02Z\",\"finishedAt\":\"2026-03-01T10:00:32Z\"}}"
                : "{\"running\":{\"startedAt\":\"2026-03-01T10:00:02Z\"}}",
      host, host, ip, ip, t1);
  cJSON *status = cJSON_Parse(succeeded < 0 ? "{\"phase\":\"Pending\",\"qosClass\":"
                                              "\"BestEffort\"}"
                                            : st);
  if (succeeded >= 0)
    add_managed(md, "kwok", "status", succeeded ? t2 : t1, status);
  cJSON_AddItemToObject(pod, "status", status);
  char *text = cJSON_PrintUnformatted(pod);
  cJSON_Delete(pod);
  cJSON_Delete(job);
  return text;
}

/* ---- the apiserver (the child) ------------------------------------------- */

static int list_gen; /* lists served in full */
static int watches;  /* watch requests served */

static void write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w <= 0)
      return;
    p += w;
    n -= (size_t)w;
  }
}

static void serve_list(int fd, const char *path) {
  const char *cont = strstr(path, "continue=");
  int from = cont ? atoi(cont + 9) : 0;
  int n = watch_only ? 0 : npods;
  int to = from + page < n ? from + page : n;
  size_t cap = 1 << 20, len = 0;
  char *b = malloc(cap);
  len += (size_t)snprintf(b, cap, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{");
  if (to < n)
    len += (size_t)snprintf(b + len, cap - len, "\"continue\":\"%d\"", to);
  else
    len += (size_t)snprintf(b + len, cap - len, "\"resourceVersion\":\"%d\"",
                            1000000 + list_gen * 100000 + npods);
  len += (size_t)snprintf(b + len, cap - len, "},\"items\":[");
  for (int i = from; i < to; i++) {
    char *p = raw_pod(i, list_gen, 0);
    size_t pl = strlen(p);
    if (len + pl + 64 > cap)
      b = realloc(b, cap = 2 * (len + pl + 64));
    if (i > from)
      b[len++] = ',';
    memcpy(b + len, p, pl);
    len += pl;
    free(p);
  }
  len += (size_t)snprintf(b + len, cap - len, "]}");
  char hdr[256];
  int hl = snprintf(hdr, sizeof(hdr),
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "Content-Length: %zu\r\n\r\n",
                    len);
  write_all(fd, hdr, (size_t)hl);
  write_all(fd, b, len);
  free(b);
  if (to >= n)
    list_gen++;
}

/* The first watch: 410 (a relist). The second: every pod MODIFIED to
 * Succeeded. Then: nothing. The stream stays open until the client goes. */
static void serve_watch(int fd) {
  const char *hdr = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n";
  write_all(fd, hdr, strlen(hdr));
  int w = watches++;
  char chunk[64];
  if (w == 0 && watch_only) {
    /* As the controller sees its pods made: ADDED (Pending), then Running,
     * then Succeeded, each pod's events apart from the next one's. */
    for (int i = 0; i < 3 * npods; i++) {
      int pod = i / 3, ev = i % 3;
      char *p = raw_pod(pod, 0, ev - 1);
      const char *type = ev ? "MODIFIED" : "ADDED";
      size_t pl = strlen(p) + strlen("{\"type\":\"\",\"object\":}\n") + strlen(type);
      int n = snprintf(chunk, sizeof(chunk), "%zx\r\n{\"type\":\"%s\",\"object\":", pl, type);
      write_all(fd, chunk, (size_t)n);
      write_all(fd, p, strlen(p));
      write_all(fd, "}\n\r\n", 4);
      free(p);
    }
  } else if (w == 0) {
    const char *e = "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\","
                    "\"status\":\"Failure\",\"message\":\"too old resource version\","
                    "\"reason\":\"Expired\",\"code\":410}}\n";
    int n = snprintf(chunk, sizeof(chunk), "%zx\r\n", strlen(e));
    write_all(fd, chunk, (size_t)n);
    write_all(fd, e, strlen(e));
    write_all(fd, "\r\n0\r\n\r\n", 7);
    return;
  }
  if (w == 1) {
    for (int i = 0; i < npods; i++) {
      char *p = raw_pod(i, list_gen, 1);
      size_t pl = strlen(p) + strlen("{\"type\":\"MODIFIED\",\"object\":}\n");
      int n = snprintf(chunk, sizeof(chunk), "%zx\r\n{\"type\":\"MODIFIED\",\"object\":", pl);
      write_all(fd, chunk, (size_t)n);
      write_all(fd, p, strlen(p));
      write_all(fd, "}\n\r\n", 4);
      free(p);
    }
  }
  char tmp[4096];
  while (read(fd, tmp, sizeof(tmp)) > 0)
    ;
}

static void *conn(void *arg) {
  int fd = (int)(intptr_t)arg;
  char buf[16384];
  size_t have = 0;
  for (;;) {
    char *end;
    while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
      ssize_t n = read(fd, buf + have, sizeof(buf) - have - 1);
      if (n <= 0)
        goto done;
      have += (size_t)n;
    }
    buf[have] = '\0';
    size_t hl = (size_t)(end - buf) + 4;
    char path[8192] = "";
    sscanf(buf, "GET %8191s", path);
    int watch = strstr(path, "watch=") != NULL;
    memmove(buf, buf + hl, have - hl);
    have -= hl;
    if (watch) {
      serve_watch(fd);
      if (watches > 1)
        goto done;
    } else {
      serve_list(fd, path);
    }
  }
done:
  close(fd);
  return NULL;
}

static void serve(int lfd) {
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
      return;
    pthread_t t;
    pthread_create(&t, NULL, conn, (void *)(intptr_t)fd);
    pthread_detach(t);
  }
}

/* ---- the measurements ----------------------------------------------------- */

static long status_kib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t fl = strlen(field);
  while (f && fgets(line, sizeof(line), f))
    if (!strncmp(line, field, fl) && line[fl] == ':')
      v = atol(line + fl + 1);
  if (f)
    fclose(f);
  return v;
}

static void reset_hwm(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f) {
    fputs("5", f);
    fclose(f);
  }
}

static size_t heap_used(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

typedef struct {
  long rss, hwm;
  size_t heap;
} sample;

static sample take(const char *phase, const sample *base) {
  sample s = {status_kib("VmRSS"), status_kib("VmHWM"), heap_used()};
  printf("%-16s VmRSS %7.1f MiB  VmHWM %7.1f MiB  heap in use %7.1f MiB", phase, s.rss / 1024.0,
         s.hwm / 1024.0, (double)s.heap / 1048576.0);
  if (base)
    printf("  | per pod: heap %+6.0f B, RSS %+6.0f B, peak over start %6.0f B",
           ((double)s.heap - (double)base->heap) / npods,
           (double)(s.rss - base->rss) * 1024.0 / npods,
           (double)(s.hwm - base->rss) * 1024.0 / npods);
  printf("\n");
  fflush(stdout);
  return s;
}

static void wait_for(kube_informer *inf, long lists, long events) {
  for (int i = 0; i < 120000; i++) {
    kube_informer_stats st;
    kube_informer_get_stats(inf, &st);
    if (st.lists >= lists && st.events >= events)
      return;
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "timed out waiting for the informer\n");
  exit(1);
}

/* Bytes of the cached pods' text, parsed back out of the cache. */
static int add_len(void *ud, const cJSON *obj) {
  char *t = cJSON_PrintUnformatted(obj);
  *(size_t *)ud += strlen(t);
  cJSON_free(t);
  return 0;
}

int main(int argc, char **argv) {
  int arenas = 2;
  if (argc == 2 && !strcmp(argv[1], "--dump")) { /* one pod, as sent and as cached */
    char *p = raw_pod(1, 0, 1);
    cJSON *o = cJSON_Parse(p);
    ctl_cache_pod_fields(NULL, o);
    char *q = cJSON_PrintUnformatted(o);
    printf("%s\n%s\n", p, q);
    free(p);
    cJSON_free(q);
    cJSON_Delete(o);
    return 0;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--pods"))
      npods = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--page"))
      page = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--arenas"))
      arenas = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--watch-only"))
      watch_only = atoi(argv[i + 1]);
    else {
      fprintf(stderr,
              "usage: bench_cache_mem [--pods N] [--page P] [--arenas A] [--watch-only 1]\n");
      return 64;
    }
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof(a);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 16) ||
      getsockname(lfd, (struct sockaddr *)&a, &al)) {
    perror("listen");
    return 1;
  }
  pid_t child = fork();
  if (child == 0) {
    serve(lfd);
    _exit(0);
  }
  close(lfd);
  if (arenas > 0)
    mallopt(M_ARENA_MAX, arenas);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  printf("bench_cache_mem: %d pods (%d-worker jobs), list pages of %d, M_ARENA_MAX %d (0: glibc's "
         "default)\n",
         npods, WORKERS, page, arenas);
  char kc[512], err[256];
  snprintf(kc, sizeof(kc),
           "current-context: t\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:%d'}\n"
           "users:\n- name: u\n  user: {token: t}\n"
           "contexts:\n- name: t\n  context: {cluster: c, user: u}\n",
           ntohs(a.sin_port));
  kube_config *cfg = NULL;
  kube_client *c = NULL;
  kube_client_opts co = {.qps = -1, .http1 = 1};
  if (kube_config_parse(kc, strlen(kc), "bench", NULL, NULL, &cfg, err, sizeof(err)) ||
      kube_client_new(cfg, &co, &c, err, sizeof(err))) {
    fprintf(stderr, "client: %s\n", err);
    return 1;
  }
  kube_informer_opts o = {.gvr = &KUBE_GVR_PODS,
                          .ns = NS,
                          .label_selector = PODBUILD_LABEL_JOB,
                          .page_size = page,
                          .transform = ctl_cache_pod_fields};
  kube_informer *inf = NULL;
  if (kube_informer_new(c, &o, &inf)) {
    fprintf(stderr, "informer\n");
    return 1;
  }
  reset_hwm();
  sample s0 = take("start", NULL);
  reset_hwm();
  if (kube_informer_start(inf)) {
    fprintf(stderr, "informer: cannot start its thread\n");
    kill(child, SIGTERM);
    return 1;
  }
  if (watch_only) {
    wait_for(inf, 1, 3L * npods);
    take("watch-only", &s0);
    size_t cached = 0;
    if (kube_informer_each(inf, NULL, add_len, &cached)) {
      fprintf(stderr, "informer: out of memory scanning the cache\n");
      kill(child, SIGTERM);
      return 1;
    }
    printf("cached pods: %zu, text %.0f B per pod\n", kube_informer_len(inf),
           (double)cached / npods);
    kill(child, SIGTERM);
    return 0;
  }
  wait_for(inf, 1, 0);
  sample s1 = take("list", &s0);
  reset_hwm();
  wait_for(inf, 2, 0);
  sample s2 = take("relist", &s0);
  reset_hwm();
  wait_for(inf, 2, npods);
  sample s3 = take("watch", &s0);
  size_t cached = 0;
  if (kube_informer_each(inf, NULL, add_len, &cached)) {
    fprintf(stderr, "informer: out of memory scanning the cache\n");
    kill(child, SIGTERM);
    return 1;
  }
  printf("cached pods: %zu\n", kube_informer_len(inf));
  kube_informer_free(inf);
  kube_client_free(c);
  kube_config_free(cfg);
  kill(child, SIGTERM);
  waitpid(child, NULL, 0);

  /* The baseline, after the measurements: the pods' JSON as received. */
  size_t raw = 0, raw_done = 0;
  for (int i = 0; i < npods; i++) {
    char *p = raw_pod(i, 0, 0), *q = raw_pod(i, 0, 1);
    raw += strlen(p);
    raw_done += strlen(q);
    free(p);
    free(q);
  }
  double rawpp = (double)raw / npods, donepp = (double)raw_done / npods;
  double heap_pp = ((double)s3.heap - (double)s0.heap) / npods;
  printf("baseline: the pod's JSON as the apiserver sends it: %.0f B Running, %.0f B Succeeded\n",
         rawpp, donepp);
  printf("cached text (after the transform): %.0f B per pod\n", (double)cached / npods);
  printf("bytes per cached pod (heap in use after the watch): %.0f B = %.2f x the raw JSON; "
         "text %.0f B + cache overhead %.0f B\n",
         heap_pp, heap_pp / donepp, (double)cached / npods, heap_pp - (double)cached / npods);
  printf("peak RSS over start: list %.0f B/pod, relist %.0f B/pod, watch %.0f B/pod "
         "(%.2f x the raw JSON)\n",
         (double)(s1.hwm - s0.rss) * 1024.0 / npods, (double)(s2.hwm - s0.rss) * 1024.0 / npods,
         (double)(s3.hwm - s0.rss) * 1024.0 / npods,
         (double)(s3.hwm - s0.rss) * 1024.0 / npods / donepp);
  printf("relist peak over the live cache: %.2f x the cache's heap\n",
         (double)(s2.hwm - s1.rss) * 1024.0 / ((double)s1.heap - (double)s0.heap));
  curl_global_cleanup();
  return 0;
}
