/* bench_create.c - creates N objects as fast as one kube_client allows: the
 * baseline for bench/controller.py (the raw apiserver create rate with the
 * same client the controller uses), and its load generator.
 *
 *   bench_create --kubeconfig F --ns NS --count N [--parallel P]
 *                [--group G --version V --resource R] --template FILE
 *
 * FILE is a JSON object; "%d" in metadata.name is replaced by the index.
 * Client-side rate limiting is off (qps < 0) so the apiserver is the limit.
 * Prints "created N in S s: R/s" and exits non-zero if any create failed. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"

static kube_client *client;
static kube_gvr gvr = {"", "v1", "pods"};
static const char *ns = "default";
static cJSON *tmpl;
static char name_pre[256], name_post[256]; /* metadata.name around its "%d" */
static atomic_int next_index, failures;
static int count = 100;

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *run(void *arg) {
  (void)arg;
  for (;;) {
    int i = atomic_fetch_add(&next_index, 1);
    if (i >= count)
      break;
    cJSON *obj = cJSON_Duplicate(tmpl, 1);
    cJSON *md = cJSON_GetObjectItemCaseSensitive(obj, "metadata");
    char name[600];
    snprintf(name, sizeof(name), "%s%d%s", name_pre, i, name_post);
    cJSON_ReplaceItemInObjectCaseSensitive(md, "name", cJSON_CreateString(name));
    kube_status st;
    ctrain_err r = kube_client_create(client, &gvr, ns, obj, NULL, NULL, &st);
    if (r) {
      atomic_fetch_add(&failures, 1);
      fprintf(stderr, "create %s: %s (HTTP %d %s: %s)\n", name, ctrain_strerror(r), st.http_code,
              st.reason, st.message);
    }
    cJSON_Delete(obj);
  }
  return NULL;
}

int main(int argc, char **argv) {
  const char *kc = NULL, *tfile = NULL;
  int parallel = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--kubeconfig"))
      kc = argv[i + 1];
    else if (!strcmp(argv[i], "--ns"))
      ns = argv[i + 1];
    else if (!strcmp(argv[i], "--count"))
      count = (int)strtol(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--parallel"))
      parallel = (int)strtol(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--group"))
      gvr.group = argv[i + 1];
    else if (!strcmp(argv[i], "--version"))
      gvr.version = argv[i + 1];
    else if (!strcmp(argv[i], "--resource"))
      gvr.resource = argv[i + 1];
    else if (!strcmp(argv[i], "--template"))
      tfile = argv[i + 1];
    else {
      fprintf(stderr, "bench_create: unknown flag %s\n", argv[i]);
      return 64;
    }
  }
  if (!tfile || count < 1 || parallel < 1 || parallel > 256) {
    fprintf(stderr, "usage: bench_create --kubeconfig F --ns NS --count N [--parallel P] "
                    "[--group G --version V --resource R] --template FILE\n");
    return 64;
  }
  FILE *f = fopen(tfile, "rb");
  if (!f) {
    perror(tfile);
    return 66;
  }
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  tmpl = cJSON_Parse(buf);
  const char *tname = cJSON_GetStringValue(
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tmpl, "metadata"), "name"));
  if (!tname || !strstr(tname, "%d") || strchr(strstr(tname, "%d") + 1, '%')) {
    fprintf(stderr, "%s: metadata.name must contain one %%d\n", tfile);
    return 65;
  }
  const char *pct = strstr(tname, "%d");
  snprintf(name_pre, sizeof(name_pre), "%.*s", (int)(pct - tname), tname);
  snprintf(name_post, sizeof(name_post), "%s", pct + 2);

  curl_global_init(CURL_GLOBAL_DEFAULT);
  kube_config *cfg = NULL;
  char err[512];
  if (kube_config_load_default(kc, NULL, &cfg, err, sizeof(err))) {
    fprintf(stderr, "kubeconfig: %s\n", err);
    return 78;
  }
  kube_client_opts co = {.qps = -1, .burst = 1};
  if (kube_client_new(cfg, &co, &client, err, sizeof(err))) {
    fprintf(stderr, "client: %s\n", err);
    return 78;
  }
  pthread_t th[256];
  double t0 = mono();
  for (int i = 0; i < parallel; i++)
    pthread_create(&th[i], NULL, run, NULL);
  for (int i = 0; i < parallel; i++)
    pthread_join(th[i], NULL);
  double dt = mono() - t0;
  printf("created %d %s in %.3f s: %.1f/s (%d parallel, %d failed)\n", count - failures,
         gvr.resource, dt, (count - failures) / dt, parallel, (int)failures);
  kube_client_free(client);
  kube_config_free(cfg);
  cJSON_Delete(tmpl);
  curl_global_cleanup();
  return failures ? 1 : 0;
}
