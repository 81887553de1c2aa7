/* cpubudget.c - the CPUs a worker may use; see cpubudget.h. */
#include "worker/cpubudget.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/log.h"
#include "worker/model/kernels.h"

/* The first line of path into buf; 0 when it cannot be read. */
static int first_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  int ok = fgets(buf, (int)len, f) != NULL;
  fclose(f);
  return ok;
}

/* CPUs of a v2 cpu.max ("max 100000" or "150000 100000"): > 0 a limit,
 * 0 unlimited, -1 unreadable. */
static double v2_quota(const char *dir) {
  char path[1024], line[128], q[32];
  long period = 0;
  snprintf(path, sizeof(path), "%s/cpu.max", dir);
  if (!first_line(path, line, sizeof(line)) || sscanf(line, "%31s %ld", q, &period) != 2 ||
      period <= 0)
    return -1;
  if (!strcmp(q, "max"))
    return 0;
  char *end = NULL;
  long quota = strtol(q, &end, 10);
  return end != q && *end == '\0' && quota > 0 ? (double)quota / (double)period : -1;
}

/* CPUs of v1's cpu.cfs_quota_us / cpu.cfs_period_us (quota -1: unlimited). */
static double v1_quota(const char *dir) {
  char path[1024], line[64];
  long quota = 0, period = 0;
  snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
  if (!first_line(path, line, sizeof(line)) || sscanf(line, "%ld", &quota) != 1)
    return -1;
  if (quota < 0)
    return 0;
  snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
  if (!first_line(path, line, sizeof(line)) || sscanf(line, "%ld", &period) != 1 || period <= 0 ||
      quota == 0)
    return -1;
  return (double)quota / (double)period;
}

/* Folds one cgroup directory's limit into out (the smallest wins). */
static void consider(cpubudget *out, const char *dir, int v2) {
  double q = v2 ? v2_quota(dir) : v1_quota(dir);
  if (q > 0 && (out->quota == 0 || q < out->quota)) {
    out->quota = q;
    snprintf(out->why, sizeof(out->why), "cgroup %s quota %.2f CPUs in %.120s", v2 ? "v2" : "v1", q,
             dir);
  }
}

/* Is ctl in the comma-separated controller list? */
static int has_controller(const char *list, const char *ctl) {
  size_t n = strlen(ctl);
  for (const char *p = list; *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && !strncmp(p, ctl, n))
      return 1;
    p += len + (comma != NULL);
  }
  return 0;
}

void cpubudget_read(const char *proc_cgroup, const char *cgroup_root, int affinity,
                    cpubudget *out) {
  memset(out, 0, sizeof(*out));
  out->affinity = affinity > 0 ? affinity : 1;
  snprintf(out->why, sizeof(out->why), "no cgroup CPU quota");
  FILE *f = fopen(proc_cgroup, "r");
  char line[1024], dir[1100];
  while (f && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    /* hierarchy-id:controllers:path */
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2)
      continue;
    *c1 = *c2 = '\0';
    const char *ctls = c1 + 1, *path = c2 + 1;
    if (!strcmp(line, "0") && !*ctls) { /* v2 */
      snprintf(dir, sizeof(dir), "%s%s", cgroup_root, path);
      consider(out, dir, 1);
      consider(out, cgroup_root, 1);
    } else if (has_controller(ctls, "cpu")) { /* v1: mounted as cpu or cpu,cpuacct */
      const char *mounts[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
      for (size_t i = 0; i < sizeof(mounts) / sizeof(mounts[0]); i++) {
        snprintf(dir, sizeof(dir), "%s/%s%s", cgroup_root, mounts[i], path);
        consider(out, dir, 0);
        snprintf(dir, sizeof(dir), "%s/%s", cgroup_root, mounts[i]);
        consider(out, dir, 0);
      }
    }
  }
  if (f)
    fclose(f);
  out->cpus = out->affinity;
  if (out->quota > 0) {
    int q = (int)ceil(out->quota - 1e-9);
    out->cpus = q < 1 ? 1 : q < out->cpus ? q : out->cpus;
  }
}

void cpubudget_self(cpubudget *out) {
  int affinity = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    affinity = CPU_COUNT(&set);
  if (affinity <= 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    affinity = n > 0 ? (int)n : 1;
  }
  cpubudget_read("/proc/self/cgroup", "/sys/fs/cgroup", affinity, out);
}

int cpubudget_configure_blas(int replicas) {
  cpubudget b;
  cpubudget_self(&b);
  if (replicas > 1) {
    LOG_INFO("CPU: %d usable (affinity %d, %s); %d replicas on threads of their own, one OpenBLAS "
             "thread each",
             b.cpus, b.affinity, b.why, replicas);
    return 1;
  }
  const char *vars[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) {
      int n = kern_cpu_blas_threads(0);
      LOG_INFO("CPU: %d usable (affinity %d, %s); OpenBLAS threads %d, as %s=%s says", b.cpus,
               b.affinity, b.why, n, vars[i], v);
      return n;
    }
  }
  int n = kern_cpu_blas_threads(b.cpus);
  LOG_INFO("CPU: %d usable (affinity %d, %s); OpenBLAS threads %d", b.cpus, b.affinity, b.why, n);
  return n;
}

/* See cpubudget.h. */
void cpubudget_blas_kernels(char **argv) {
  const char *better = NULL, *core = kern_cpu_blas_core(&better);
  const char *given = getenv("OPENBLAS_CORETYPE");
  if (given && *given) {
    LOG_INFO("OpenBLAS: %s kernels (OPENBLAS_CORETYPE=%s)", core, given);
    return;
  }
  if (!better) {
    LOG_INFO("OpenBLAS: %s kernels", core);
    return;
  }
  LOG_INFO("OpenBLAS took this CPU for %s, whose kernels use narrower vectors than it runs; "
           "starting again with OPENBLAS_CORETYPE=%s",
           core, better);
  if (setenv("OPENBLAS_CORETYPE", better, 1) == 0) {
    execv("/proc/self/exe", argv);
    LOG_WARN("exec /proc/self/exe: %s; going on with %s kernels", strerror(errno), core);
    unsetenv("OPENBLAS_CORETYPE");
  }
}
