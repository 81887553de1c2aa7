/* test_ckpt_tree.c - backup format 3, whose checksum is a SHA-256 list tree
 * (ckpt.h, ckpt_tree.h): the root ckpt_save writes is the documented one,
 * recomputed here from the definition alone (partial and exact last leaves);
 * version-2 files, whose checksum is one SHA-256, still restore (a job
 * resumes across an upgrade); unknown versions are not backups and the
 * restore falls back; damage in any leaf, truncation, and a root over the
 * wrong leaf count or leaf size are detected; an object store's image
 * (ckpt_write_fd, ckpt_image) is the same state as format 2, whose SHA-256
 * pass gives the object's checksum too; and the hashing threads take bytes
 * only once they are announced, and stop when a read fails. */
#include "test.h"
#include "test_fs.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctrain/log.h"
#include "worker/checkpoint/ckpt.h"
#include "worker/checkpoint/ckpt_store.h"
#include "worker/checkpoint/ckpt_tree.h"

#define LEAF ((size_t)4 << 20)

/* A world-1 Adam state of np parameters (arrays owned: free_state). */
static ckpt_state big_state(uint64_t gstep, uint64_t np) {
  ckpt_state s;
  memset(&s, 0, sizeof(s));
  s.global_step = gstep;
  s.epoch = 1;
  s.step = 5;
  s.world = 1;
  s.replicas = 1;
  s.optim_kind = 1;
  s.optim_slots = 2;
  s.optim_iterations = gstep;
  s.n_params = np;
  s.per_rank = calloc(CKPT_RANK_WORDS, sizeof(uint64_t));
  s.params = malloc(np * sizeof(float));
  s.optim_state = malloc(2 * np * sizeof(float));
  ASSERT(s.per_rank && s.params && s.optim_state);
  for (uint64_t i = 0; i < np; i++) {
    s.params[i] = (float)i * 0.5f + (float)gstep;
    s.optim_state[i] = -(float)i;
    s.optim_state[np + i] = (float)(i % 977);
  }
  s.per_rank[0] = 0x9e3779b97f4a7c15ull;
  return s;
}

static void free_state(ckpt_state *s) {
  free(s->per_rank);
  free(s->params);
  free(s->optim_state);
}

static uint8_t *read_all(const char *path, size_t *size) {
  struct stat st;
  int fd = open(path, O_RDONLY);
  ASSERT(fd >= 0);
  ASSERT_EQ(fstat(fd, &st), 0);
  uint8_t *b = malloc((size_t)st.st_size);
  ASSERT_NOT_NULL(b);
  ASSERT_EQ(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
  close(fd);
  *size = (size_t)st.st_size;
  return b;
}

static void write_all(const char *path, const uint8_t *b, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT(fd >= 0);
  ASSERT_EQ(write(fd, b, size), (ssize_t)size);
  close(fd);
}

static void sha256(const void *p, size_t n, uint8_t out[32]) {
  unsigned int len = 0;
  ASSERT_EQ(EVP_Digest(p, n, out, &len, EVP_sha256(), NULL), 1);
}

/* The root of b[0, n) by the definition in ckpt.h, with `leaf`-byte leaves
 * and `count_delta` added to the leaf count it states (0: the real one). */
static void spec_root(const uint8_t *b, size_t n, size_t leaf, int count_delta, uint8_t out[32]) {
  size_t leaves = (n + leaf - 1) / leaf;
  size_t pre_len = 24 + 32 * leaves;
  uint8_t *pre = malloc(pre_len);
  ASSERT_NOT_NULL(pre);
  memcpy(pre, "CTRNTREE", 8);
  uint64_t stated = (uint64_t)leaves + (uint64_t)(int64_t)count_delta;
  for (int i = 0; i < 8; i++) {
    pre[8 + i] = (uint8_t)((uint64_t)leaf >> (8 * i));
    pre[16 + i] = (uint8_t)(stated >> (8 * i));
  }
  for (size_t i = 0; i < leaves; i++) {
    size_t len = n - i * leaf < leaf ? n - i * leaf : leaf;
    sha256(b + i * leaf, len, pre + 24 + 32 * i);
  }
  sha256(pre, pre_len, out);
  free(pre);
}

static uint32_t version_of(const uint8_t *b) {
  return (uint32_t)b[8] | (uint32_t)b[9] << 8 | (uint32_t)b[10] << 16 | (uint32_t)b[11] << 24;
}

static void set_version(uint8_t *b, uint32_t v) {
  for (int i = 0; i < 4; i++)
    b[8 + i] = (uint8_t)(v >> (8 * i));
}

static void assert_same_state(const ckpt_state *a, const ckpt_state *b) {
  ASSERT_EQ(a->global_step, b->global_step);
  ASSERT_EQ(a->n_params, b->n_params);
  ASSERT_EQ(a->optim_iterations, b->optim_iterations);
  ASSERT_EQ(a->per_rank[0], b->per_rank[0]);
  ASSERT(memcmp(a->params, b->params, a->n_params * sizeof(float)) == 0);
  ASSERT(memcmp(a->optim_state, b->optim_state, 2 * a->n_params * sizeof(float)) == 0);
}

static ctrain_err load(const char *path, char *err, size_t errlen) {
  ckpt_state got;
  ctrain_err r = ckpt_load_file(path, &got, err, errlen);
  ckpt_state_free(&got);
  return r;
}

/* 128 + 48 + 12 np bytes before the checksum: np = 1000003 gives 3 leaves,
 * the last one partial; np = 699036 exactly 2 full leaves. */
TEST(saved_root_is_the_documented_tree) {
  static const uint64_t nps[] = {1000003, 699036, 10};
  static const size_t leaves[] = {3, 2, 1};
  for (int k = 0; k < 3; k++) {
    char dir[64], path[4096], err[512] = "";
    fs_make_dir(dir, sizeof(dir), "test_ckpt_tree");
    ckpt_state s = big_state(40 + (uint64_t)k, nps[k]), got;
    ASSERT_OK(ckpt_save(dir, &s, path, sizeof(path), err, sizeof(err)));
    size_t size;
    uint8_t *b = read_all(path, &size), root[32];
    size_t body = size - CKPT_HASH_BYTES;
    ASSERT_EQ(size, ckpt_file_size(&s));
    ASSERT_EQ((body + LEAF - 1) / LEAF, leaves[k]);
    ASSERT_EQ(version_of(b), 3);
    spec_root(b, body, LEAF, 0, root);
    ASSERT(memcmp(b + body, root, 32) == 0);
    /* Not the plain SHA-256 a version-2 file would carry. */
    sha256(b, body, root);
    ASSERT(memcmp(b + body, root, 32) != 0);
    ASSERT_OK(ckpt_load_file(path, &got, err, sizeof(err)));
    assert_same_state(&s, &got);
    ckpt_state_free(&got);
    ASSERT_OK(ckpt_parse(b, size, &got, err, sizeof(err)));
    assert_same_state(&s, &got);
    ckpt_state_free(&got);
    free(b);
    free_state(&s);
    fs_rm_rf(dir);
  }
}

/* A version-2 file (an older build's: the same layout, one SHA-256) is
 * restored, through ckpt_restore_latest as a resuming job does. */
TEST(version_2_backups_still_restore) {
  char dir[64], path[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt_tree");
  ckpt_state s = big_state(77, 1000003), got;
  ASSERT_OK(ckpt_save(dir, &s, path, sizeof(path), err, sizeof(err)));
  size_t size;
  uint8_t *b = read_all(path, &size);
  set_version(b, 2);
  sha256(b, size - CKPT_HASH_BYTES, b + size - CKPT_HASH_BYTES);
  write_all(path, b, size);
  ASSERT_OK(ckpt_restore_latest(dir, &got, NULL, 0, err, sizeof(err)));
  assert_same_state(&s, &got);
  ckpt_state_free(&got);
  /* A version-2 header with a tree root is damage, not a backup. */
  spec_root(b, size - CKPT_HASH_BYTES, LEAF, 0, b + size - CKPT_HASH_BYTES);
  write_all(path, b, size);
  ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_CORRUPT);
  ASSERT_STR_CONTAINS(err, "SHA-256 mismatch");
  free(b);
  free_state(&s);
  fs_rm_rf(dir);
}

/* Versions 0, 1 and 2^32-1, each with a checksum valid under either
 * definition, are refused (CTRAIN_E_CORRUPT naming the version), and the
 * restore falls back to the previous backup. */
TEST(unknown_versions_are_refused_and_the_restore_falls_back) {
  static const uint32_t bad[] = {0, 1, CKPT_VERSION + CKPT_VERSIONS_AHEAD + 1, 0xffffffffu};
  char dir[64], path[4096], older[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt_tree");
  ckpt_state s1 = big_state(1, 1000), s2 = big_state(2, 1000), got;
  ASSERT_OK(ckpt_save(dir, &s1, older, sizeof(older), err, sizeof(err)));
  for (int k = 0; k < 4; k++) {
    for (int tree = 0; tree < 2; tree++) {
      ASSERT_OK(ckpt_save(dir, &s2, path, sizeof(path), err, sizeof(err)));
      size_t size;
      uint8_t *b = read_all(path, &size);
      set_version(b, bad[k]);
      if (tree)
        spec_root(b, size - CKPT_HASH_BYTES, LEAF, 0, b + size - CKPT_HASH_BYTES);
      else
        sha256(b, size - CKPT_HASH_BYTES, b + size - CKPT_HASH_BYTES);
      write_all(path, b, size);
      free(b);
      ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_CORRUPT);
      ASSERT_STR_CONTAINS(err, "format version");
      ASSERT_OK(ckpt_restore_latest(dir, &got, NULL, 0, err, sizeof(err)));
      ASSERT_EQ(got.global_step, 1);
      ckpt_state_free(&got);
    }
  }
  free_state(&s1);
  free_state(&s2);
  fs_rm_rf(dir);
}

/* A newer build's version (4, and CKPT_VERSIONS_AHEAD past this one) is
 * CTRAIN_E_UNSUPPORTED: the restore stops there, with an older backup
 * beside it, and the file stays where it is (an image rolled back must not
 * throw away what the newer one saved). */
TEST(a_newer_builds_backup_stops_the_restore_and_is_kept) {
  static const uint32_t newer[] = {CKPT_VERSION + 1, CKPT_VERSION + CKPT_VERSIONS_AHEAD};
  char dir[64], path[4096], older[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt_tree");
  ckpt_state s1 = big_state(1, 1000), s2 = big_state(2, 1000), got;
  ASSERT_OK(ckpt_save(dir, &s1, older, sizeof(older), err, sizeof(err)));
  ASSERT_OK(ckpt_save(dir, &s2, path, sizeof(path), err, sizeof(err)));
  for (int k = 0; k < 2; k++) {
    size_t size;
    uint8_t *b = read_all(path, &size);
    set_version(b, newer[k]);
    write_all(path, b, size);
    free(b);
    ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_UNSUPPORTED);
    ASSERT_STR_CONTAINS(err, "written by a newer ctrain");
    ASSERT_EQ(ckpt_restore_latest(dir, &got, NULL, 0, err, sizeof(err)), CTRAIN_E_UNSUPPORTED);
    ASSERT_STR_CONTAINS(err, "written by a newer ctrain");
    ASSERT_EQ(access(path, F_OK), 0); /* not moved aside */
  }
  free_state(&s1);
  free_state(&s2);
  fs_rm_rf(dir);
}

/* One flipped byte in any leaf (first, inside, at a leaf boundary, last),
 * in the root, a truncated or extended file, and roots over the wrong leaf
 * count or leaf size: none verifies. */
TEST(damage_in_any_leaf_and_wrong_trees_are_detected) {
  char dir[64], path[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt_tree");
  ckpt_state s = big_state(9, 1000003);
  ASSERT_OK(ckpt_save(dir, &s, path, sizeof(path), err, sizeof(err)));
  size_t size;
  uint8_t *orig = read_all(path, &size), *b = malloc(size + 1);
  ASSERT_NOT_NULL(b);
  size_t body = size - CKPT_HASH_BYTES;
  const size_t flips[] = {200, LEAF - 1, LEAF, LEAF + 12345, 2 * LEAF, body - 1, body, size - 1};
  for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
    memcpy(b, orig, size);
    b[flips[i]] ^= 0x01;
    write_all(path, b, size);
    ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_CORRUPT);
    ASSERT_STR_CONTAINS(err, "SHA-256 mismatch");
  }
  memcpy(b, orig, size);
  write_all(path, b, size - 1); /* truncated */
  ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_CORRUPT);
  write_all(path, b, size - LEAF);
  ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_CORRUPT);
  b[size] = 0;
  write_all(path, b, size + 1); /* padded */
  ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_CORRUPT);
  /* Roots that state one leaf more or fewer, or use other leaf sizes. */
  const int deltas[] = {1, -1};
  for (int i = 0; i < 2; i++) {
    spec_root(b, body, LEAF, deltas[i], b + body);
    write_all(path, b, size);
    ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_CORRUPT);
  }
  const size_t other_leaf[] = {LEAF / 4, 2 * LEAF, body};
  for (int i = 0; i < 3; i++) {
    spec_root(b, body, other_leaf[i], 0, b + body);
    write_all(path, b, size);
    ASSERT_EQ(load(path, err, sizeof(err)), CTRAIN_E_CORRUPT);
  }
  /* The right root verifies again: the checks above failed for their
   * reason only. */
  spec_root(b, body, LEAF, 0, b + body);
  write_all(path, b, size);
  ASSERT_OK(load(path, err, sizeof(err)));
  free(b);
  free(orig);
  free_state(&s);
  fs_rm_rf(dir);
}

/* An object store's image is a volume's file but for the version (2: the
 * checksum is the image's plain SHA-256, the pass that gives the object's
 * too) and the checksum (ckpt.h). */
static void assert_linear_twin(const uint8_t *obj, const uint8_t *file, size_t size) {
  uint8_t sum[CKPT_HASH_BYTES];
  ASSERT(memcmp(obj, file, 8) == 0);
  ASSERT_EQ(obj[8], CKPT_VERSION_LINEAR);
  ASSERT_EQ(file[8], CKPT_VERSION);
  ASSERT(memcmp(obj + 9, file + 9, size - 9 - CKPT_HASH_BYTES) == 0);
  ckpt_config_hash(obj, size - CKPT_HASH_BYTES, sum);
  ASSERT(memcmp(obj + size - CKPT_HASH_BYTES, sum, CKPT_HASH_BYTES) == 0);
}

/* ckpt_write_fd writes what ckpt_save does, as version 2 (what an object
 * store uploads is what a volume holds), and ckpt_read_fd verifies it. */
TEST(write_fd_matches_the_saved_file) {
  char dir[64], path[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt_tree");
  ckpt_state s = big_state(9, 1000003);
  ASSERT_OK(ckpt_save(dir, &s, path, sizeof(path), err, sizeof(err)));
  FILE *tmp = tmpfile();
  ASSERT_NOT_NULL(tmp);
  int fd = fileno(tmp);
  uint8_t digest[CKPT_HASH_BYTES], want[CKPT_HASH_BYTES];
  ASSERT_OK(ckpt_write_fd(fd, "tmpfile", &s, digest, err, sizeof(err)));
  off_t size = lseek(fd, 0, SEEK_END);
  ASSERT_EQ((uint64_t)size, ckpt_file_size(&s));
  uint8_t *a = malloc((size_t)size), *b = malloc((size_t)size);
  ASSERT(a && b);
  ASSERT_EQ(pread(fd, a, (size_t)size, 0), size);
  int sfd = open(path, O_RDONLY);
  ASSERT(sfd >= 0);
  ASSERT_EQ(pread(sfd, b, (size_t)size, 0), size);
  close(sfd);
  assert_linear_twin(a, b, (size_t)size);
  ckpt_config_hash(a, (size_t)size, want); /* SHA-256 of the whole file */
  ASSERT(memcmp(digest, want, CKPT_HASH_BYTES) == 0);
  ckpt_state got;
  ASSERT_EQ(lseek(fd, 0, SEEK_SET), 0);
  ASSERT_OK(ckpt_read_fd(fd, &got, err, sizeof(err)));
  ASSERT_EQ(got.global_step, 9);
  ckpt_state_free(&got);
  fclose(tmp);
  free(a);
  free(b);
  free_state(&s);
  fs_rm_rf(dir);
}

/* The image an upload reads straight from the state's arrays is the file
 * ckpt_write_fd writes (ckpt_save's, as version 2), whatever the read sizes (pieces that
 * cross the sections and end inside the checksum), read twice as a retry
 * does; its SHA-256 is the whole file's. */
TEST(image_reads_are_the_saved_file) {
  char dir[64], path[4096], err[512] = "";
  fs_make_dir(dir, sizeof(dir), "test_ckpt_tree");
  ckpt_state s = big_state(7, 1000);
  ASSERT_OK(ckpt_save(dir, &s, path, sizeof(path), err, sizeof(err)));
  uint64_t size = ckpt_file_size(&s);
  uint8_t *want = malloc(size), *got = malloc(size + 64);
  ASSERT(want && got);
  int sfd = open(path, O_RDONLY);
  ASSERT(sfd >= 0);
  ASSERT_EQ(pread(sfd, want, size, 0), (ssize_t)size);
  close(sfd);
  FILE *tmp = tmpfile();
  uint8_t digest[CKPT_HASH_BYTES];
  ASSERT_NOT_NULL(tmp);
  ASSERT_OK(ckpt_write_fd(fileno(tmp), "tmpfile", &s, digest, err, sizeof(err)));
  uint8_t *file = want;
  want = malloc(size);
  ASSERT_NOT_NULL(want);
  ASSERT_EQ(pread(fileno(tmp), want, size, 0), (ssize_t)size);
  fclose(tmp);
  assert_linear_twin(want, file, size);
  free(file);
  ckpt_image *im = NULL;
  ASSERT_OK(ckpt_image_open(&s, &im, err, sizeof(err)));
  ASSERT_EQ(ckpt_image_size(im), size);
  static const size_t pieces[] = {1, 7, 100, 129, 4096, 65536, 1 << 20};
  for (size_t p = 0; p < sizeof(pieces) / sizeof(pieces[0]); p++) {
    memset(got, 0xee, size + 64);
    uint64_t off = 0;
    size_t n = 0;
    do {
      ASSERT_OK(ckpt_image_pread(im, off, got + off, pieces[p], &n));
      ASSERT(n <= pieces[p]);
      off += n;
    } while (n > 0);
    ASSERT_EQ(off, size);
    ASSERT(memcmp(got, want, size) == 0);
    ASSERT_EQ(got[size], 0xee); /* nothing past the end */
  }
  uint8_t sum[CKPT_HASH_BYTES], file_sum[CKPT_HASH_BYTES];
  ASSERT_OK(ckpt_image_sha256(im, sum));
  ckpt_config_hash(want, size, file_sum);
  ASSERT(memcmp(sum, file_sum, CKPT_HASH_BYTES) == 0);
  ckpt_image_free(im);
  ckpt_image_free(NULL);
  s.n_params = (uint64_t)1 << 62; /* out of range: refused at open */
  ASSERT_EQ(ckpt_image_open(&s, &im, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_NULL(im);
  free(want);
  free(got);
  free_state(&s);
  fs_rm_rf(dir);
}

typedef struct {
  ckpt_tree *t;
  uint8_t *buf;
  size_t total;
} feeder;

/* Fills buf in 1 MiB steps, announcing each, as a read does. */
static void *feed_main(void *arg) {
  feeder *f = arg;
  for (size_t off = 0; off < f->total;) {
    size_t n = f->total - off < ((size_t)1 << 20) ? f->total - off : (size_t)1 << 20;
    for (size_t i = 0; i < n; i++)
      f->buf[off + i] = (uint8_t)((off + i) * 131 + ((off + i) >> 12));
    off += n;
    ckpt_tree_ready(f->t, off);
  }
  return NULL;
}

/* Leaves hashed while the bytes still arrive (another thread writing them)
 * give the documented root; a tree whose bytes never all arrive is
 * abandoned (root NULL) or reported (CTRAIN_E_IO) without hanging; bad
 * arguments are refused. */
TEST(tree_hashes_bytes_only_once_announced_and_stops_when_abandoned) {
  size_t total = 3 * LEAF + 999;
  uint8_t *buf = calloc(1, total), root[32], want[32];
  ASSERT_NOT_NULL(buf);
  ckpt_tree *t = NULL;
  ckpt_seg seg = {buf, total};
  ASSERT_OK(ckpt_tree_start(&seg, 1, total, 0, &t));
  feeder f = {t, buf, total};
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, feed_main, &f), 0);
  pthread_join(th, NULL);
  ASSERT_OK(ckpt_tree_end(t, root));
  spec_root(buf, total, LEAF, 0, want);
  ASSERT(memcmp(root, want, 32) == 0);
  /* Split into pieces across leaf boundaries: the same root. */
  ckpt_seg parts[3] = {{buf, 100}, {buf + 100, LEAF}, {buf + 100 + LEAF, total - 100 - LEAF}};
  ASSERT_OK(ckpt_tree_start(parts, 3, total, total, &t));
  ASSERT_OK(ckpt_tree_end(t, root));
  ASSERT(memcmp(root, want, 32) == 0);
  /* Half announced, then given up (a failed read), or asked for a root. */
  ASSERT_OK(ckpt_tree_start(&seg, 1, total, LEAF + 5, &t));
  ASSERT_OK(ckpt_tree_end(t, NULL));
  ASSERT_OK(ckpt_tree_start(&seg, 1, total, 2 * LEAF, &t));
  ASSERT_EQ(ckpt_tree_end(t, root), CTRAIN_E_IO);
  ASSERT_OK(ckpt_tree_end(NULL, NULL));
  ASSERT_EQ(ckpt_tree_end(NULL, root), CTRAIN_E_INVAL);
  ASSERT_EQ(ckpt_tree_start(&seg, 1, 0, 0, &t), CTRAIN_E_INVAL);
  ASSERT_EQ(ckpt_tree_start(&seg, 1, total + 1, 0, &t), CTRAIN_E_INVAL);
  ASSERT_EQ(ckpt_tree_start(&seg, 0, total, 0, &t), CTRAIN_E_INVAL);
  ASSERT_NULL(t);
  free(buf);
}

TEST_MAIN(T(saved_root_is_the_documented_tree), T(version_2_backups_still_restore),
          T(unknown_versions_are_refused_and_the_restore_falls_back),
          T(a_newer_builds_backup_stops_the_restore_and_is_kept),
          T(damage_in_any_leaf_and_wrong_trees_are_detected), T(write_fd_matches_the_saved_file),
          T(image_reads_are_the_saved_file),
          T(tree_hashes_bytes_only_once_announced_and_stops_when_abandoned))
