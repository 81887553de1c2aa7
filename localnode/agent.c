/* agent.c - the ctrain-localnode daemon (see ctrain/lnode_agent.h). */
#include "ctrain/lnode_agent.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctrain/kube_client.h"
#include "ctrain/kube_config.h"
#include "ctrain/kube_watch.h"
#include "ctrain/log.h"
#include "ctrain/lnode_cmd.h"
#include "ctrain/lnode_env.h"
#include "ctrain/lnode_hosts.h"
#include "ctrain/lnode_net.h"
#include "ctrain/lnode_node.h"
#include "ctrain/lnode_spawn.h"
#include "ctrain/lnode_status.h"
#include "ctrain/lnode_util.h"
#include "ctrain/lnode_volume.h"

#ifndef CTRAIN_VERSION
#define CTRAIN_VERSION "0.0.0"
#endif

#define RETRY_MS      3000
#define BACKOFF_MAX_S 300

/* ---- pods ----------------------------------------------------------------- */

typedef enum {
  POD_NEW = 0,  /* nothing set up yet */
  POD_RUNNING,  /* sandbox up, containers started or waiting */
  POD_DONE,     /* terminal phase reached, sandbox torn down */
  POD_FINISHED, /* deleted from the API by us; waiting for the DELETED event */
} pod_state;

typedef struct container {
  lnode_cstatus st;
  int64_t start_at_ms; /* when a waiting container may (re)start */
  int backoff_s;
  int killed; /* SIGKILL sent */
} container;

typedef struct pod {
  char uid[64], ns[256], name[256];
  char hostname[256], subdomain[256];
  char dir[1024]; /* <state>/pods/<uid> */
  char netns[32]; /* lnp-<uid12> */
  char veth[16];  /* lnv<uid11> */
  cJSON *obj;     /* latest object from the API; owned */
  int gone;       /* no longer in the API */
  pod_state state;
  int sandbox;      /* netns exists */
  int64_t retry_ms; /* sandbox set-up retry */
  container *c;
  size_t nc;
  lnode_pstatus ps;
  lnode_volumes vols;
  char *last_sent; /* last status JSON posted; owned */
  int64_t status_retry_ms;
  int terminating;
  int64_t kill_deadline_ms;
  struct pod *next;
} pod;

/* ---- watch queue ---------------------------------------------------------- */

typedef enum { EV_UPSERT = 0, EV_DELETE, EV_SYNC } ev_type;

typedef struct ev {
  ev_type type;
  cJSON *obj; /* pod, or for EV_SYNC a list's items array; owned */
  struct ev *next;
} ev;

typedef struct agent {
  const lnode_options *o;
  volatile int *stop;
  kube_config *cfg;
  kube_client *kc;
  char node_name[256];
  char node_uid[64];
  char node_ip[64];
  char *ip_bin;
  char *bin_dirs;       /* ':'-joined --bin-dir list */
  char *container_path; /* PATH of containers */
  char *host_path;      /* PATH of this process */
  lnode_ipam ipam;
  int bridge_created;
  lnode_resources res;
  pod *pods;
  int hosts_dirty;
  int image_logged;
  /* Mount-point directories this agent had to create on the host (the
   * containers share its root filesystem): {top created dir, leaf}. */
  char **mp_top, **mp_leaf;
  size_t n_mp;

  pthread_mutex_t mu;
  pthread_cond_t cv;
  ev *q_head, *q_tail;
  kube_watch *watch;
  int threads_stop;
} agent;

static void enqueue(agent *a, ev_type t, cJSON *obj) {
  ev *e = calloc(1, sizeof(*e));
  if (!e) {
    cJSON_Delete(obj);
    return;
  }
  e->type = t;
  e->obj = obj;
  pthread_mutex_lock(&a->mu);
  if (a->q_tail)
    a->q_tail->next = e;
  else
    a->q_head = e;
  a->q_tail = e;
  pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&a->mu);
}

static ctrain_err on_watch(void *ud, kube_watch_event *e) {
  agent *a = ud;
  if (e->type == KUBE_WATCH_BOOKMARK || !e->object)
    return CTRAIN_OK;
  cJSON *obj = e->object;
  e->object = NULL;
  enqueue(a, e->type == KUBE_WATCH_DELETED ? EV_DELETE : EV_UPSERT, obj);
  return CTRAIN_OK;
}

static ctrain_err relist(void *ud, char *rv, size_t cap) {
  agent *a = ud;
  char sel[1024];
  cJSON *list = NULL;
  kube_status st;
  snprintf(sel, sizeof(sel), "spec.nodeName=%s", a->node_name);
  kube_list_opts lo = {.field_selector = sel};
  ctrain_err result = kube_client_list(a->kc, &KUBE_GVR_PODS, NULL, &lo, &list, &st);
  if (result) {
    LOG_WARN("relist pods: %s (%d %s)", ctrain_strerror(result), st.http_code, st.message);
    return result;
  }
  const char *v = lnode_json_str(list, "metadata.resourceVersion");
  snprintf(rv, cap, "%s", v ? v : "");
  cJSON *items = cJSON_DetachItemFromObjectCaseSensitive(list, "items");
  cJSON_Delete(list);
  enqueue(a, EV_SYNC, items ? items : cJSON_CreateArray());
  return CTRAIN_OK;
}

static void *watch_main(void *ud) {
  agent *a = ud;
  while (!a->threads_stop) {
    kube_status st;
    ctrain_err result = kube_watch_run(a->watch, on_watch, a, &st);
    if (result == CTRAIN_E_CANCELLED || a->threads_stop)
      break;
    LOG_ERROR("pod watch stopped: %s (%d %s %s); restarting in 5 s", ctrain_strerror(result),
              st.http_code, st.reason, st.message);
    for (int i = 0; i < 50 && !a->threads_stop; i++)
      usleep(100000);
  }
  return NULL;
}

/* ---- node, lease ------------------------------------------------------------ */

static ctrain_err node_patch_status(agent *a, int ready, const char *reason, const char *msg) {
  lnode_node_info ni = {a->node_name, a->node_ip, CTRAIN_VERSION, ready, reason, msg};
  cJSON *p = cJSON_CreateObject();
  char *body = NULL;
  kube_status st;
  ctrain_err result = CTRAIN_OK;
  if (!p)
    return CTRAIN_E_NOMEM;
  cJSON_AddItemToObject(p, "status", lnode_node_status(&ni, &a->res, time(NULL)));
  body = cJSON_PrintUnformatted(p);
  if (!body) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  result = kube_client_patch(a->kc, &KUBE_GVR_NODES, NULL, a->node_name, "status",
                             KUBE_PATCH_STRATEGIC, body, NULL, NULL, &st);
  if (result)
    LOG_WARN("node %s: status update: %s (%d %s)", a->node_name, ctrain_strerror(result),
             st.http_code, st.message);
out:
  free(body);
  cJSON_Delete(p);
  return result;
}

/* Registers the Node (create, or adopt an existing one), posts Ready and
 * drops not-ready taints. */
static ctrain_err node_register(agent *a, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  lnode_node_info ni = {a->node_name, a->node_ip, CTRAIN_VERSION, 1, NULL, NULL};
  cJSON *obj = lnode_node_object(&ni, &a->res, time(NULL));
  cJSON *got = NULL;
  kube_status st;
  if (!obj)
    return CTRAIN_E_NOMEM;
  result = kube_client_create(a->kc, &KUBE_GVR_NODES, NULL, obj, NULL, &got, &st);
  if (result == CTRAIN_E_CONFLICT) {
    char *labels = NULL;
    cJSON *p = cJSON_CreateObject();
    cJSON *md = cJSON_AddObjectToObject(p, "metadata");
    cJSON_AddItemToObject(md, "labels", cJSON_Duplicate(lnode_json_at(obj, "metadata.labels"), 1));
    labels = cJSON_PrintUnformatted(p);
    cJSON_Delete(p);
    result = labels ? kube_client_patch(a->kc, &KUBE_GVR_NODES, NULL, a->node_name, NULL,
                                        KUBE_PATCH_MERGE, labels, NULL, &got, &st)
                    : CTRAIN_E_NOMEM;
    free(labels);
  }
  if (result) {
    ctrain_errf(result, err, errlen, "register node %s: %d %s %s", a->node_name, st.http_code,
                st.reason, st.message);
    goto out;
  }
  snprintf(a->node_uid, sizeof(a->node_uid), "%s",
           lnode_json_str(got, "metadata.uid") ? lnode_json_str(got, "metadata.uid") : "");
  result = node_patch_status(a, 1, NULL, NULL);
  if (result) {
    ctrain_errf(result, err, errlen, "node %s: status update failed", a->node_name);
    goto out;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    cJSON_Delete(got);
    got = NULL;
    if (kube_client_get(a->kc, &KUBE_GVR_NODES, NULL, a->node_name, &got, &st))
      break;
    if (!lnode_node_drop_notready_taints(got))
      break;
    ctrain_err r2 = kube_client_update(a->kc, &KUBE_GVR_NODES, NULL, got, NULL, NULL, &st);
    if (r2 == CTRAIN_OK) {
      LOG_INFO("node %s: removed not-ready taints", a->node_name);
      break;
    }
    if (r2 != CTRAIN_E_CONFLICT) {
      LOG_WARN("node %s: removing taints: %d %s", a->node_name, st.http_code, st.message);
      break;
    }
  }
  LOG_INFO("node %s registered (cpu %ld, memory %lldKi, pods %d, nvidia.com/gpu %d, ip %s)",
           a->node_name, a->res.cpus, a->res.memory_kib, a->res.pods, a->res.gpus, a->node_ip);
out:
  cJSON_Delete(obj);
  cJSON_Delete(got);
  return result;
}

static void lease_renew(agent *a) {
  struct timespec now;
  kube_status st;
  cJSON *cur = NULL;
  clock_gettime(CLOCK_REALTIME, &now);
  cJSON *want = lnode_lease_object(a->node_name, a->node_uid[0] ? a->node_uid : NULL,
                                   a->o->lease_duration_s, &now);
  ctrain_err result =
      kube_client_get(a->kc, &KUBE_GVR_LEASES, "kube-node-lease", a->node_name, &cur, &st);
  if (result == CTRAIN_E_NOTFOUND) {
    result = kube_client_create(a->kc, &KUBE_GVR_LEASES, "kube-node-lease", want, NULL, NULL, &st);
  } else if (!result) {
    cJSON *spec = cJSON_GetObjectItemCaseSensitive(cur, "spec");
    cJSON *wspec = cJSON_GetObjectItemCaseSensitive(want, "spec");
    if (spec)
      cJSON_ReplaceItemInObjectCaseSensitive(cur, "spec", cJSON_Duplicate(wspec, 1));
    else
      cJSON_AddItemToObject(cur, "spec", cJSON_Duplicate(wspec, 1));
    result = kube_client_update(a->kc, &KUBE_GVR_LEASES, "kube-node-lease", cur, NULL, NULL, &st);
  }
  if (result)
    LOG_WARN("node lease renew: %s (%d %s)", ctrain_strerror(result), st.http_code, st.message);
  cJSON_Delete(cur);
  cJSON_Delete(want);
}

static void *heartbeat_main(void *ud) {
  agent *a = ud;
  int64_t next_lease = 0, next_status = lnode_mono_ms() + (int64_t)a->o->status_period_s * 1000;
  while (!a->threads_stop) {
    int64_t now = lnode_mono_ms();
    if (now >= next_lease) {
      lease_renew(a);
      next_lease = now + (int64_t)a->o->heartbeat_s * 1000;
    }
    if (now >= next_status) {
      node_patch_status(a, 1, NULL, NULL);
      next_status = now + (int64_t)a->o->status_period_s * 1000;
    }
    usleep(100000);
  }
  return NULL;
}

/* ---- API lookups for env and volumes --------------------------------------- */

static ctrain_err lookup(void *ud, lnode_ref_kind kind, const char *ns, const char *name,
                         cJSON **out) {
  agent *a = ud;
  kube_status st;
  return kube_client_get(a->kc, kind == LNODE_REF_SECRET ? &KUBE_GVR_SECRETS : &KUBE_GVR_CONFIGMAPS,
                         ns, name, out, &st);
}

static void env_ctx(agent *a, pod *p, lnode_env_ctx *ctx) {
  memset(ctx, 0, sizeof(*ctx));
  ctx->pod = p->obj;
  ctx->pod_ip = p->ps.pod_ip;
  ctx->host_ip = a->node_ip;
  ctx->node_name = a->node_name;
  ctx->base_path = a->container_path;
  ctx->hostname = p->hostname;
  ctx->lookup = lookup;
  ctx->lookup_ud = a;
}

/* ---- sandbox ---------------------------------------------------------------- */

static void pod_log_path(agent *a, pod *p, const char *cname, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/logs/%s_%s_%s.log", a->o->state_dir, p->ns, p->name, cname);
}

static ctrain_err write_hosts(agent *a, pod *p) {
  lnode_host_entry self = {p->ps.pod_ip, p->hostname, p->subdomain, p->ns};
  lnode_host_entry *all = NULL;
  size_t n = 0, cap = 0;
  char *text = NULL;
  char path[1100];
  ctrain_err result = CTRAIN_OK;
  for (pod *q = a->pods; q; q = q->next) {
    if (!q->sandbox || !q->ps.pod_ip[0])
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      lnode_host_entry *na = realloc(all, cap * sizeof(*na));
      if (!na) {
        result = CTRAIN_E_NOMEM;
        goto out;
      }
      all = na;
    }
    all[n++] = (lnode_host_entry){q->ps.pod_ip, q->hostname, q->subdomain, q->ns};
  }
  result = lnode_hosts_render(&self, all, n, a->o->cluster_domain, &text);
  if (result)
    goto out;
  snprintf(path, sizeof(path), "%s/hosts", p->dir);
  result = lnode_write_file_inplace(path, text, strlen(text), 0644, NULL, 0);
out:
  free(all);
  free(text);
  return result;
}

/* Kills every process left in the pod's network namespace (children that
 * left the container's process group). */
static void kill_netns_procs(pod *p) {
  char path[300];
  struct stat ns_st, st;
  snprintf(path, sizeof(path), "/run/netns/%s", p->netns);
  if (stat(path, &ns_st))
    return;
  DIR *d = opendir("/proc");
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    char *end = NULL;
    long pid = strtol(de->d_name, &end, 10);
    if (!*de->d_name || *end || pid <= 1)
      continue;
    snprintf(path, sizeof(path), "/proc/%ld/ns/net", pid);
    if (!stat(path, &st) && st.st_ino == ns_st.st_ino && st.st_dev == ns_st.st_dev)
      kill((pid_t)pid, SIGKILL);
  }
  closedir(d);
}

static void sandbox_down(agent *a, pod *p) {
  if (!p->sandbox)
    return;
  kill_netns_procs(p);
  lnode_net_pod_down(a->ip_bin, p->netns, p->veth);
  lnode_ipam_release(&a->ipam, p->ps.pod_ip);
  p->sandbox = 0;
  a->hosts_dirty = 1;
  LOG_INFO("pod %s/%s: sandbox removed", p->ns, p->name);
}

static ctrain_err sandbox_up(agent *a, pod *p, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char path[1200];
  lnode_env_ctx ectx;
  result = lnode_mkdir_p(p->dir, 0755, err, errlen);
  if (result)
    goto out;
  if (!p->ps.pod_ip[0]) {
    result = lnode_ipam_alloc(&a->ipam, p->ps.pod_ip, sizeof(p->ps.pod_ip));
    if (result) {
      ctrain_errf(result, err, errlen, "no free address in %s", a->o->pod_cidr);
      goto out;
    }
  }
  /* Recorded first, so a crashed agent's next run can clean up. */
  snprintf(path, sizeof(path), "%s/sandbox", p->dir);
  char rec[128];
  snprintf(rec, sizeof(rec), "%s %s\n", p->netns, p->veth);
  result = lnode_write_file_atomic(path, rec, strlen(rec), 0644, err, errlen);
  if (result)
    goto out;
  p->sandbox = 1;
  result = lnode_net_pod_up(a->ip_bin, a->o->bridge, p->netns, p->veth, p->ps.pod_ip,
                            a->ipam.prefix, err, errlen);
  if (result)
    goto out;
  result = write_hosts(a, p);
  if (result) {
    ctrain_errf(result, err, errlen, "write %s/hosts", p->dir);
    goto out;
  }
  env_ctx(a, p, &ectx);
  lnode_volume_ctx vctx = {a->kc, a->o->state_dir, p->dir, &ectx};
  lnode_volumes_free(&p->vols);
  result = lnode_volumes_prepare(&vctx, 0, &p->vols, err, errlen);
  if (result)
    goto out;
  a->hosts_dirty = 1;
  LOG_INFO("pod %s/%s: sandbox %s ip %s", p->ns, p->name, p->netns, p->ps.pod_ip);
out:
  if (result)
    sandbox_down(a, p);
  return result;
}

/* ---- containers -------------------------------------------------------------- */

static const cJSON *container_spec(pod *p, size_t i) {
  return cJSON_GetArrayItem(lnode_json_at(p->obj, "spec.containers"), (int)i);
}

static const char *restart_policy(pod *p) {
  const char *rp = lnode_json_str(p->obj, "spec.restartPolicy");
  return rp ? rp : "Always";
}

static void set_waiting(container *c, const char *reason, const char *msg) {
  c->st.kind = LNODE_C_WAITING;
  snprintf(c->st.waiting_reason, sizeof(c->st.waiting_reason), "%s", reason);
  snprintf(c->st.waiting_message, sizeof(c->st.waiting_message), "%s", msg ? msg : "");
}

static void set_terminated(container *c, int code, int sig, const char *reason, const char *msg,
                           time_t started, time_t finished) {
  c->st.kind = LNODE_C_TERMINATED;
  c->st.term.exit_code = code;
  c->st.term.signal = sig;
  snprintf(c->st.term.reason, sizeof(c->st.term.reason), "%s", reason);
  snprintf(c->st.term.message, sizeof(c->st.term.message), "%s", msg ? msg : "");
  c->st.term.started_at = started;
  c->st.term.finished_at = finished;
}

/* Records the directories a mount at `dst` will create on the host, so they
 * can be removed again once no pod runs (the mounts themselves live in the
 * containers' private namespaces; on the host these stay empty). */
static void mountpoint_note(agent *a, const char *dst) {
  char top[4096];
  struct stat st;
  if (!stat(dst, &st) || strlen(dst) >= sizeof(top))
    return;
  memcpy(top, dst, strlen(dst) + 1);
  for (;;) {
    char *slash = strrchr(top, '/');
    if (!slash || slash == top)
      break;
    *slash = '\0';
    if (!stat(top, &st)) {
      *slash = '/';
      break;
    }
  }
  for (size_t i = 0; i < a->n_mp; i++)
    if (!strcmp(a->mp_leaf[i], dst))
      return;
  char **nt = realloc(a->mp_top, (a->n_mp + 1) * sizeof(*nt));
  if (!nt)
    return;
  a->mp_top = nt;
  char **nl = realloc(a->mp_leaf, (a->n_mp + 1) * sizeof(*nl));
  if (!nl)
    return;
  a->mp_leaf = nl;
  a->mp_top[a->n_mp] = strdup(top);
  a->mp_leaf[a->n_mp] = strdup(dst);
  if (!a->mp_top[a->n_mp] || !a->mp_leaf[a->n_mp]) {
    free(a->mp_top[a->n_mp]);
    free(a->mp_leaf[a->n_mp]);
    return;
  }
  a->n_mp++;
}

/* Removes the noted mount points (empty directories only, leaf up to the
 * top one created). Called when no pod has a sandbox. */
static void mountpoints_gc(agent *a) {
  for (size_t i = 0; i < a->n_mp; i++) {
    char path[4096];
    snprintf(path, sizeof(path), "%s", a->mp_leaf[i]);
    size_t top_len = strlen(a->mp_top[i]);
    while (strlen(path) >= top_len && !rmdir(path)) {
      char *slash = strrchr(path, '/');
      if (!slash || slash == path)
        break;
      *slash = '\0';
    }
    free(a->mp_top[i]);
    free(a->mp_leaf[i]);
  }
  free(a->mp_top);
  free(a->mp_leaf);
  a->mp_top = a->mp_leaf = NULL;
  a->n_mp = 0;
}

static void start_container(agent *a, pod *p, size_t i) {
  container *c = &p->c[i];
  const cJSON *spec = container_spec(p, i);
  lnode_env env = {0};
  lnode_env_ctx ectx;
  char **argv = NULL;
  char *exe = NULL;
  lnode_mount *mounts = NULL;
  char **srcs = NULL;
  size_t nm = 0;
  char err[512] = "", hosts[1100], logp[1400];
  ctrain_err result = CTRAIN_OK;
  const cJSON *vms = cJSON_GetObjectItemCaseSensitive(spec, "volumeMounts");
  size_t nvm = (size_t)cJSON_GetArraySize(vms);

  if (!a->image_logged && lnode_json_str(spec, "image")) {
    LOG_INFO("container images are ignored: commands run as local processes (first: %s)",
             lnode_json_str(spec, "image"));
    a->image_logged = 1;
  }
  env_ctx(a, p, &ectx);
  result = lnode_env_build(&ectx, spec, &env, err, sizeof(err));
  if (!result)
    result = lnode_cmd_argv(spec, &env, &argv, err, sizeof(err));
  if (result) {
    set_waiting(c, "CreateContainerConfigError", err);
    c->start_at_ms = lnode_mono_ms() + RETRY_MS;
    LOG_WARN("pod %s/%s container %s: %s", p->ns, p->name, c->st.name, err);
    goto out;
  }
  const char *cpath = lnode_env_get(&env, "PATH");
  result =
      lnode_cmd_resolve(argv[0], a->bin_dirs, cpath ? cpath : a->host_path, &exe, err, sizeof(err));
  if (result)
    goto start_error;
  mounts = calloc(nvm + 1, sizeof(*mounts));
  srcs = calloc(nvm + 1, sizeof(*srcs));
  if (!mounts || !srcs) {
    result = CTRAIN_E_NOMEM;
    snprintf(err, sizeof(err), "out of memory");
    goto start_error;
  }
  snprintf(hosts, sizeof(hosts), "%s/hosts", p->dir);
  mounts[nm++] = (lnode_mount){hosts, "/etc/hosts", 0};
  const cJSON *vm;
  cJSON_ArrayForEach(vm, vms) {
    const char *vname = lnode_json_str(vm, "name");
    const char *mp = lnode_json_str(vm, "mountPath");
    const char *sub = lnode_json_str(vm, "subPath");
    const lnode_volume *v = vname ? lnode_volumes_find(&p->vols, vname) : NULL;
    if (!v || !mp || *mp != '/') {
      result = CTRAIN_E_CONFIG;
      snprintf(err, sizeof(err), "volumeMount \"%s\": no such volume or bad mountPath",
               vname ? vname : "");
      goto start_error;
    }
    size_t k = nm - 1;
    if (sub && *sub) {
      size_t l = strlen(v->path) + strlen(sub) + 2;
      srcs[k] = malloc(l);
      if (!srcs[k] || strstr(sub, "..")) {
        result = CTRAIN_E_CONFIG;
        snprintf(err, sizeof(err), "volumeMount \"%s\": bad subPath", vname);
        goto start_error;
      }
      snprintf(srcs[k], l, "%s/%s", v->path, sub);
      if (access(srcs[k], F_OK))
        lnode_mkdir_p(srcs[k], 0777, NULL, 0);
    }
    mounts[nm++] = (lnode_mount){
        srcs[k] ? srcs[k] : v->path, mp,
        v->read_only || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(vm, "readOnly"))};
  }
  lnode_mounts_sort(mounts, nm);
  for (size_t k = 0; k < nm; k++) {
    struct stat vst;
    if (!stat(mounts[k].src, &vst) && S_ISDIR(vst.st_mode))
      mountpoint_note(a, mounts[k].dst);
  }
  char netns_path[64];
  snprintf(netns_path, sizeof(netns_path), "/run/netns/%s", p->netns);
  pod_log_path(a, p, c->st.name, logp, sizeof(logp));
  lnode_spawn_req req = {exe,         argv,   env.kv, netns_path,
                         p->hostname, mounts, nm,     lnode_json_str(spec, "workingDir"),
                         logp};
  pid_t pid = 0;
  result = lnode_spawn(&req, &pid, err, sizeof(err));
  if (result)
    goto start_error;
  c->st.kind = LNODE_C_RUNNING;
  c->st.pid = pid;
  c->st.started_at = time(NULL);
  c->st.waiting_reason[0] = '\0';
  c->killed = 0;
  LOG_INFO("pod %s/%s container %s: started %s (pid %ld)", p->ns, p->name, c->st.name, exe,
           (long)pid);
  goto out;
start_error:
  /* As the kubelet reports a failed start: terminated, exit 128, StartError. */
  LOG_WARN("pod %s/%s container %s: %s", p->ns, p->name, c->st.name, err);
  set_terminated(c, 128, 0, "StartError", err, 0, time(NULL));
  c->st.pid = 0;
out:
  if (srcs)
    for (size_t k = 0; k < nvm + 1; k++)
      free(srcs[k]);
  free(srcs);
  free(mounts);
  free(exe);
  lnode_cmd_argv_free(argv);
  lnode_env_free(&env);
}

/* After a container ended: restart it (Always, or OnFailure on failure) with
 * back-off, or leave it terminated. */
static void after_exit(pod *p, container *c) {
  const char *rp = restart_policy(p);
  int restart = !strcmp(rp, "Always") || (!strcmp(rp, "OnFailure") && c->st.term.exit_code);
  if (!restart || p->terminating)
    return;
  c->st.has_last = 1;
  c->st.last = c->st.term;
  c->st.restart_count++;
  c->backoff_s = c->backoff_s ? c->backoff_s * 2 : 1;
  if (c->backoff_s > BACKOFF_MAX_S)
    c->backoff_s = BACKOFF_MAX_S;
  set_waiting(c, "CrashLoopBackOff", "back-off restarting failed container");
  c->start_at_ms = lnode_mono_ms() + (int64_t)c->backoff_s * 1000;
}

/* Reaps exited children: containers get their terminated state; orphans
 * re-parented to us (we are a subreaper) are simply collected. */
static void reap(agent *a) {
  for (;;) {
    int ws = 0;
    pid_t pid = waitpid(-1, &ws, WNOHANG);
    if (pid <= 0)
      break;
    for (pod *p = a->pods; p; p = p->next) {
      for (size_t i = 0; i < p->nc; i++) {
        container *c = &p->c[i];
        if (c->st.kind != LNODE_C_RUNNING || c->st.pid != pid)
          continue;
        int sig = 0;
        int code = lnode_exit_code(ws, &sig);
        set_terminated(c, code, sig, lnode_term_reason(code), NULL, c->st.started_at, time(NULL));
        LOG_INFO("pod %s/%s container %s: exited %d%s", p->ns, p->name, c->st.name, code,
                 sig ? " (signal)" : "");
        /* The group may still hold children of the container. */
        kill(-pid, SIGKILL);
        after_exit(p, c);
      }
    }
  }
}

static int any_running(pod *p) {
  for (size_t i = 0; i < p->nc; i++)
    if (p->c[i].st.kind == LNODE_C_RUNNING)
      return 1;
  return 0;
}

static void signal_pod(pod *p, int sig) {
  for (size_t i = 0; i < p->nc; i++) {
    container *c = &p->c[i];
    if (c->st.kind == LNODE_C_RUNNING && c->st.pid > 0) {
      kill(-c->st.pid, sig);
      if (sig == SIGKILL)
        c->killed = 1;
    }
  }
}

/* ---- status ------------------------------------------------------------------ */

static const char *pod_phase(pod *p) {
  lnode_cstatus tmp[64];
  size_t n = p->nc < 64 ? p->nc : 64;
  for (size_t i = 0; i < n; i++)
    tmp[i] = p->c[i].st;
  return lnode_status_phase(tmp, n, restart_policy(p));
}

static void post_status(agent *a, pod *p) {
  lnode_cstatus *cs = calloc(p->nc + 1, sizeof(*cs));
  char *body = NULL;
  cJSON *patch = NULL;
  kube_status st;
  if (!cs)
    return;
  if (p->status_retry_ms && lnode_mono_ms() < p->status_retry_ms)
    goto out;
  for (size_t i = 0; i < p->nc; i++)
    cs[i] = p->c[i].st;
  const char *phase = lnode_status_phase(cs, p->nc, restart_policy(p));
  lnode_status_conditions(&p->ps, cs, p->nc, phase, time(NULL));
  patch = cJSON_CreateObject();
  cJSON_AddItemToObject(patch, "status", lnode_status_json(&p->ps, cs, p->nc, phase));
  body = cJSON_PrintUnformatted(patch);
  if (!body || (p->last_sent && !strcmp(body, p->last_sent)))
    goto out;
  ctrain_err result = kube_client_patch(a->kc, &KUBE_GVR_PODS, p->ns, p->name, "status",
                                        KUBE_PATCH_MERGE, body, NULL, NULL, &st);
  if (result == CTRAIN_E_NOTFOUND) {
    p->gone = 1;
  } else if (result) {
    LOG_WARN("pod %s/%s: status update: %s (%d %s)", p->ns, p->name, ctrain_strerror(result),
             st.http_code, st.message);
    p->status_retry_ms = lnode_mono_ms() + 1000;
  } else {
    LOG_DEBUG("pod %s/%s: status %s", p->ns, p->name, phase);
    free(p->last_sent);
    p->last_sent = body;
    body = NULL;
    p->status_retry_ms = 0;
  }
out:
  free(body);
  cJSON_Delete(patch);
  free(cs);
}

/* ---- pod life cycle --------------------------------------------------------- */

static void pod_free(pod *p) {
  if (!p)
    return;
  cJSON_Delete(p->obj);
  free(p->c);
  free(p->last_sent);
  lnode_volumes_free(&p->vols);
  free(p);
}

static void copy_id(char *dst, size_t cap, const char *uid, size_t n) {
  size_t k = 0;
  for (const char *s = uid; *s && k < n && k + 1 < cap; s++)
    if (*s != '-')
      dst[k++] = *s;
  dst[k] = '\0';
}

static pod *pod_new(agent *a, cJSON *obj) {
  const char *uid = lnode_json_str(obj, "metadata.uid");
  const char *ns = lnode_json_str(obj, "metadata.namespace");
  const char *name = lnode_json_str(obj, "metadata.name");
  const cJSON *cs = lnode_json_at(obj, "spec.containers");
  pod *p = NULL;
  if (!uid || !ns || !name)
    return NULL;
  p = calloc(1, sizeof(*p));
  if (!p)
    return NULL;
  p->nc = (size_t)cJSON_GetArraySize(cs);
  p->c = calloc(p->nc + 1, sizeof(*p->c));
  if (!p->c) {
    free(p);
    return NULL;
  }
  snprintf(p->uid, sizeof(p->uid), "%s", uid);
  snprintf(p->ns, sizeof(p->ns), "%s", ns);
  snprintf(p->name, sizeof(p->name), "%s", name);
  const char *h = lnode_json_str(obj, "spec.hostname");
  const char *sd = lnode_json_str(obj, "spec.subdomain");
  snprintf(p->hostname, sizeof(p->hostname), "%.63s", h && *h ? h : name);
  snprintf(p->subdomain, sizeof(p->subdomain), "%s", sd ? sd : "");
  snprintf(p->dir, sizeof(p->dir), "%s/pods/%s", a->o->state_dir, uid);
  char id[16];
  copy_id(id, sizeof(id), uid, 12);
  snprintf(p->netns, sizeof(p->netns), "lnp-%.12s", id);
  copy_id(id, sizeof(id), uid, 11);
  snprintf(p->veth, sizeof(p->veth), "lnv%.11s", id);
  snprintf(p->ps.host_ip, sizeof(p->ps.host_ip), "%s", a->node_ip);
  for (int i = 0; i < LNODE_COND_N; i++)
    p->ps.conds[i].status = -1;
  for (size_t i = 0; i < p->nc; i++) {
    const cJSON *c = cJSON_GetArrayItem(cs, (int)i);
    snprintf(p->c[i].st.name, sizeof(p->c[i].st.name), "%s",
             lnode_json_str(c, "name") ? lnode_json_str(c, "name") : "");
    snprintf(p->c[i].st.image, sizeof(p->c[i].st.image), "%s",
             lnode_json_str(c, "image") ? lnode_json_str(c, "image") : "");
    set_waiting(&p->c[i], "ContainerCreating", NULL);
  }
  /* A pod the API says already ran here lost its processes with the
   * previous agent: report them as the kubelet does. */
  const cJSON *prev;
  cJSON_ArrayForEach(prev, lnode_json_at(obj, "status.containerStatuses")) {
    const char *cn = lnode_json_str(prev, "name");
    for (size_t i = 0; cn && i < p->nc; i++) {
      container *c = &p->c[i];
      if (strcmp(c->st.name, cn))
        continue;
      c->st.restart_count = (int)lnode_json_num(prev, "restartCount", 0);
      if (lnode_json_at(prev, "state.running")) {
        set_terminated(c, 137, 0, "ContainerStatusUnknown",
                       "The container could not be located when the node agent restarted", 0,
                       time(NULL));
        after_exit(p, c);
      }
    }
  }
  const char *phase = lnode_json_str(obj, "status.phase");
  if (phase && (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")))
    p->state = POD_DONE;
  p->obj = obj;
  return p;
}

static pod *pod_find(agent *a, const char *uid) {
  for (pod *p = a->pods; p; p = p->next)
    if (!strcmp(p->uid, uid))
      return p;
  return NULL;
}

static void apply_event(agent *a, ev *e) {
  if (e->type == EV_SYNC) {
    for (pod *p = a->pods; p; p = p->next) {
      int found = 0;
      const cJSON *it;
      cJSON_ArrayForEach(it, e->obj) {
        const char *uid = lnode_json_str(it, "metadata.uid");
        if (uid && !strcmp(uid, p->uid))
          found = 1;
      }
      if (!found)
        p->gone = 1;
    }
    while (cJSON_GetArraySize(e->obj) > 0) {
      ev sub = {EV_UPSERT, cJSON_DetachItemFromArray(e->obj, 0), NULL};
      apply_event(a, &sub);
    }
    return;
  }
  const char *uid = lnode_json_str(e->obj, "metadata.uid");
  if (!uid)
    return;
  pod *p = pod_find(a, uid);
  if (e->type == EV_DELETE) {
    if (p)
      p->gone = 1;
    return;
  }
  if (p) {
    cJSON_Delete(p->obj);
    p->obj = e->obj;
    e->obj = NULL;
    return;
  }
  p = pod_new(a, e->obj);
  if (!p) {
    LOG_WARN("ignoring a pod without uid/namespace/name");
    return;
  }
  e->obj = NULL;
  p->next = a->pods;
  a->pods = p;
  LOG_INFO("pod %s/%s (uid %s) bound to this node", p->ns, p->name, p->uid);
}

static void pod_cleanup_files(agent *a, pod *p) {
  char err[256];
  (void)a;
  if (lnode_rm_rf(p->dir, err, sizeof(err)))
    LOG_WARN("pod %s/%s: remove %s: %s", p->ns, p->name, p->dir, err);
}

/* Deletion: SIGTERM, the grace period, SIGKILL; then the sandbox goes and
 * the object is deleted for good (gracePeriodSeconds=0, uid precondition). */
static void pod_terminate(agent *a, pod *p) {
  int64_t now = lnode_mono_ms();
  if (!p->terminating) {
    long grace =
        (long)lnode_json_num(p->obj, "metadata.deletionGracePeriodSeconds",
                             lnode_json_num(p->obj, "spec.terminationGracePeriodSeconds", 30));
    if (p->gone)
      grace = 0;
    p->terminating = 1;
    p->kill_deadline_ms = now + grace * 1000;
    LOG_INFO("pod %s/%s: %s; SIGTERM, grace %lds", p->ns, p->name,
             p->gone ? "removed from the API" : "deleting", grace);
    signal_pod(p, SIGTERM);
    for (size_t i = 0; i < p->nc; i++)
      if (p->c[i].st.kind == LNODE_C_WAITING && !p->c[i].st.has_last)
        p->c[i].st.waiting_reason[0] = '\0';
  }
  if (any_running(p) && now >= p->kill_deadline_ms) {
    int need = 0;
    for (size_t i = 0; i < p->nc; i++)
      if (p->c[i].st.kind == LNODE_C_RUNNING && !p->c[i].killed)
        need = 1;
    if (need) {
      LOG_INFO("pod %s/%s: grace period over; SIGKILL", p->ns, p->name);
      signal_pod(p, SIGKILL);
    }
  }
  if (any_running(p))
    return;
  sandbox_down(a, p);
  if (!p->gone) {
    post_status(a, p);
    kube_status st;
    kube_delete_opts d = {.grace_period_seconds = 0, .precondition_uid = p->uid};
    ctrain_err result = kube_client_delete(a->kc, &KUBE_GVR_PODS, p->ns, p->name, &d, NULL, &st);
    if (result && result != CTRAIN_E_NOTFOUND && result != CTRAIN_E_CONFLICT) {
      LOG_WARN("pod %s/%s: delete: %s (%d %s); retrying", p->ns, p->name, ctrain_strerror(result),
               st.http_code, st.message);
      return;
    }
    LOG_INFO("pod %s/%s: deleted", p->ns, p->name);
  }
  pod_cleanup_files(a, p);
  p->state = POD_FINISHED;
}

static void pod_sync(agent *a, pod *p) {
  int64_t now = lnode_mono_ms();
  char err[512] = "";
  if (p->state == POD_FINISHED)
    return;
  if (p->gone || lnode_json_at(p->obj, "metadata.deletionTimestamp")) {
    pod_terminate(a, p);
    return;
  }
  if (p->state == POD_DONE)
    return;
  if (p->state == POD_NEW) {
    if (now < p->retry_ms)
      return;
    if (!p->ps.start_time)
      p->ps.start_time = time(NULL);
    if (sandbox_up(a, p, err, sizeof(err))) {
      LOG_WARN("pod %s/%s: sandbox: %s", p->ns, p->name, err);
      for (size_t i = 0; i < p->nc; i++)
        if (p->c[i].st.kind == LNODE_C_WAITING)
          set_waiting(&p->c[i], "ContainerCreating", err);
      p->retry_ms = now + RETRY_MS;
      post_status(a, p);
      return;
    }
    p->state = POD_RUNNING;
  }
  /* Refresh projected service-account tokens at 80% of their life. */
  if (p->vols.token_refresh_at && time(NULL) >= p->vols.token_refresh_at) {
    lnode_env_ctx ectx;
    lnode_volumes tmp = {0};
    env_ctx(a, p, &ectx);
    lnode_volume_ctx vctx = {a->kc, a->o->state_dir, p->dir, &ectx};
    if (lnode_volumes_prepare(&vctx, 1, &tmp, err, sizeof(err))) {
      LOG_WARN("pod %s/%s: token refresh: %s", p->ns, p->name, err);
      p->vols.token_refresh_at = time(NULL) + 10;
    } else {
      p->vols.token_refresh_at = tmp.token_refresh_at;
    }
    lnode_volumes_free(&tmp);
  }
  for (size_t i = 0; i < p->nc; i++) {
    container *c = &p->c[i];
    if (c->st.kind == LNODE_C_WAITING && now >= c->start_at_ms)
      start_container(a, p, i);
    if (c->st.kind == LNODE_C_TERMINATED && c->st.term.started_at == 0 && !c->st.has_last &&
        strcmp(restart_policy(p), "Never"))
      after_exit(p, c); /* StartError of a restartable container: back-off */
  }
  const char *phase = pod_phase(p);
  if (!strcmp(phase, "Succeeded") || !strcmp(phase, "Failed")) {
    post_status(a, p);
    if (p->last_sent) {
      LOG_INFO("pod %s/%s: %s", p->ns, p->name, phase);
      sandbox_down(a, p);
      p->state = POD_DONE;
    }
    return;
  }
  post_status(a, p);
}

/* Removes sandboxes a previous run left behind (it crashed or was killed). */
static void cleanup_stale(agent *a) {
  char path[1200];
  snprintf(path, sizeof(path), "%s/pods", a->o->state_dir);
  DIR *d = opendir(path);
  if (!d)
    return;
  struct dirent *de;
  while ((de = readdir(d))) {
    char *rec = NULL;
    char netns[64] = "", veth[64] = "";
    if (de->d_name[0] == '.')
      continue;
    snprintf(path, sizeof(path), "%s/pods/%s/sandbox", a->o->state_dir, de->d_name);
    if (!ctrain_read_file(path, 4096, &rec, NULL, NULL, 0) &&
        sscanf(rec, "%63s %63s", netns, veth) == 2) {
      pod tmp;
      memset(&tmp, 0, sizeof(tmp));
      snprintf(tmp.netns, sizeof(tmp.netns), "%.31s", netns);
      kill_netns_procs(&tmp);
      lnode_net_pod_down(a->ip_bin, netns, veth);
      LOG_INFO("removed stale sandbox %s of a previous run", netns);
    }
    free(rec);
    snprintf(path, sizeof(path), "%s/pods/%s", a->o->state_dir, de->d_name);
    lnode_rm_rf(path, NULL, 0);
  }
  closedir(d);
}

/* ---- preflight and run -------------------------------------------------------- */

static int has_cap(const char *status, int cap) {
  const char *p = strstr(status, "CapEff:");
  if (!p)
    return 0;
  unsigned long long v = strtoull(p + 7, NULL, 16);
  return (int)((v >> cap) & 1ull);
}

ctrain_err lnode_agent_preflight(char *err, size_t errlen) {
  char *st = NULL, *ip = NULL;
  ctrain_err result = ctrain_read_file("/proc/self/status", 1 << 20, &st, NULL, err, errlen);
  if (result)
    return result;
  int sys_admin = has_cap(st, 21), net_admin = has_cap(st, 12);
  free(st);
  if (!sys_admin || !net_admin)
    return ctrain_errf(CTRAIN_E_AUTH, err, errlen,
                       "needs %s%s%s to create network and mount namespaces (run as root%s)",
                       sys_admin ? "" : "CAP_SYS_ADMIN", !sys_admin && !net_admin ? " and " : "",
                       net_admin ? "" : "CAP_NET_ADMIN", geteuid() ? "; euid is not 0" : "");
  result = lnode_net_find_ip(&ip);
  free(ip);
  if (result)
    return ctrain_errf(CTRAIN_E_NOTFOUND, err, errlen,
                       "needs `ip` from iproute2 on PATH (apt-get install iproute2)");
  return CTRAIN_OK;
}

static char *join_dirs(const lnode_options *o, const char *tail) {
  size_t n = (tail ? strlen(tail) : 0) + 1;
  for (int i = 0; i < o->n_bin_dirs; i++)
    n += strlen(o->bin_dirs[i]) + 1;
  char *s = calloc(n + 1, 1);
  if (!s)
    return NULL;
  size_t k = 0;
  for (int i = 0; i < o->n_bin_dirs; i++)
    k += (size_t)snprintf(s + k, n + 1 - k, "%s%s", k ? ":" : "", o->bin_dirs[i]);
  if (tail && *tail)
    snprintf(s + k, n + 1 - k, "%s%s", k ? ":" : "", tail);
  return s;
}

static void shutdown_pods(agent *a) {
  int64_t deadline = lnode_mono_ms() + (int64_t)a->o->shutdown_grace_s * 1000;
  int killed = 0;
  for (pod *p = a->pods; p; p = p->next) {
    if (any_running(p)) {
      p->terminating = 1;
      signal_pod(p, SIGTERM);
    }
  }
  for (;;) {
    reap(a);
    int running = 0;
    for (pod *p = a->pods; p; p = p->next)
      running |= any_running(p);
    if (!running)
      break;
    if (!killed && lnode_mono_ms() >= deadline) {
      for (pod *p = a->pods; p; p = p->next)
        signal_pod(p, SIGKILL);
      killed = 1;
    }
    usleep(50000);
  }
  for (pod *p = a->pods; p; p = p->next) {
    if (p->state == POD_RUNNING || p->state == POD_NEW) {
      int deleting = p->gone || lnode_json_at(p->obj, "metadata.deletionTimestamp") != NULL;
      if (!deleting) {
        snprintf(p->ps.reason, sizeof(p->ps.reason), "Terminated");
        snprintf(p->ps.message, sizeof(p->ps.message),
                 "Pod was terminated in response to imminent node shutdown.");
        p->status_retry_ms = 0;
        post_status(a, p);
      }
    }
    sandbox_down(a, p);
    pod_cleanup_files(a, p);
  }
}

ctrain_err lnode_agent_run(const lnode_options *o, volatile int *stop, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  agent A;
  agent *a = &A;
  pthread_t watch_thr, hb_thr;
  int watch_started = 0, hb_started = 0;
  char path[1200], sel[1024];
  memset(a, 0, sizeof(*a));
  a->o = o;
  a->stop = stop;
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);

  if (o->node_name) {
    snprintf(a->node_name, sizeof(a->node_name), "%s", o->node_name);
  } else {
    gethostname(a->node_name, sizeof(a->node_name) - 1);
    for (char *s = a->node_name; *s; s++)
      if (*s >= 'A' && *s <= 'Z')
        *s = (char)(*s - 'A' + 'a');
  }
  result = lnode_ipam_init(&a->ipam, o->pod_cidr, err, errlen);
  if (result)
    goto out;
  if (o->node_ip)
    snprintf(a->node_ip, sizeof(a->node_ip), "%s", o->node_ip);
  else
    lnode_ipam_gateway(&a->ipam, a->node_ip, sizeof(a->node_ip));
  result = lnode_net_find_ip(&a->ip_bin);
  if (result) {
    ctrain_errf(result, err, errlen, "`ip` (iproute2) not found");
    goto out;
  }
  const char *hp = getenv("PATH");
  a->host_path = strdup(hp ? hp : "/usr/local/bin:/usr/bin:/bin");
  a->bin_dirs = join_dirs(o, NULL);
  a->container_path = join_dirs(o, a->host_path);
  if (!a->host_path || !a->bin_dirs || !a->container_path) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  /* A kubeconfig that cannot be used fails before anything is set up. */
  result = kube_config_load_default(o->kubeconfig, o->context, &a->cfg, err, errlen);
  if (result)
    goto out;
  const char *sub[] = {"logs", "pods", "pvc"};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof(path), "%s/%s", o->state_dir, sub[i]);
    result = lnode_mkdir_p(path, 0755, err, errlen);
    if (result)
      goto out;
  }
  /* Orphaned grandchildren of containers come to us, not to init. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  cleanup_stale(a);
  result = lnode_net_bridge_up(a->ip_bin, o->bridge, &a->ipam, &a->bridge_created, err, errlen);
  if (result)
    goto out;
  lnode_resources_detect(&a->res, o->state_dir, o->max_pods, o->gpus);

  kube_client_opts copts = {.user_agent = "ctrain-localnode/" CTRAIN_VERSION};
  result = kube_client_new(a->cfg, &copts, &a->kc, err, errlen);
  if (result)
    goto out;
  result = node_register(a, err, errlen);
  if (result)
    goto out;
  lease_renew(a);

  snprintf(sel, sizeof(sel), "spec.nodeName=%s", a->node_name);
  kube_watch_opts wo = {.gvr = &KUBE_GVR_PODS,
                        .field_selector = sel,
                        .timeout_seconds = 300,
                        .relist = relist,
                        .relist_ud = a};
  result = kube_watch_new(a->kc, &wo, &a->watch);
  if (result) {
    ctrain_errf(result, err, errlen, "pod watch: %s", ctrain_strerror(result));
    goto out;
  }
  if (pthread_create(&watch_thr, NULL, watch_main, a) == 0)
    watch_started = 1;
  if (pthread_create(&hb_thr, NULL, heartbeat_main, a) == 0)
    hb_started = 1;
  if (!watch_started || !hb_started) {
    result = ctrain_errf(CTRAIN_E_NOMEM, err, errlen, "cannot start threads");
    goto out;
  }
  LOG_INFO("node %s running pods (state %s, bridge %s, pod CIDR %s)", a->node_name, o->state_dir,
           o->bridge, o->pod_cidr);

  while (!*stop) {
    ev *q;
    pthread_mutex_lock(&a->mu);
    if (!a->q_head) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 200 * 1000000L;
      if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&a->cv, &a->mu, &ts);
    }
    q = a->q_head;
    a->q_head = a->q_tail = NULL;
    pthread_mutex_unlock(&a->mu);
    while (q) {
      ev *next = q->next;
      apply_event(a, q);
      cJSON_Delete(q->obj);
      free(q);
      q = next;
    }
    reap(a);
    for (pod *p = a->pods; p; p = p->next)
      pod_sync(a, p);
    reap(a);
    if (a->hosts_dirty) {
      a->hosts_dirty = 0;
      for (pod *p = a->pods; p; p = p->next)
        if (p->sandbox)
          write_hosts(a, p);
    }
    if (a->n_mp) {
      int busy = 0;
      for (pod *p = a->pods; p; p = p->next)
        busy |= p->sandbox || any_running(p);
      if (!busy)
        mountpoints_gc(a);
    }
    /* Forget pods that are gone and have nothing left running. */
    for (pod **pp = &a->pods; *pp;) {
      pod *p = *pp;
      if (p->gone && (p->state == POD_FINISHED ||
                      (!any_running(p) && !p->sandbox && p->state != POD_RUNNING))) {
        if (p->state != POD_FINISHED)
          pod_cleanup_files(a, p);
        *pp = p->next;
        pod_free(p);
      } else {
        pp = &p->next;
      }
    }
  }
  LOG_INFO("stopping: terminating pods");
out:
  a->threads_stop = 1;
  if (a->watch)
    kube_watch_cancel(a->watch);
  if (watch_started)
    pthread_join(watch_thr, NULL);
  if (hb_started)
    pthread_join(hb_thr, NULL);
  if (a->kc) {
    shutdown_pods(a);
    if (a->node_uid[0])
      node_patch_status(a, 0, "KubeletNotReady", "ctrain-localnode stopped");
  }
  mountpoints_gc(a);
  if (a->bridge_created) {
    char e2[256];
    if (lnode_net_bridge_down(a->ip_bin, o->bridge, e2, sizeof(e2)))
      LOG_WARN("%s", e2);
  }
  while (a->pods) {
    pod *p = a->pods;
    a->pods = p->next;
    pod_free(p);
  }
  for (ev *q = a->q_head; q;) {
    ev *n = q->next;
    cJSON_Delete(q->obj);
    free(q);
    q = n;
  }
  kube_watch_free(a->watch);
  kube_client_free(a->kc);
  kube_config_free(a->cfg);
  lnode_ipam_free(&a->ipam);
  free(a->ip_bin);
  free(a->bin_dirs);
  free(a->container_path);
  free(a->host_path);
  pthread_mutex_destroy(&a->mu);
  pthread_cond_destroy(&a->cv);
  return result;
}
