/* worker/cpubudget.h - how many CPUs this process may use: the CPUs of its
 * affinity mask, capped by its cgroup's CPU quota (a container's
 * resources.limits.cpu), rounded up. The CPU backend sizes OpenBLAS's threads
 * to it, so that a worker limited to one CPU does not run two GEMM threads
 * that the kernel throttles (or that spin against another worker's). */
#ifndef CTRAIN_WORKER_CPUBUDGET_H
#define CTRAIN_WORKER_CPUBUDGET_H

#include <stddef.h>

typedef struct {
  int cpus;      /* the budget: min(affinity, ceil(quota)), at least 1 */
  int affinity;  /* CPUs in the affinity mask */
  double quota;  /* the cgroup's CPUs (quota / period), 0 when unlimited */
  char why[200]; /* where the figures came from, for the log */
} cpubudget;

/* Reads the cgroup quota of the process described by proc_cgroup (a
 * /proc/<pid>/cgroup file) under cgroup_root (where cgroupfs is mounted,
 * /sys/fs/cgroup): cgroup v2's cpu.max, or v1's cpu.cfs_quota_us and
 * cpu.cfs_period_us in the cpu controller's hierarchy, at the process's own
 * cgroup and, as inside a container whose cgroup is mounted at the root, at
 * the root; the smallest limit found wins. Files that are missing or do not
 * parse leave the quota unlimited (said in why). affinity: the CPUs to cap. */
void cpubudget_read(const char *proc_cgroup, const char *cgroup_root, int affinity, cpubudget *out);

/* This process's budget: cpubudget_read with /proc/self/cgroup,
 * /sys/fs/cgroup and sched_getaffinity. */
void cpubudget_self(cpubudget *out);

/* Sizes the CPU backend's OpenBLAS threads to this process's budget, unless
 * OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS is set (then
 * OpenBLAS's own count stands), and logs the outcome. With several local
 * replicas (cpu:R, R > 1) they step on threads of their own with one
 * OpenBLAS thread each (replicas.h): that is what it logs, next to the
 * budget. Returns the count. */
int cpubudget_configure_blas(int replicas);

/* OpenBLAS chose its kernels as it loaded (kern_cpu_blas_core). When it
 * took this CPU for an older one (OpenBLAS 0.3.21 on Intel's Emerald
 * Rapids: SSE3 kernels, 4-5x slower GEMMs), this starts the program again,
 * the same process (pid, descriptors, arguments), with OPENBLAS_CORETYPE
 * naming the kernels the CPU runs; the first thing main does, before any
 * thread or file of the program exists. A user's own OPENBLAS_CORETYPE is
 * kept (so the second start does not start again); if exec fails it logs
 * and goes on with OpenBLAS's pick. Logs which kernels run. */
void cpubudget_blas_kernels(char **argv);

#endif
