/* node.c - Node object, capacity and Lease (see ctrain/lnode_node.h). */
#include "ctrain/lnode_node.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "ctrain/lnode_util.h"

static int count_smi(void) {
  /* Only when nvidia-smi is on PATH: popen's shell would otherwise print. */
  const char *path = getenv("PATH");
  char buf[4096];
  int found = 0;
  for (const char *p = path; p && *p && !found;) {
    const char *c = strchr(p, ':');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    if (n && !lnode_fmt(buf, sizeof(buf), "%.*s/nvidia-smi", (int)n, p) && !access(buf, X_OK))
      found = 1;
    p = c ? c + 1 : p + n;
  }
  if (!found)
    return 0;
  FILE *f = popen("nvidia-smi -L 2>/dev/null", "r");
  if (!f)
    return 0;
  int n = 0;
  while (fgets(buf, sizeof(buf), f))
    if (!strncmp(buf, "GPU ", 4))
      n++;
  pclose(f);
  return n;
}

int lnode_count_gpus(const char *dev_dir) {
  DIR *d = opendir(dev_dir ? dev_dir : "/dev");
  int n = 0;
  if (d) {
    struct dirent *de;
    while ((de = readdir(d))) {
      const char *s = de->d_name;
      if (strncmp(s, "nvidia", 6) || !s[6])
        continue;
      const char *q = s + 6;
      while (*q >= '0' && *q <= '9')
        q++;
      if (!*q)
        n++;
    }
    closedir(d);
  }
  if (n == 0 && !dev_dir)
    n = count_smi();
  return n;
}

long long lnode_meminfo_total_kib(const char *meminfo) {
  const char *p = strstr(meminfo, "MemTotal:");
  if (!p)
    return -1;
  p += 9;
  char *end = NULL;
  long long v = strtoll(p, &end, 10);
  return end == p ? -1 : v;
}

void lnode_resources_detect(lnode_resources *r, const char *state_dir, int max_pods, int gpus) {
  char *mi = NULL;
  memset(r, 0, sizeof(*r));
  r->cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (r->cpus < 1)
    r->cpus = 1;
  if (!ctrain_read_file("/proc/meminfo", 1 << 20, &mi, NULL, NULL, 0)) {
    r->memory_kib = lnode_meminfo_total_kib(mi);
    free(mi);
  }
  if (r->memory_kib < 0)
    r->memory_kib = 0;
  struct statvfs sv;
  if (state_dir && !statvfs(state_dir, &sv))
    r->storage_bytes = (long long)sv.f_blocks * (long long)sv.f_frsize;
  r->pods = max_pods;
  r->gpus = gpus >= 0 ? gpus : lnode_count_gpus(NULL);
}

static cJSON *resource_list(const lnode_resources *r) {
  char buf[64];
  cJSON *o = cJSON_CreateObject();
  snprintf(buf, sizeof(buf), "%ld", r->cpus);
  cJSON_AddStringToObject(o, "cpu", buf);
  snprintf(buf, sizeof(buf), "%lldKi", r->memory_kib);
  cJSON_AddStringToObject(o, "memory", buf);
  snprintf(buf, sizeof(buf), "%d", r->pods);
  cJSON_AddStringToObject(o, "pods", buf);
  if (r->storage_bytes > 0) {
    snprintf(buf, sizeof(buf), "%lld", r->storage_bytes);
    cJSON_AddStringToObject(o, "ephemeral-storage", buf);
  }
  if (r->gpus > 0) {
    snprintf(buf, sizeof(buf), "%d", r->gpus);
    cJSON_AddStringToObject(o, "nvidia.com/gpu", buf);
  }
  return o;
}

static const char *go_arch(void) {
  static struct utsname u;
  if (uname(&u))
    return "amd64";
  if (!strcmp(u.machine, "x86_64"))
    return "amd64";
  if (!strcmp(u.machine, "aarch64"))
    return "arm64";
  return u.machine;
}

static void add_cond(cJSON *arr, const char *type, int status, const char *reason, const char *msg,
                     const char *ts) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "type", type);
  cJSON_AddStringToObject(c, "status", status ? "True" : "False");
  cJSON_AddStringToObject(c, "lastHeartbeatTime", ts);
  cJSON_AddStringToObject(c, "lastTransitionTime", ts);
  cJSON_AddStringToObject(c, "reason", reason);
  cJSON_AddStringToObject(c, "message", msg);
  cJSON_AddItemToArray(arr, c);
}

cJSON *lnode_node_status(const lnode_node_info *ni, const lnode_resources *r, time_t now) {
  char ts[32], ver[96];
  struct utsname u;
  lnode_time_rfc3339(now, ts, sizeof(ts));
  cJSON *st = cJSON_CreateObject();
  if (!st)
    return NULL;
  cJSON_AddItemToObject(st, "capacity", resource_list(r));
  cJSON_AddItemToObject(st, "allocatable", resource_list(r));
  cJSON *conds = cJSON_AddArrayToObject(st, "conditions");
  add_cond(conds, "MemoryPressure", 0, "KubeletHasSufficientMemory",
           "kubelet has sufficient memory available", ts);
  add_cond(conds, "DiskPressure", 0, "KubeletHasNoDiskPressure", "kubelet has no disk pressure",
           ts);
  add_cond(conds, "PIDPressure", 0, "KubeletHasSufficientPID",
           "kubelet has sufficient PID available", ts);
  add_cond(conds, "Ready", ni->ready, ni->ready_reason ? ni->ready_reason : "KubeletReady",
           ni->ready_message ? ni->ready_message : "ctrain-localnode is posting ready status", ts);
  cJSON *addrs = cJSON_AddArrayToObject(st, "addresses");
  cJSON *a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "type", "InternalIP");
  cJSON_AddStringToObject(a, "address", ni->internal_ip);
  cJSON_AddItemToArray(addrs, a);
  a = cJSON_CreateObject();
  cJSON_AddStringToObject(a, "type", "Hostname");
  cJSON_AddStringToObject(a, "address", ni->name);
  cJSON_AddItemToArray(addrs, a);
  cJSON *de = cJSON_AddObjectToObject(st, "daemonEndpoints");
  cJSON_AddNumberToObject(cJSON_AddObjectToObject(de, "kubeletEndpoint"), "Port", 0);
  cJSON *info = cJSON_AddObjectToObject(st, "nodeInfo");
  int have_u = !uname(&u);
  cJSON_AddStringToObject(info, "machineID", "");
  cJSON_AddStringToObject(info, "systemUUID", "");
  cJSON_AddStringToObject(info, "bootID", "");
  cJSON_AddStringToObject(info, "kernelVersion", have_u ? u.release : "");
  cJSON_AddStringToObject(info, "osImage", "ctrain-localnode");
  snprintf(ver, sizeof(ver), "localnode://%s", ni->version ? ni->version : "0");
  cJSON_AddStringToObject(info, "containerRuntimeVersion", ver);
  snprintf(ver, sizeof(ver), "v%s-ctrain-localnode", ni->version ? ni->version : "0");
  cJSON_AddStringToObject(info, "kubeletVersion", ver);
  cJSON_AddStringToObject(info, "kubeProxyVersion", "");
  cJSON_AddStringToObject(info, "operatingSystem", "linux");
  cJSON_AddStringToObject(info, "architecture", go_arch());
  return st;
}

cJSON *lnode_node_object(const lnode_node_info *ni, const lnode_resources *r, time_t now) {
  cJSON *n = cJSON_CreateObject();
  if (!n)
    return NULL;
  cJSON_AddStringToObject(n, "apiVersion", "v1");
  cJSON_AddStringToObject(n, "kind", "Node");
  cJSON *md = cJSON_AddObjectToObject(n, "metadata");
  cJSON_AddStringToObject(md, "name", ni->name);
  cJSON *labels = cJSON_AddObjectToObject(md, "labels");
  cJSON_AddStringToObject(labels, "kubernetes.io/hostname", ni->name);
  cJSON_AddStringToObject(labels, "kubernetes.io/os", "linux");
  cJSON_AddStringToObject(labels, "kubernetes.io/arch", go_arch());
  cJSON_AddStringToObject(labels, "ctrain.dev/localnode", "true");
  cJSON_AddObjectToObject(n, "spec");
  cJSON_AddItemToObject(n, "status", lnode_node_status(ni, r, now));
  return n;
}

int lnode_node_drop_notready_taints(cJSON *node) {
  cJSON *taints =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(node, "spec"), "taints");
  int removed = 0;
  for (int i = cJSON_GetArraySize(taints) - 1; i >= 0; i--) {
    const char *key = lnode_json_str(cJSON_GetArrayItem(taints, i), "key");
    if (key && (!strcmp(key, "node.kubernetes.io/not-ready") ||
                !strcmp(key, "node.kubernetes.io/unreachable"))) {
      cJSON_DeleteItemFromArray(taints, i);
      removed++;
    }
  }
  return removed;
}

cJSON *lnode_lease_object(const char *name, const char *node_uid, int duration_s,
                          const struct timespec *now) {
  char ts[40];
  lnode_time_micro(now, ts, sizeof(ts));
  cJSON *l = cJSON_CreateObject();
  if (!l)
    return NULL;
  cJSON_AddStringToObject(l, "apiVersion", "coordination.k8s.io/v1");
  cJSON_AddStringToObject(l, "kind", "Lease");
  cJSON *md = cJSON_AddObjectToObject(l, "metadata");
  cJSON_AddStringToObject(md, "name", name);
  cJSON_AddStringToObject(md, "namespace", "kube-node-lease");
  if (node_uid) {
    cJSON *refs = cJSON_AddArrayToObject(md, "ownerReferences");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "apiVersion", "v1");
    cJSON_AddStringToObject(o, "kind", "Node");
    cJSON_AddStringToObject(o, "name", name);
    cJSON_AddStringToObject(o, "uid", node_uid);
    cJSON_AddItemToArray(refs, o);
  }
  cJSON *spec = cJSON_AddObjectToObject(l, "spec");
  cJSON_AddStringToObject(spec, "holderIdentity", name);
  cJSON_AddNumberToObject(spec, "leaseDurationSeconds", duration_s);
  cJSON_AddStringToObject(spec, "renewTime", ts);
  return l;
}
