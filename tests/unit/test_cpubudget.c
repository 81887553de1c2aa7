/* test_cpubudget.c - the CPUs a worker may use: its affinity capped by the
 * cgroup quota a container's resources.limits.cpu sets, read from cgroup v1
 * and v2 trees laid out in scratch directories as the kernel and a container
 * runtime lay them out. */
#include "test.h"
#include "test_fs.h"

#include "worker/cpubudget.h"
#include "worker/model/kernels.h"

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

/* One layout: the files (relative path, content; NULL ends), the process's
 * /proc/<pid>/cgroup, its affinity, and the budget and quota expected. */
typedef struct {
  const char *what;
  const char *files[6][2];
  const char *proc_cgroup;
  int affinity, want_cpus;
  double want_quota;
  const char *want_why; /* in the log line */
} layout;

static const layout layouts[] = {
    {"a host process (cgroup v1, as this machine): no quota, the affinity",
     {{"cg/cpu/cpu.cfs_quota_us", "-1\n"}, {"cg/cpu/cpu.cfs_period_us", "100000\n"}},
     "2:cpuacct:/\n1:cpu:/\n0::/\n",
     16,
     16,
     0,
     "no cgroup CPU quota"},
    /* A v1 pod: /proc/self/cgroup names the host's path, which does not
     * exist inside the container; its own cgroup is mounted at the
     * hierarchy's root, as cpu,cpuacct. */
    {"v1 pod, limits.cpu 1500m: 2 of 16",
     {{"cg/cpu,cpuacct/cpu.cfs_quota_us", "150000\n"},
      {"cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n"}},
     "3:cpu,cpuacct:/kubepods/burstable/pod1/abc\n0::/\n",
     16,
     2,
     1.5,
     "cgroup v1"},
    {"v1 pod, limits.cpu 250m: 1",
     {{"cg/cpu,cpuacct/cpu.cfs_quota_us", "25000\n"},
      {"cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n"}},
     "3:cpu,cpuacct:/kubepods/burstable/pod1/abc\n0::/\n",
     16,
     1,
     0.25,
     "cgroup v1"},
    {"v1 pod, limits.cpu 8 on 2 CPUs of affinity: 2",
     {{"cg/cpu,cpuacct/cpu.cfs_quota_us", "800000\n"},
      {"cg/cpu,cpuacct/cpu.cfs_period_us", "100000\n"}},
     "3:cpu,cpuacct:/kubepods/burstable/pod1/abc\n0::/\n",
     2,
     2,
     8,
     "cgroup v1"},
    /* v2: the process's own cgroup and the root; the smallest limit wins. */
    {"v2, 3 CPUs at the process's cgroup",
     {{"cg/cpu.max", "max 100000\n"}, {"cg/kubepods/pod2/ctr/cpu.max", "300000 100000\n"}},
     "0::/kubepods/pod2/ctr\n",
     8,
     3,
     3,
     "cgroup v2"},
    {"v2, 1 CPU at the root (a container's own cgroup namespace)",
     {{"cg/cpu.max", "100000 100000\n"}, {"cg/kubepods/pod2/ctr/cpu.max", "300000 100000\n"}},
     "0::/kubepods/pod2/ctr\n",
     8,
     1,
     1,
     "cgroup v2"},
    {"v2 unlimited",
     {{"cg/cpu.max", "max 100000\n"}, {"cg/kubepods/pod2/ctr/cpu.max", "max 100000\n"}},
     "0::/kubepods/pod2/ctr\n",
     8,
     8,
     0,
     "no cgroup CPU quota"},
    /* What cannot be read or parsed limits nothing: the affinity stands. */
    {"no files", {{NULL, NULL}}, "0::/\n1:cpu:/\n", 4, 4, 0, "no cgroup CPU quota"},
    {"garbage",
     {{"cg/cpu.max", "lots 100000\n"},
      {"cg/cpu/cpu.cfs_quota_us", "0\n"},
      {"cg/cpu/cpu.cfs_period_us", "0\n"}},
     "0::/\n1:cpu:/\nnot a line\n::\n",
     4,
     4,
     0,
     "no cgroup CPU quota"},
};

TEST(layouts_give_their_budget) {
  for (size_t i = 0; i < sizeof(layouts) / sizeof(layouts[0]); i++) {
    const layout *l = &layouts[i];
    char d[256];
    fs_make_dir(d, sizeof(d), "cpubudget");
    for (int f = 0; f < 6 && l->files[f][0]; f++)
      put(d, l->files[f][0], l->files[f][1]);
    printf("# %s\n", l->what);
    cpubudget b = read_in(d, l->proc_cgroup, l->affinity);
    ASSERT_EQ(b.cpus, l->want_cpus);
    ASSERT_NEAR(b.quota, l->want_quota, 1e-9);
    ASSERT_STR_CONTAINS(b.why, l->want_why);
    fs_rm_rf(d);
  }
  cpubudget b;
  cpubudget_read("/nonexistent/cgroup", "/nonexistent", 0, &b);
  ASSERT_EQ(b.cpus, 1);
}

/* This process: at least one CPU, never more than its affinity. */
TEST(self_is_within_the_affinity) {
  cpubudget b;
  cpubudget_self(&b);
  printf("# this process: %d CPUs (affinity %d): %s\n", b.cpus, b.affinity, b.why);
  ASSERT_GE(b.cpus, 1);
  ASSERT_LE(b.cpus, b.affinity);
}

/* OpenBLAS's kernels: the core asked for instead of OpenBLAS's pick, by the
 * widest vectors the CPU runs. Only a known core below the CPU's level is
 * replaced, by the oldest core of that level. */
TEST(blas_core_follows_the_vectors) {
  static const struct {
    const char *core;
    int level;
    const char *better; /* NULL: keep OpenBLAS's pick */
  } rows[] = {
      {"Prescott", 3, "SkylakeX"}, /* 0.3.21 on Emerald Rapids */
      {"Prescott", 2, "Haswell"},
      {"Prescott", 1, "Sandybridge"},
      {"Prescott", 0, NULL},
      {"Prescott", -1, NULL},
      {"Nehalem", 3, "SkylakeX"},
      {"Sandybridge", 2, "Haswell"},
      {"Haswell", 3, "SkylakeX"},
      {"Haswell", 2, NULL},
      {"Zen", 2, NULL},
      {"Zen", 3, "SkylakeX"},
      {"SkylakeX", 3, NULL},
      {"Cooperlake", 3, NULL},
      {"SapphireRapids", 3, NULL},
      {"SkylakeX", 2, NULL},
      {"NeoverseN1", 3, NULL}, /* not a name the rule knows */
      {"", 3, NULL},
      {NULL, 3, NULL},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    const char *got = kern_blas_core_better(rows[i].core, rows[i].level);
    printf("# %s at level %d -> %s\n", rows[i].core ? rows[i].core : "(null)", rows[i].level,
           got ? got : "(kept)");
    if (rows[i].better) {
      ASSERT(got != NULL);
      ASSERT_STR_EQ(got, rows[i].better);
    } else {
      ASSERT(got == NULL);
    }
  }
}

/* This process's OpenBLAS under the rule: what it names is a core, and what
 * the rule asks for is never below what the CPU runs. */
TEST(blas_core_of_this_cpu) {
  const char *better = NULL, *core = kern_cpu_blas_core(&better);
  int level = kern_cpu_vector_level();
  printf("# OpenBLAS: %s, CPU vector level %d, ask for %s\n", core ? core : "(null)", level,
         better ? better : "(nothing)");
  ASSERT(core != NULL && *core);
  ASSERT(level >= -1 && level <= 3);
  if (better)
    ASSERT(kern_blas_core_better(better, level) == NULL);
}

TEST_MAIN(T(layouts_give_their_budget), T(self_is_within_the_affinity),
          T(blas_core_follows_the_vectors), T(blas_core_of_this_cpu))
