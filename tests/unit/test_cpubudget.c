/* test_cpubudget.c - the CPUs a worker may use: its affinity capped by the
 * cgroup quota a container's resources.limits.cpu sets, read from cgroup v1
 * and v2 trees laid out in scratch directories as the kernel and a container
 * runtime lay them out. */
#include "test.h"
#include "test_fs.h"

#include "worker/cpubudget.h"

/* root/rel, with parents, holding text. */
static void put(const char *root, const char *rel, const char *text) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
    *p = '\0';
    mkdir(path, 0755);
    *p = '/';
  }
  fs_put_file(path, text);
}

static cpubudget read_in(const char *root, const char *proc_cgroup, int affinity) {
  char pc[1024], cg[1024];
  snprintf(pc, sizeof(pc), "%s/proc-cgroup", root);
  snprintf(cg, sizeof(cg), "%s/cg", root);
  fs_put_file(pc, proc_cgroup);
  cpubudget b;
  cpubudget_read(pc, cg, affinity, &b);
  printf("# %d CPUs (affinity %d, quota %.2f): %s\n", b.cpus, b.affinity, b.quota, b.why);
  return b;
}

/* A host process (cgroup v1, as this machine): no quota, the affinity. */
TEST(v1_unlimited_is_the_affinity) {
  char d[256];
  fs_make_dir(d, sizeof(d), "cpubudget");
  put(d, "cg/cpu/cpu.cfs_quota_us", "-1\n");
  put(d, "cg/cpu/cpu.cfs_period_us", "100000\n");
  cpubudget b = read_in(d, "2:cpuacct:/\n1:cpu:/\n0::/\n", 16);
  ASSERT_EQ(b.cpus, 16);
  ASSERT_EQ(b.quota, 0);
  fs_rm_rf(d);
}

/* A v1 pod: /proc/self/cgroup names the host's path, which does not exist
 * inside the container; its own cgroup is mounted at the hierarchy's root,
 * as cpu,cpuacct. limits.cpu 1500m: 2 CPUs of 16; 250m: 1. */
TEST(v1_container_quota_rounds_up) {
  char d[256];
  fs_make_dir(d, sizeof(d), "cpubudget");
  put(d, "cg/cpu,cpuacct/cpu.cfs_quota_us", "150000\n");
  put(d, "cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  const char *pc = "3:cpu,cpuacct:/kubepods/burstable/pod1/abc\n0::/\n";
  cpubudget b = read_in(d, pc, 16);
  ASSERT_EQ(b.cpus, 2);
  ASSERT_NEAR(b.quota, 1.5, 1e-9);
  ASSERT_STR_CONTAINS(b.why, "v1");
  put(d, "cg/cpu,cpuacct/cpu.cfs_quota_us", "25000\n");
  ASSERT_EQ(read_in(d, pc, 16).cpus, 1);
  /* The affinity caps a larger quota. */
  put(d, "cg/cpu,cpuacct/cpu.cfs_quota_us", "800000\n");
  ASSERT_EQ(read_in(d, pc, 2).cpus, 2);
  fs_rm_rf(d);
}

/* v2: the process's own cgroup and the root; the smallest limit wins. */
TEST(v2_cpu_max) {
  char d[256];
  fs_make_dir(d, sizeof(d), "cpubudget");
  put(d, "cg/cpu.max", "max 100000\n");
  put(d, "cg/kubepods/pod2/ctr/cpu.max", "300000 100000\n");
  cpubudget b = read_in(d, "0::/kubepods/pod2/ctr\n", 8);
  ASSERT_EQ(b.cpus, 3);
  ASSERT_STR_CONTAINS(b.why, "v2");
  put(d, "cg/cpu.max", "100000 100000\n");
  ASSERT_EQ(read_in(d, "0::/kubepods/pod2/ctr\n", 8).cpus, 1);
  put(d, "cg/cpu.max", "max 100000\n");
  put(d, "cg/kubepods/pod2/ctr/cpu.max", "max 100000\n");
  ASSERT_EQ(read_in(d, "0::/kubepods/pod2/ctr\n", 8).cpus, 8);
  fs_rm_rf(d);
}

/* What cannot be read or parsed limits nothing: the affinity stands. */
TEST(unreadable_or_garbage_is_unlimited) {
  char d[256];
  fs_make_dir(d, sizeof(d), "cpubudget");
  ASSERT_EQ(read_in(d, "0::/\n1:cpu:/\n", 4).cpus, 4);
  put(d, "cg/cpu.max", "lots 100000\n");
  put(d, "cg/cpu/cpu.cfs_quota_us", "0\n");
  put(d, "cg/cpu/cpu.cfs_period_us", "0\n");
  ASSERT_EQ(read_in(d, "0::/\n1:cpu:/\nnot a line\n::\n", 4).cpus, 4);
  cpubudget b;
  cpubudget_read("/nonexistent/cgroup", "/nonexistent", 0, &b);
  ASSERT_EQ(b.cpus, 1);
  fs_rm_rf(d);
}

/* This process: at least one CPU, never more than its affinity. */
TEST(self_is_within_the_affinity) {
  cpubudget b;
  cpubudget_self(&b);
  printf("# this process: %d CPUs (affinity %d): %s\n", b.cpus, b.affinity, b.why);
  ASSERT_GE(b.cpus, 1);
  ASSERT_LE(b.cpus, b.affinity);
}

TEST_MAIN(T(v1_unlimited_is_the_affinity), T(v1_container_quota_rounds_up), T(v2_cpu_max),
          T(unreadable_or_garbage_is_unlimited), T(self_is_within_the_affinity))
