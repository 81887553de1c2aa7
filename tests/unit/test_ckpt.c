/* test_ckpt.c - backup files: round trip, every kind of damage detected,
 * newest-valid selection with fallback, pruning, a disk-full save that
 * leaves the previous backup intact (RLIMIT_FSIZE in a child), saves that
 * never follow links planted in the backup directory, and a restore that
 * skips whatever else sits under a backup's name (huge sparse junk, a FIFO,
 * a link, a directory) quickly, in bounded memory, without blocking. */
#include "test.h"
#include "test_fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "worker/checkpoint/ckpt.h"
#include "worker/checkpoint/ckpt_store.h"
#include "ctrain/clock.h"
#include "ctrain/fileio.h"
#include "ctrain/log.h"

#define NP 1000

static float g_params[NP], g_state[2 * NP];
static uint64_t g_ranks[2 * CKPT_RANK_WORDS];

static ckpt_state sample(uint64_t gstep) {
  ckpt_state s;
  memset(&s, 0, sizeof(s));
  for (int i = 0; i < CKPT_HASH_BYTES; i++)
    s.config_hash[i] = (uint8_t)i;
  s.global_step = gstep;
  s.epoch = 3;
  s.step = 17;
  s.data_seed = 42;
  s.data_position = 17 * 32;
  s.world = 2;
  s.replicas = 1;
  s.optim_kind = 1;
  s.optim_slots = 2;
  s.optim_iterations = gstep;
  s.n_params = NP;
  for (int i = 0; i < NP; i++) {
    g_params[i] = (float)i * 0.25f + (float)gstep;
    g_state[i] = -(float)i;
    g_state[NP + i] = (float)i * 1e-3f;
  }
  for (int i = 0; i < 2 * CKPT_RANK_WORDS; i++)
    g_ranks[i] = 0x0123456789abcdefull * (uint64_t)(i + 1);
  s.per_rank = g_ranks;
  s.params = g_params;
  s.optim_state = g_state;
  return s;
}

static size_t count_files(const char *dir, const char *suffix) {
  DIR *d = opendir(dir);
  struct dirent *de;
  size_t n = 0;
  while (d && (de = readdir(d))) {
    size_t l = strlen(de->d_name), sl = strlen(suffix);
    if (de->d_name[0] != '.' && l >= sl && !strcmp(de->d_name + l - sl, suffix))
      n++;
  }
  if (d)
    closedir(d);
  return n;
}

/* Temp files of a save (hidden: count_files does not see them). */
static size_t count_temps(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  size_t n = 0;
  while (d && (de = readdir(d))) {
    size_t l = strlen(de->d_name);
    n += !strncmp(de->d_name, ".backup-", 8) && l > 4 && !strcmp(de->d_name + l - 4, ".tmp");
  }
  if (d)
    closedir(d);
  return n;
}

static void save(const char *dir, uint64_t gstep, char *path, size_t plen) {
  char err[512] = "";
  ckpt_state s = sample(gstep);
  ctrain_err r = ckpt_save(dir, &s, path, plen, err, sizeof(err));
  if (r)
    fprintf(stderr, "ckpt_save: %s\n", err);
  ASSERT_OK(r);
}

static void flip_byte(const char *path, long off) {
  int fd = open(path, O_RDWR);
  ASSERT(fd >= 0);
  if (off < 0)
    off += lseek(fd, 0, SEEK_END);
  uint8_t b;
  ASSERT_EQ(pread(fd, &b, 1, off), 1);
  b ^= 0x10;
  ASSERT_EQ(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

TEST(round_trip) {
  char dir[64], path[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  save(dir, 123, path, sizeof(path));
  ASSERT_STR_CONTAINS(path, "backup-00000000000000000123.ckpt");
  ckpt_state in = sample(123), got;
  struct stat st;
  ASSERT_OK(stat(path, &st));
  ASSERT_EQ(st.st_size, ckpt_file_size(&in));
  ASSERT_OK(ckpt_load_file(path, &got, err, sizeof(err)));
  ASSERT_EQ(got.global_step, 123);
  ASSERT_EQ(got.epoch, 3);
  ASSERT_EQ(got.step, 17);
  ASSERT_EQ(got.data_seed, 42);
  ASSERT_EQ(got.data_position, 17 * 32);
  ASSERT_EQ(got.world, 2);
  ASSERT_EQ(got.replicas, 1);
  ASSERT_EQ(got.optim_kind, 1);
  ASSERT_EQ(got.optim_slots, 2);
  ASSERT_EQ(got.optim_iterations, 123);
  ASSERT_EQ(got.n_params, NP);
  ASSERT_OK(memcmp(got.config_hash, in.config_hash, CKPT_HASH_BYTES));
  ASSERT_OK(memcmp(got.per_rank, in.per_rank, sizeof(g_ranks)));
  ASSERT_OK(memcmp(got.params, in.params, sizeof(g_params)));
  ASSERT_OK(memcmp(got.optim_state, in.optim_state, sizeof(g_state)));
  ckpt_state_free(&got);
  ASSERT_EQ(count_temps(dir), 0);
  fs_rm_rf(dir);
}

/* The replica layout round-trips: 1 worker x 2 replicas has two rows of
 * per-replica state; a layout out of range is refused on save and on read. */
TEST(replica_layout_round_trip_and_range) {
  char dir[64], path[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  ckpt_state in = sample(9), got;
  in.world = 1;
  in.replicas = 2;
  ASSERT_OK(ckpt_save(dir, &in, path, sizeof(path), err, sizeof(err)));
  ASSERT_OK(ckpt_load_file(path, &got, err, sizeof(err)));
  ASSERT_EQ(got.world, 1);
  ASSERT_EQ(got.replicas, 2);
  ASSERT_OK(memcmp(got.per_rank, in.per_rank, 2 * CKPT_RANK_WORDS * sizeof(uint64_t)));
  ckpt_state_free(&got);
  in.replicas = 0;
  ASSERT_EQ(ckpt_file_size(&in), 0);
  ASSERT_EQ(ckpt_save(dir, &in, path, sizeof(path), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "replicas");
  in.replicas = CKPT_MAX_REPLICAS + 1;
  ASSERT_EQ(ckpt_file_size(&in), 0);
  /* A header claiming 0 replicas is not a backup. */
  uint8_t buf[CKPT_HEADER_BYTES + CKPT_HASH_BYTES];
  memset(buf, 0, sizeof(buf));
  memcpy(buf, CKPT_MAGIC, 8);
  buf[8] = CKPT_VERSION;
  buf[12] = CKPT_HEADER_BYTES;
  buf[88] = 1; /* world 1, replicas 0 */
  ASSERT_EQ(ckpt_parse(buf, sizeof(buf), &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "x 0 replicas");
  fs_rm_rf(dir);
}

TEST(every_flipped_bit_region_is_detected) {
  char dir[64], path[4096], err[512];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  save(dir, 5, path, sizeof(path));
  ckpt_state s = sample(5), got;
  long size = (long)ckpt_file_size(&s);
  long offs[] = {0, 9, 13, 20, 50, 100, 121, 200, 2000, size / 2, size - 40, size - 1};
  for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
    flip_byte(path, offs[i]);
    err[0] = 0;
    ASSERT_EQ(ckpt_load_file(path, &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
    ASSERT_STR_CONTAINS(err, path);
    flip_byte(path, offs[i]);
  }
  ASSERT_OK(ckpt_load_file(path, &got, err, sizeof(err)));
  ckpt_state_free(&got);
  ASSERT_OK(truncate(path, size - 1));
  ASSERT_EQ(ckpt_load_file(path, &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "truncated");
  ASSERT_OK(truncate(path, 10));
  ASSERT_EQ(ckpt_load_file(path, &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  fs_rm_rf(dir);
}

TEST(parse_rejects_lying_header_without_overflow) {
  uint8_t buf[CKPT_HEADER_BYTES + CKPT_HASH_BYTES];
  ckpt_state got;
  char err[256];
  memset(buf, 0, sizeof(buf));
  memcpy(buf, CKPT_MAGIC, 8);
  buf[8] = CKPT_VERSION;
  buf[12] = CKPT_HEADER_BYTES;
  buf[88] = 1;                /* world */
  buf[120] = 1;               /* replicas */
  memset(buf + 112, 0xff, 8); /* n_params = 2^64-1 */
  ASSERT_EQ(ckpt_parse(buf, sizeof(buf), &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  memset(buf + 112, 0, 8);
  memset(buf + 88, 0xff, 8); /* world huge */
  ASSERT_EQ(ckpt_parse(buf, sizeof(buf), &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "out of range");
}

/* No parameters is not a model: a header saying so (here with Adam's two
 * slots, which would then have no state to point at; the fuzzer found it
 * with a valid checksum) is damage, and no save writes one. */
TEST(zero_params_is_not_a_backup) {
  uint8_t buf[CKPT_HEADER_BYTES + CKPT_RANK_WORDS * 8 + CKPT_HASH_BYTES];
  ckpt_state got;
  char err[256], dir[64], path[4096];
  memset(buf, 0, sizeof(buf));
  memcpy(buf, CKPT_MAGIC, 8);
  buf[8] = CKPT_VERSION;
  buf[12] = CKPT_HEADER_BYTES;
  buf[88] = 1;  /* world */
  buf[96] = 1;  /* Adam */
  buf[100] = 2; /* slots */
  buf[120] = 1; /* replicas; n_params (112) stays 0 */
  ASSERT_EQ(ckpt_parse(buf, sizeof(buf), &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "0 params");
  ckpt_state in = sample(9);
  in.n_params = 0;
  ASSERT_EQ(ckpt_file_size(&in), 0);
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  ASSERT_EQ(ckpt_save(dir, &in, path, sizeof(path), err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "0 parameters out of range");
  fs_rm_rf(dir);
}

TEST(restore_picks_newest_valid_and_moves_corrupt_aside) {
  char dir[64], p1[4096], p2[4096], p3[4096], chosen[4096], err[512];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  save(dir, 10, p1, sizeof(p1));
  save(dir, 20, p2, sizeof(p2));
  save(dir, 30, p3, sizeof(p3));
  /* A temp file left by a save killed mid-write. */
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s/.backup-00000000000000000040.ckpt.tmp", dir);
  FILE *f = fopen(tmp, "w");
  ASSERT_NOT_NULL(f);
  fputs("partial", f);
  fclose(f);
  flip_byte(p3, 500);
  ckpt_state s = sample(20);
  ASSERT_OK(truncate(p2, (off_t)ckpt_file_size(&s) - 100));

  char logbuf[8192] = "";
  FILE *lf = fmemopen(logbuf, sizeof(logbuf), "w");
  ctrain_log_set_stream(lf);
  ckpt_state got;
  ASSERT_OK(ckpt_restore_latest(dir, &got, chosen, sizeof(chosen), err, sizeof(err)));
  fflush(lf);
  ctrain_log_set_stream(NULL);
  fclose(lf);
  ASSERT_STR_EQ(chosen, p1);
  ASSERT_EQ(got.global_step, 10);
  ASSERT_STR_CONTAINS(logbuf, p3);
  ASSERT_STR_CONTAINS(logbuf, p2);
  ASSERT_STR_CONTAINS(logbuf, "SHA-256 mismatch");
  ASSERT_STR_CONTAINS(logbuf, "truncated");
  ckpt_state_free(&got);
  ASSERT_EQ(count_files(dir, ".corrupt"), 2);
  ASSERT(access(tmp, F_OK) != 0);
  /* A new save after the fallback is the newest one, and pruning keeps it. */
  save(dir, 11, p2, sizeof(p2));
  ASSERT_OK(ckpt_prune(dir, 1, err, sizeof(err)));
  ASSERT_EQ(count_files(dir, ".ckpt"), 1);
  ASSERT_OK(access(p2, F_OK));

  /* All corrupt: NOTFOUND with a warning. */
  flip_byte(p2, 130);
  logbuf[0] = 0;
  lf = fmemopen(logbuf, sizeof(logbuf), "w");
  ctrain_log_set_stream(lf);
  ASSERT_EQ(ckpt_restore_latest(dir, &got, chosen, sizeof(chosen), err, sizeof(err)),
            CTRAIN_E_NOTFOUND);
  fflush(lf);
  ctrain_log_set_stream(NULL);
  fclose(lf);
  ASSERT_STR_CONTAINS(logbuf, "starting fresh");
  ASSERT_STR_CONTAINS(logbuf, p2);
  fs_rm_rf(dir);
}

TEST(missing_dir_is_fresh_start) {
  ckpt_state got;
  char err[256];
  ASSERT_EQ(ckpt_restore_latest("/tmp/test_ckpt_does_not_exist_x", &got, NULL, 0, err, sizeof(err)),
            CTRAIN_E_NOTFOUND);
}

TEST(prune_and_remove_all) {
  char dir[64], p[4096], err[256];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  for (uint64_t g = 1; g <= 5; g++)
    save(dir, g * 100, p, sizeof(p));
  ASSERT_OK(ckpt_prune(dir, 2, err, sizeof(err)));
  ASSERT_EQ(count_files(dir, ".ckpt"), 2);
  ckpt_state got;
  ASSERT_OK(ckpt_restore_latest(dir, &got, p, sizeof(p), err, sizeof(err)));
  ASSERT_EQ(got.global_step, 500);
  ckpt_state_free(&got);
  ASSERT_OK(ckpt_remove_all(dir, err, sizeof(err)));
  ASSERT_EQ(count_files(dir, ".ckpt"), 0);
  fs_rm_rf(dir);
}

TEST(disk_full_keeps_previous_backup) {
  char dir[64], p[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  save(dir, 1, p, sizeof(p));
  ckpt_state s = sample(2);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl = {.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
  ASSERT_OK(setrlimit(RLIMIT_FSIZE, &rl));
  ASSERT_EQ(ckpt_save(dir, &s, NULL, 0, err, sizeof(err)), CTRAIN_E_NOSPACE);
  ASSERT_STR_CONTAINS(err, "/.backup-00000000000000000002.ckpt.");
  ASSERT_STR_CONTAINS(err, "too large");
  ASSERT_EQ(count_temps(dir), 0);
  ASSERT_EQ(count_files(dir, ".ckpt"), 1);
  ckpt_state got;
  ASSERT_OK(ckpt_restore_latest(dir, &got, p, sizeof(p), err, sizeof(err)));
  ASSERT_EQ(got.global_step, 1);
  ckpt_state_free(&got);
  fs_rm_rf(dir);
}

TEST(unwritable_dir_names_it) {
  ckpt_state s = sample(1);
  char err[512] = "";
  ctrain_err r = ckpt_save("/proc/ctrain-no-such-dir", &s, NULL, 0, err, sizeof(err));
  ASSERT(r == CTRAIN_E_IO || r == CTRAIN_E_NOSPACE);
  ASSERT_STR_CONTAINS(err, "/proc/ctrain-no-such-dir");
}

TEST(prepare_dir_creates_parents_and_refuses_a_file) {
  char dir[64], sub[200], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  snprintf(sub, sizeof(sub), "%s/a/b", dir);
  ASSERT_OK(ckpt_prepare_dir(sub, err, sizeof(err)));
  struct stat st;
  ASSERT_OK(stat(sub, &st));
  ASSERT(S_ISDIR(st.st_mode));
  snprintf(sub, sizeof(sub), "%s/file", dir);
  FILE *f = fopen(sub, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
  snprintf(sub, sizeof(sub), "%s/file/x", dir);
  ASSERT_EQ(ckpt_prepare_dir(sub, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, sub);
  ASSERT_STR_CONTAINS(err, "not a directory");
  snprintf(sub, sizeof(sub), "%s/a/b", dir);
  rmdir(sub);
  snprintf(sub, sizeof(sub), "%s/a", dir);
  rmdir(sub);
  fs_rm_rf(dir);
}

static void backup_path(const char *dir, uint64_t gstep, char *out, size_t len) {
  snprintf(out, len, "%s/backup-%020llu.ckpt", dir, (unsigned long long)gstep);
}

/* ckpt_restore_latest with the log captured into logbuf (8 KiB). */
static ctrain_err restore_logged(const char *dir, ckpt_state *got, char *chosen, char *logbuf) {
  char err[512] = "";
  logbuf[0] = 0;
  FILE *lf = fmemopen(logbuf, 8192, "w");
  ASSERT_NOT_NULL(lf);
  ctrain_log_set_stream(lf);
  ctrain_err r = ckpt_restore_latest(dir, got, chosen, 4096, err, sizeof(err));
  fflush(lf);
  ctrain_log_set_stream(NULL);
  fclose(lf);
  return r;
}

/* Links at the temp name the old writer used, at every name the writer will
 * try but the last, and at the target: none is written through, the save
 * lands; with every name taken the save fails cleanly and the previous
 * backup is still the one restored. */
TEST(save_does_not_follow_planted_links) {
  char dir[64], outside[64], path[4096], link[4200], victim[4200], chosen[4096], err[512] = "";
  char logbuf[8192];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  fs_make_dir(outside, sizeof(outside), "test_ckpt");
  save(dir, 1, path, sizeof(path));
  int nv = 0;
  for (uint64_t g = 2; g <= 3; g++) {
    backup_path(dir, g, path, sizeof(path));
    snprintf(link, sizeof(link), "%s/.backup-%020llu.ckpt.tmp", dir, (unsigned long long)g);
    snprintf(victim, sizeof(victim), "%s/victim-%d", outside, nv++);
    fs_put_file(victim, "precious");
    ASSERT_OK(symlink(victim, link));
    snprintf(victim, sizeof(victim), "%s/victim-%d", outside, nv++);
    fs_put_file(victim, "precious");
    ASSERT_OK(symlink(victim, path));
    /* Step 2: all names but the last taken; step 3: all of them. */
    int n = g == 2 ? CTRAIN_FILE_TEMP_TRIES - 1 : CTRAIN_FILE_TEMP_TRIES;
    for (int i = 0; i < n; i++) {
      ASSERT_OK(ctrain_file_format_temp(path, g * 1000 + (uint64_t)i, link, sizeof(link)));
      snprintf(victim, sizeof(victim), "%s/victim-%d", outside, nv++);
      fs_put_file(victim, "precious");
      ASSERT_OK(symlink(victim, link));
    }
  }
  ckpt_state s = sample(2), got;
  g_nonce = 2000;
  ctrain_file_set_nonce_source(counting_nonce, NULL);
  ASSERT_OK(ckpt_save(dir, &s, chosen, sizeof(chosen), err, sizeof(err)));
  backup_path(dir, 2, path, sizeof(path));
  ASSERT_STR_EQ(chosen, path);
  struct stat st;
  ASSERT_OK(lstat(path, &st));
  ASSERT(S_ISREG(st.st_mode));
  s = sample(3);
  g_nonce = 3000;
  ASSERT_EQ(ckpt_save(dir, &s, NULL, 0, err, sizeof(err)), CTRAIN_E_IO);
  ASSERT_STR_CONTAINS(err, "no free temp name");
  ctrain_file_set_nonce_source(NULL, NULL);
  for (int i = 0; i < nv; i++) {
    snprintf(victim, sizeof(victim), "%s/victim-%d", outside, i);
    ASSERT_STR_EQ(fs_slurp(victim), "precious");
  }
  /* The link at step 3's name is not a backup: skipped, step 2 restores. */
  ASSERT_OK(restore_logged(dir, &got, chosen, logbuf));
  ASSERT_EQ(got.global_step, 2);
  ASSERT_STR_CONTAINS(logbuf, "symbolic link");
  ckpt_state_free(&got);
  ASSERT_EQ(count_temps(dir), 0); /* the planted temp links were swept */
  for (int i = 0; i < nv; i++) {
    snprintf(victim, sizeof(victim), "%s/victim-%d", outside, i);
    ASSERT_STR_EQ(fs_slurp(victim), "precious");
  }
  fs_rm_rf(dir);
  fs_rm_rf(outside);
}

/* Bytes this process has read through read(2) and its kin (all threads,
 * the kernel's rchar in /proc/self/io). */
static long long read_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  ASSERT_NOT_NULL(f);
  char line[128];
  long long n = -1;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "rchar: %lld", &n) == 1)
      break;
  fclose(f);
  ASSERT_GE(n, 0);
  return n;
}

static long maxrss_kib(void) {
  struct rusage ru;
  ASSERT_OK(getrusage(RUSAGE_SELF, &ru));
  return ru.ru_maxrss;
}

/* A sparse file of `size` bytes (no disk used) as the newest backup, its
 * first bytes junk or a real backup's header (which checks out but for the
 * size), must be skipped at once, in bounded memory, for the older backup. */
static void check_huge_newest_skipped(off_t size, int real_header, const char *reason) {
  char dir[64], older[4096], newest[4096], chosen[4096], logbuf[8192];
  uint8_t head[4096];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  save(dir, 10, older, sizeof(older));
  backup_path(dir, 99, newest, sizeof(newest));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < sizeof(head); i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    head[i] = (uint8_t)x;
  }
  if (real_header) {
    int rfd = open(older, O_RDONLY);
    ASSERT(rfd >= 0);
    ASSERT_EQ(read(rfd, head, CKPT_HEADER_BYTES), CKPT_HEADER_BYTES);
    close(rfd);
  }
  int fd = open(newest, O_WRONLY | O_CREAT | O_EXCL, 0644);
  ASSERT(fd >= 0);
  ASSERT_EQ(write(fd, head, sizeof(head)), sizeof(head));
  ASSERT_OK(ftruncate(fd, size));
  ASSERT_EQ(pwrite(fd, head, sizeof(head), size - (off_t)sizeof(head)), sizeof(head));
  close(fd);
  ckpt_state got;
  long rss0 = maxrss_kib();
  long long read0 = read_bytes();
  double t0 = ctrain_mono_s();
  ASSERT_OK(restore_logged(dir, &got, chosen, logbuf));
  double took = ctrain_mono_s() - t0;
  long long read = read_bytes() - read0;
  long grew = maxrss_kib() - rss0;
  printf("# restore past a %lld-byte newest backup (%s): %.3f s, %lld bytes read, %ld KiB more "
         "peak RSS\n",
         (long long)size, reason, took, read, grew);
  ASSERT_STR_EQ(chosen, older);
  ASSERT_EQ(got.global_step, 10);
  ckpt_state_free(&got);
  ASSERT_STR_CONTAINS(logbuf, newest);
  ASSERT_STR_CONTAINS(logbuf, reason);
  /* Skipped at once: the old reader read the whole file (17 s on 3 GiB).
   * What it read is counted, not timed (an absolute time ceiling flakes
   * on a loaded machine under a sanitizer; the time is printed
   * above): both backups' headers and the older one's 12 KiB, far under a
   * MiB of the GiBs. */
  ASSERT_LT(read, 1 << 20);
  ASSERT_LT(grew, 16 * 1024); /* KiB: the older backup is 12 KiB */
  fs_rm_rf(dir);
}

TEST(restore_skips_3gib_sparse_junk_in_bounded_memory) {
  check_huge_newest_skipped((off_t)3 << 30, 0, "bad magic");
}

TEST(restore_skips_100gb_sparse_file_in_bounded_memory) {
  check_huge_newest_skipped((off_t)100000000000ll, 1, "truncated or padded");
}

TEST(restore_does_not_block_on_a_fifo) {
  char dir[64], older[4096], newest[4096], chosen[4096], logbuf[8192], err[256];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  save(dir, 10, older, sizeof(older));
  backup_path(dir, 99, newest, sizeof(newest));
  ASSERT_OK(mkfifo(newest, 0644));
  alarm(5); /* an open or read that blocks fails here */
  ckpt_state got;
  ASSERT_OK(restore_logged(dir, &got, chosen, logbuf));
  alarm(0);
  ASSERT_STR_EQ(chosen, older);
  ASSERT_EQ(got.global_step, 10);
  ckpt_state_free(&got);
  ASSERT_STR_CONTAINS(logbuf, newest);
  ASSERT_STR_CONTAINS(logbuf, "a FIFO, not a regular file");
  /* The reader on a pipe: refused, not read. */
  int p[2];
  ASSERT_OK(pipe(p));
  ASSERT_EQ(ckpt_read_fd(p[0], &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "not a regular file");
  close(p[0]);
  close(p[1]);
  fs_rm_rf(dir);
}

/* A link under a backup's name is refused even when it points at a valid
 * backup; a directory under one is skipped too. */
TEST(restore_refuses_links_and_directories) {
  char dir[64], outside[64], older[4096], name[4096], elsewhere[4096], chosen[4096];
  char logbuf[8192];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  fs_make_dir(outside, sizeof(outside), "test_ckpt");
  save(dir, 10, older, sizeof(older));
  save(outside, 99, elsewhere, sizeof(elsewhere));
  backup_path(dir, 99, name, sizeof(name));
  ASSERT_OK(symlink(elsewhere, name));
  backup_path(dir, 98, name, sizeof(name));
  ASSERT_OK(mkdir(name, 0755));
  ckpt_state got;
  ASSERT_OK(restore_logged(dir, &got, chosen, logbuf));
  ASSERT_STR_EQ(chosen, older);
  ASSERT_EQ(got.global_step, 10);
  ckpt_state_free(&got);
  ASSERT_STR_CONTAINS(logbuf, "symbolic link");
  ASSERT_STR_CONTAINS(logbuf, "a directory");
  /* Only moved aside: the link's target is untouched. */
  ASSERT_OK(access(elsewhere, F_OK));
  fs_rm_rf(dir);
  fs_rm_rf(outside);
}

/* Header caps: a state larger than any model can have is not a backup, even
 * when the file is exactly that large (checked before any allocation). */
TEST(header_checks_before_the_body) {
  ckpt_state s = sample(1), h;
  uint8_t hdr[CKPT_HEADER_BYTES];
  char dir[64], path[4096], err[256];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  save(dir, 1, path, sizeof(path));
  int fd = open(path, O_RDONLY);
  ASSERT(fd >= 0);
  ASSERT_EQ(read(fd, hdr, sizeof(hdr)), sizeof(hdr));
  close(fd);
  ASSERT_OK(ckpt_check_header(hdr, ckpt_file_size(&s), &h, err, sizeof(err)));
  ASSERT_EQ(h.global_step, 1);
  ASSERT_EQ(h.n_params, NP);
  ASSERT_NULL(h.params);
  ASSERT_EQ(ckpt_check_header(hdr, ckpt_file_size(&s) + 1, &h, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "truncated or padded");
  uint64_t big = CKPT_MAX_PARAMS + 1;
  for (int i = 0; i < 8; i++)
    hdr[112 + i] = (uint8_t)(big >> (8 * i));
  s.n_params = big;
  ASSERT_EQ(ckpt_file_size(&s), 0);
  uint64_t implied = CKPT_HEADER_BYTES + 2 * CKPT_RANK_WORDS * 8 + 12 * big + CKPT_HASH_BYTES;
  ASSERT_EQ(ckpt_check_header(hdr, implied, &h, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "out of range");
  fs_rm_rf(dir);
}

TEST(config_hash_and_hex) {
  uint8_t h[CKPT_HASH_BYTES];
  char hex[2 * CKPT_HASH_BYTES + 1];
  ckpt_config_hash("abc", 3, h);
  ckpt_hex(h, hex);
  ASSERT_STR_EQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(backup_names_round_trip) {
  char name[CKPT_NAME_BYTES];
  uint64_t step = 0;
  ckpt_backup_name(1234, name);
  ASSERT_STR_EQ(name, "backup-00000000000000001234.ckpt");
  ASSERT_EQ(ckpt_parse_backup_name(name, &step), 1);
  ASSERT_EQ(step, 1234);
  ckpt_backup_name(UINT64_MAX, name);
  ASSERT_EQ(ckpt_parse_backup_name(name, &step), 1);
  ASSERT(step == UINT64_MAX);
  ASSERT_EQ(ckpt_parse_backup_name("backup-99999999999999999999.ckpt", &step), 0); /* > 2^64 */
  ASSERT_EQ(ckpt_parse_backup_name("backup-0000000000000000123.ckpt", &step), 0);
  ASSERT_EQ(ckpt_parse_backup_name("backup-00000000000000001234.ckpt.corrupt", &step), 0);
  ASSERT_EQ(ckpt_parse_backup_name("x/backup-00000000000000001234.ckpt", &step), 0);
}

/* The rules through the store interface, on the directory store: save,
 * newest verified restored with the corrupt one taken out of the rotation,
 * prune to keep, remove all; temp files of an interrupted save cleaned. */
TEST(directory_store_through_the_interface) {
  char dir[64], sub[200], path[4096], chosen[4096], err[512] = "", tmp[4300];
  fs_make_dir(dir, sizeof(dir), "test_ckpt");
  snprintf(sub, sizeof(sub), "%s/x/y", dir);
  ckpt_store *st = NULL;
  ASSERT_OK(ckpt_store_open_dir(sub, &st, err, sizeof(err)));
  ASSERT_STR_EQ(st->flag, "--backup-dir");
  for (uint64_t g = 1; g <= 3; g++) {
    ckpt_state s = sample(g);
    ASSERT_OK(ckpt_store_save(st, &s, path, sizeof(path), err, sizeof(err)));
  }
  ASSERT_STR_CONTAINS(path, "/x/y/backup-00000000000000000003.ckpt");
  ASSERT_EQ(count_files(sub, ".ckpt"), 3);
  flip_byte(path, 300);
  snprintf(tmp, sizeof(tmp), "%s/.backup-00000000000000000004.ckpt.0123456789abcdef.tmp", sub);
  FILE *f = fopen(tmp, "w");
  ASSERT_NOT_NULL(f);
  fclose(f);
  ckpt_state got;
  ASSERT_OK(ckpt_store_restore_latest(st, &got, chosen, sizeof(chosen), err, sizeof(err)));
  ASSERT_EQ(got.global_step, 2);
  ASSERT_STR_CONTAINS(chosen, "backup-00000000000000000002.ckpt");
  ckpt_state_free(&got);
  ASSERT_EQ(count_temps(sub), 0);
  ASSERT_EQ(count_files(sub, ".corrupt"), 1);
  ASSERT_OK(ckpt_store_prune(st, 1, err, sizeof(err)));
  ASSERT_EQ(count_files(sub, ".ckpt"), 1);
  ASSERT_OK(ckpt_store_remove_all(st, err, sizeof(err)));
  ASSERT_EQ(count_files(sub, ".ckpt"), 0);
  ASSERT_EQ(ckpt_store_restore_latest(st, &got, NULL, 0, err, sizeof(err)), CTRAIN_E_NOTFOUND);
  ASSERT_STR_CONTAINS(err, "--backup-dir");
  ckpt_store_free(st);
  fs_rm_rf(dir);
}

TEST_MAIN(T(round_trip), T(replica_layout_round_trip_and_range),
          T(every_flipped_bit_region_is_detected), T(parse_rejects_lying_header_without_overflow),
          T(zero_params_is_not_a_backup), T(restore_picks_newest_valid_and_moves_corrupt_aside),
          T(missing_dir_is_fresh_start), T(prune_and_remove_all),
          T(disk_full_keeps_previous_backup), T(unwritable_dir_names_it),
          T(prepare_dir_creates_parents_and_refuses_a_file), T(save_does_not_follow_planted_links),
          T(restore_skips_3gib_sparse_junk_in_bounded_memory),
          T(restore_skips_100gb_sparse_file_in_bounded_memory), T(restore_does_not_block_on_a_fifo),
          T(restore_refuses_links_and_directories), T(header_checks_before_the_body),
          T(config_hash_and_hex), T(backup_names_round_trip),
          T(directory_store_through_the_interface))
