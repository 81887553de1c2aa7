/* test_ckpt.c - backup files: round trip, every kind of damage detected,
 * newest-valid selection with fallback, pruning, and a disk-full save that
 * leaves the previous backup intact (RLIMIT_FSIZE in a child). */
#include "test.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "ctrain/ckpt.h"
#include "ctrain/log.h"

#define NP 1000

static float g_params[NP], g_state[2 * NP];
static uint64_t g_ranks[2 * CKPT_RANK_WORDS];

static void make_dir(char *dir, size_t len) {
  snprintf(dir, len, "/tmp/test_ckpt.XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(dir));
}

static void rm_rf(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    char p[4096];
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
    unlink(p);
  }
  if (d)
    closedir(d);
  rmdir(dir);
}

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
  make_dir(dir, sizeof(dir));
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
  ASSERT_EQ(got.optim_kind, 1);
  ASSERT_EQ(got.optim_slots, 2);
  ASSERT_EQ(got.optim_iterations, 123);
  ASSERT_EQ(got.n_params, NP);
  ASSERT_OK(memcmp(got.config_hash, in.config_hash, CKPT_HASH_BYTES));
  ASSERT_OK(memcmp(got.per_rank, in.per_rank, sizeof(g_ranks)));
  ASSERT_OK(memcmp(got.params, in.params, sizeof(g_params)));
  ASSERT_OK(memcmp(got.optim_state, in.optim_state, sizeof(g_state)));
  ckpt_state_free(&got);
  ASSERT_EQ(count_files(dir, ".tmp"), 0);
  rm_rf(dir);
}

TEST(every_flipped_bit_region_is_detected) {
  char dir[64], path[4096], err[512];
  make_dir(dir, sizeof(dir));
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
  rm_rf(dir);
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
  memset(buf + 112, 0xff, 8); /* n_params = 2^64-1 */
  ASSERT_EQ(ckpt_parse(buf, sizeof(buf), &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  memset(buf + 112, 0, 8);
  memset(buf + 88, 0xff, 8); /* world huge */
  ASSERT_EQ(ckpt_parse(buf, sizeof(buf), &got, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "out of range");
}

TEST(restore_picks_newest_valid_and_moves_corrupt_aside) {
  char dir[64], p1[4096], p2[4096], p3[4096], chosen[4096], err[512];
  make_dir(dir, sizeof(dir));
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
  rm_rf(dir);
}

TEST(missing_dir_is_fresh_start) {
  ckpt_state got;
  char err[256];
  ASSERT_EQ(ckpt_restore_latest("/tmp/test_ckpt_does_not_exist_x", &got, NULL, 0, err, sizeof(err)),
            CTRAIN_E_NOTFOUND);
}

TEST(prune_and_remove_all) {
  char dir[64], p[4096], err[256];
  make_dir(dir, sizeof(dir));
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
  rm_rf(dir);
}

TEST(disk_full_keeps_previous_backup) {
  char dir[64], p[4096], err[512] = "";
  make_dir(dir, sizeof(dir));
  save(dir, 1, p, sizeof(p));
  ckpt_state s = sample(2);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl = {.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
  ASSERT_OK(setrlimit(RLIMIT_FSIZE, &rl));
  ASSERT_EQ(ckpt_save(dir, &s, NULL, 0, err, sizeof(err)), CTRAIN_E_NOSPACE);
  ASSERT_STR_CONTAINS(err, ".backup-00000000000000000002.ckpt.tmp");
  ASSERT_STR_CONTAINS(err, "too large");
  ASSERT_EQ(count_files(dir, ".tmp"), 0);
  ASSERT_EQ(count_files(dir, ".ckpt"), 1);
  ckpt_state got;
  ASSERT_OK(ckpt_restore_latest(dir, &got, p, sizeof(p), err, sizeof(err)));
  ASSERT_EQ(got.global_step, 1);
  ckpt_state_free(&got);
  rm_rf(dir);
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
  make_dir(dir, sizeof(dir));
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
  ASSERT_STR_CONTAINS(err, "Not a directory");
  snprintf(sub, sizeof(sub), "%s/a/b", dir);
  rmdir(sub);
  snprintf(sub, sizeof(sub), "%s/a", dir);
  rmdir(sub);
  rm_rf(dir);
}

TEST(config_hash_and_hex) {
  uint8_t h[CKPT_HASH_BYTES];
  char hex[2 * CKPT_HASH_BYTES + 1];
  ckpt_config_hash("abc", 3, h);
  ckpt_hex(h, hex);
  ASSERT_STR_EQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_MAIN(T(round_trip), T(every_flipped_bit_region_is_detected),
          T(parse_rejects_lying_header_without_overflow),
          T(restore_picks_newest_valid_and_moves_corrupt_aside), T(missing_dir_is_fresh_start),
          T(prune_and_remove_all), T(disk_full_keeps_previous_backup), T(unwritable_dir_names_it),
          T(prepare_dir_creates_parents_and_refuses_a_file), T(config_hash_and_hex))
