/* uninstall.c - the one-shot release of our pods' finalizer (uninstall.h). */
#include "controller/uninstall.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controller/executor.h"
#include "controller/podbuild.h"
#include "ctrain/json.h"
#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "ctrain/log.h"

/* What one run saw and did. */
typedef struct rel_run {
  ctl_exec exec;     /* the client only: ctl_exec_remove_finalizer needs no more */
  long released;     /* pods that lost the finalizer */
  long failed;       /* pods that still hold it */
  char **namespaces; /* distinct namespaces of released pods, owned */
  size_t n_ns, cap_ns;
  char named[CTL_UNINSTALL_NAMED][1024]; /* the first failures, "ns/name: why" */
  ctrain_err first;                      /* the first failure */
} rel_run;

/* Counts `ns` once. Uninstall runs once, so a linear search is enough: the
 * cost is pods x namespaces string compares, no request. */
static ctrain_err count_namespace(rel_run *r, const char *ns) {
  for (size_t i = 0; i < r->n_ns; i++)
    if (!strcmp(r->namespaces[i], ns))
      return CTRAIN_OK;
  if (r->n_ns == r->cap_ns) {
    size_t cap = r->cap_ns ? 2 * r->cap_ns : 16;
    char **grown = realloc(r->namespaces, cap * sizeof(*grown));
    if (!grown)
      return CTRAIN_E_NOMEM;
    r->namespaces = grown;
    r->cap_ns = cap;
  }
  char *copy = strdup(ns);
  if (!copy)
    return CTRAIN_E_NOMEM;
  r->namespaces[r->n_ns++] = copy;
  return CTRAIN_OK;
}

static void fail_pod(rel_run *r, ctrain_err err, const char *ns, const char *name,
                     const kube_status *st) {
  LOG_WARN("pod %s/%s: removing finalizer %s: %s (HTTP %d %s: %s)", ns, name, PODBUILD_FINALIZER,
           ctrain_strerror(err), st->http_code, st->reason, st->message);
  if (r->failed < CTL_UNINSTALL_NAMED)
    snprintf(r->named[r->failed], sizeof(r->named[0]), "%s/%s: %s (HTTP %d %s: %.400s)", ns, name,
             ctrain_strerror(err), st->http_code, st->reason, st->message);
  r->failed++;
  if (!r->first)
    r->first = err;
}

/* Releases one pod, if it carries our finalizer. A test that fails (422:
 * the pod changed between the list and the patch) makes
 * ctl_exec_remove_finalizer read the pod and patch it at its new index; a
 * pod that keeps changing is tried again, up to CTL_UNINSTALL_TRIES. */
static ctrain_err release_pod(rel_run *r, const cJSON *pod) {
  const cJSON *md = ctrain_json_get(pod, "metadata");
  const char *ns = ctrain_json_str(md, "namespace"), *name = ctrain_json_str(md, "name");
  const char *uid = ctrain_json_str(md, "uid");
  int idx = podbuild_finalizer_index(pod);
  if (idx < 0)
    return CTRAIN_OK; /* not ours to touch */
  kube_status st = {0};
  if (!ns || !name || !uid) {
    snprintf(st.message, sizeof(st.message), "the listed pod has no namespace, name or uid");
    fail_pod(r, CTRAIN_E_PARSE, ns ? ns : "?", name ? name : "?", &st);
    return CTRAIN_OK;
  }
  ctrain_err err = CTRAIN_E_INVAL;
  for (int i = 0; i < CTL_UNINSTALL_TRIES && err == CTRAIN_E_INVAL; i++)
    err = ctl_exec_remove_finalizer(&r->exec, ns, name, uid, idx, &st);
  if (err) {
    fail_pod(r, err, ns, name, &st);
    return CTRAIN_OK;
  }
  LOG_INFO("pod %s/%s: finalizer %s removed", ns, name, PODBUILD_FINALIZER);
  r->released++;
  return count_namespace(r, ns);
}

/* Lists the scope page by page (CTL_UNINSTALL_PAGE pods a request, so
 * 10,000 pods never sit in memory at once) and releases each page's pods.
 * A continue token that expired (410) starts the list again: pods already
 * released no longer carry the finalizer and are passed over. */
static ctrain_err release_all(rel_run *r, kube_client *client, const char *ns, FILE *out) {
  ctrain_err result = CTRAIN_OK;
  char *cont = NULL;
  int restarts = 0;
  for (;;) {
    kube_list_opts lo = {
        .label_selector = PODBUILD_LABEL_JOB, .limit = CTL_UNINSTALL_PAGE, .continue_token = cont};
    kube_status st = {0};
    cJSON *page = NULL;
    result = kube_client_list(client, &KUBE_GVR_PODS, ns, &lo, &page, &st);
    if (result == CTRAIN_E_GONE && cont && restarts++ < 3) {
      LOG_WARN("listing pods: the continue token expired (HTTP 410); listing again");
      free(cont);
      cont = NULL;
      continue;
    }
    if (result) {
      fprintf(out, "ctrain-controller: cannot list pods in %s: %s (HTTP %d %s: %s)\n",
              ns ? ns : "all namespaces", ctrain_strerror(result), st.http_code, st.reason,
              st.message);
      goto out;
    }
    const cJSON *pod;
    cJSON_ArrayForEach(pod, ctrain_json_get(page, "items")) {
      if ((result = release_pod(r, pod)))
        break;
    }
    const char *next = ctrain_json_str(ctrain_json_get(page, "metadata"), "continue");
    free(cont);
    cont = next && *next ? strdup(next) : NULL;
    int more = next && *next;
    cJSON_Delete(page);
    if (result)
      goto out;
    if (more && !cont) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    if (!more)
      break;
  }
out:
  free(cont);
  return result;
}

static const char *plural(long n) {
  return n == 1 ? "" : "s";
}

ctrain_err ctl_release_finalizers(const ctl_options *o, FILE *out) {
  kube_config *cfg = NULL;
  kube_client *client = NULL;
  rel_run r;
  char err[512] = "";
  const char *scope = o->namespace_ ? o->namespace_ : "all namespaces";
  memset(&r, 0, sizeof(r));
  ctrain_err result = kube_config_load_default(o->kubeconfig, o->context, &cfg, err, sizeof(err));
  if (result) {
    fprintf(out, "ctrain-controller: kubeconfig: %s\n", err);
    goto out;
  }
  kube_client_opts co = {.qps = o->qps, .burst = o->burst};
  result = kube_client_new(cfg, &co, &client, err, sizeof(err));
  if (result) {
    fprintf(out, "ctrain-controller: kube client: %s\n", err);
    goto out;
  }
  r.exec.client = client;
  LOG_INFO("releasing finalizer %s from pods in %s (API server %s)", PODBUILD_FINALIZER, scope,
           cfg->server);
  result = release_all(&r, client, o->namespace_, out);
  if (result) {
    fprintf(out,
            "ctrain-controller: %ld pods released before the list failed; run "
            "ctrain-controller --release-finalizers again\n",
            r.released);
    goto out;
  }
  if (r.failed) {
    fprintf(out,
            "ctrain-controller: released finalizer %s from %ld pod%s in %zu namespace%s (%s); "
            "%ld pod%s still holding it:\n",
            PODBUILD_FINALIZER, r.released, plural(r.released), r.n_ns, plural((long)r.n_ns), scope,
            r.failed, plural(r.failed));
    for (long i = 0; i < r.failed && i < CTL_UNINSTALL_NAMED; i++)
      fprintf(out, "  %s\n", r.named[i]);
    if (r.failed > CTL_UNINSTALL_NAMED)
      fprintf(out, "  and %ld more (the log names each)\n", r.failed - CTL_UNINSTALL_NAMED);
    fprintf(out, "Fix the cause and run ctrain-controller --release-finalizers again.\n");
    result = r.first;
    goto out;
  }
  fprintf(out, "ctrain-controller: released finalizer %s from %ld pod%s in %zu namespace%s (%s)\n",
          PODBUILD_FINALIZER, r.released, plural(r.released), r.n_ns, plural((long)r.n_ns), scope);
out:
  for (size_t i = 0; i < r.n_ns; i++)
    free(r.namespaces[i]);
  free(r.namespaces);
  kube_client_free(client);
  kube_config_free(cfg);
  return result;
}
