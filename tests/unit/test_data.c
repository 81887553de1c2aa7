/* test_data.c - IDX on the real Fashion-MNIST files, errors naming the file
 * (bad magic, truncation, count mismatch), raw records round trip, sharding
 * policies and the per-epoch order. */
#include "test.h"
#include "test_fs.h"

#include <sys/resource.h>
#include <zlib.h>

#include "worker/data/data.h"

#define FMNIST "/usr/share/datasets/fashion-mnist/t10k"

static const data_format IDX = {.format = DATA_FMT_IDX}, RAW = {.format = DATA_FMT_RAW};

static char tmpdir[256];
static char made[8][256]; /* removed when the test's process exits */
static int n_made;

static void rm_made(void) {
  for (int i = 0; i < n_made; i++)
    fs_rm_rf(made[i]);
}

static void mk_tmp(void) {
  fs_make_dir(tmpdir, sizeof(tmpdir), "ctrain-test-data");
  ASSERT(n_made < 8);
  if (!n_made)
    atexit(rm_made);
  memcpy(made[n_made++], tmpdir, sizeof(tmpdir));
}

static void write_file(const char *path, const void *buf, size_t len, int gz) {
  if (gz) {
    gzFile g = gzopen(path, "wb");
    ASSERT_NOT_NULL(g);
    ASSERT_EQ(gzwrite(g, buf, (unsigned)len), (int)len);
    gzclose(g);
  } else {
    FILE *f = fopen(path, "wb");
    ASSERT_NOT_NULL(f);
    ASSERT_EQ(fwrite(buf, 1, len, f), len);
    fclose(f);
  }
}

/* A tiny IDX pair of n 2x2 images; `cut` bytes dropped from the images. */
static void tiny_idx(const char *prefix, int n, size_t cut, uint8_t magic2, int nlabels) {
  uint8_t img[16 + 4 * 100], lab[8 + 100];
  uint8_t ih[16] = {0, 0, magic2, 3, 0, 0, 0, (uint8_t)n, 0, 0, 0, 2, 0, 0, 0, 2};
  uint8_t lh[8] = {0, 0, 8, 1, 0, 0, 0, (uint8_t)nlabels};
  memcpy(img, ih, 16);
  memcpy(lab, lh, 8);
  for (int i = 0; i < 4 * n; i++)
    img[16 + i] = (uint8_t)(i * 17);
  for (int i = 0; i < nlabels; i++)
    lab[8 + i] = (uint8_t)(i % 3);
  char p[512];
  ASSERT_LT(snprintf(p, sizeof(p), "%s-images-idx3-ubyte.gz", prefix), (int)sizeof(p));
  write_file(p, img, 16 + 4 * (size_t)n - cut, 1);
  ASSERT_LT(snprintf(p, sizeof(p), "%s-labels-idx1-ubyte.gz", prefix), (int)sizeof(p));
  write_file(p, lab, 8 + (size_t)nlabels, 1);
}

TEST(fashion_mnist_test_split) {
  data_set ds;
  char err[512] = "";
  ASSERT_OK(data_load(FMNIST, &IDX, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.n, 10000);
  ASSERT_EQ(ds.dim, 784);
  ASSERT_EQ(ds.shape[0], 28);
  ASSERT_EQ(ds.max_label, 9);
  float mn = 1, mx = 0;
  for (size_t k = 0; k < ds.n * 784; k++) {
    mn = fminf(mn, ds.x[k]);
    mx = fmaxf(mx, ds.x[k]);
  }
  ASSERT_EQ(mn, 0);
  ASSERT_EQ(mx, 1);
  /* The images file itself works as a spec too. */
  data_set d2;
  ASSERT_OK(data_load(FMNIST "-images-idx3-ubyte.gz", &IDX, DATA_SHARD_AUTO, 0, 1, &d2, err,
                      sizeof(err)));
  ASSERT_EQ(d2.n, 10000);
  ASSERT_EQ(memcmp(d2.y, ds.y, 10000 * sizeof(int32_t)), 0);
  data_free(&d2);
  data_free(&ds);
}

static void expect_data_err(const char *spec, data_file_format fmt, const char *n1,
                            const char *n2) {
  data_set ds;
  char err[512] = "";
  ASSERT_EQ(
      data_load(spec, &(data_format){.format = fmt}, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)),
      CTRAIN_E_DATA);
  ASSERT_STR_CONTAINS(err, n1);
  ASSERT_STR_CONTAINS(err, n2);
  ASSERT_NULL(ds.x);
}

TEST(idx_errors_name_the_file) {
  mk_tmp();
  char p[512];
  snprintf(p, sizeof(p), "%s/ok", tmpdir);
  tiny_idx(p, 5, 0, 8, 5);
  data_set ds;
  char err[512] = "";
  ASSERT_OK(data_load(p, &IDX, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.n, 5);
  ASSERT_EQ(ds.dim, 4);
  ASSERT_NEAR(ds.x[1], 17.0 / 255, 1e-7);
  data_free(&ds);
  snprintf(p, sizeof(p), "%s/magic", tmpdir);
  tiny_idx(p, 5, 0, 9, 5);
  expect_data_err(p, DATA_FMT_IDX, "magic-images-idx3-ubyte.gz", "bad IDX magic");
  snprintf(p, sizeof(p), "%s/trunc", tmpdir);
  tiny_idx(p, 5, 3, 8, 5);
  expect_data_err(p, DATA_FMT_IDX, "trunc-images-idx3-ubyte.gz", "truncated");
  snprintf(p, sizeof(p), "%s/count", tmpdir);
  tiny_idx(p, 5, 0, 8, 4);
  expect_data_err(p, DATA_FMT_IDX, "count-labels-idx1-ubyte.gz", "4 labels for 5 images");
  snprintf(p, sizeof(p), "%s/missing", tmpdir);
  expect_data_err(p, DATA_FMT_IDX, "missing", "no such IDX data");
  /* A raw file read as IDX, and IDX read as raw. */
  snprintf(p, sizeof(p), "%s/ok-images-idx3-ubyte.gz", tmpdir);
  expect_data_err(p, DATA_FMT_RAW, "ok-images-idx3-ubyte.gz", "bad magic");
}

/* An IDX pair whose images header claims dims d0 x d1 x d2 but holds only
 * `body` zero bytes of payload, with n labels. */
static void idx_header_only(const char *prefix, uint32_t d0, uint32_t d1, uint32_t d2, size_t body,
                            uint32_t nlabels) {
  uint8_t ih[16] = {0, 0, 8, 3}, lh[8 + 16] = {0, 0, 8, 1};
  const uint32_t d[3] = {d0, d1, d2};
  for (int i = 0; i < 3; i++)
    for (int b = 0; b < 4; b++)
      ih[4 + 4 * i + b] = (uint8_t)(d[i] >> (24 - 8 * b));
  for (int b = 0; b < 4; b++)
    lh[4 + b] = (uint8_t)(nlabels >> (24 - 8 * b));
  uint8_t *img = calloc(1, 16 + body);
  ASSERT_NOT_NULL(img);
  memcpy(img, ih, 16);
  char p[512];
  ASSERT_LT(snprintf(p, sizeof(p), "%s-images-idx3-ubyte.gz", prefix), (int)sizeof(p));
  write_file(p, img, 16 + body, 1);
  ASSERT_LT(snprintf(p, sizeof(p), "%s-labels-idx1-ubyte.gz", prefix), (int)sizeof(p));
  write_file(p, lh, 8 + (nlabels < 16 ? nlabels : 16), 1);
  free(img);
}

/* IDX dimensions were multiplied in 32 bits: [2, 65536,
 * 32768] passed the 4 GiB payload check (exactly 4 GiB), then 65536 x 32768
 * wrapped the int feature count to INT_MIN and the sample arrays to a huge
 * size: exit 70 (out of memory) instead of 65 after reading 4 GiB. Now the
 * per-sample product is checked against its cap, in 64 bits, before any
 * payload is read. */
TEST(idx_dimensions_do_not_wrap) {
  mk_tmp();
  char p[512];
  snprintf(p, sizeof(p), "%s/wrap", tmpdir);
  idx_header_only(p, 2, 65536, 32768, 0, 2);
  expect_data_err(p, DATA_FMT_IDX, "wrap-images-idx3-ubyte.gz",
                  "IDX dimensions 1..2: 2147483648 features per sample, more than 16777216");
  /* 65536 x 65536 wrapped to 0 features in 32 bits. */
  snprintf(p, sizeof(p), "%s/zero", tmpdir);
  idx_header_only(p, 1, 65536, 65536, 0, 1);
  expect_data_err(p, DATA_FMT_IDX, "zero-images-idx3-ubyte.gz",
                  "IDX dimensions 1..2: 4294967296 features per sample");
  snprintf(p, sizeof(p), "%s/side", tmpdir);
  idx_header_only(p, 1, 65537, 1, 0, 1);
  expect_data_err(p, DATA_FMT_IDX, "side-images-idx3-ubyte.gz",
                  "bad IDX dimension 1: 65537 (more than 65536)");
  snprintf(p, sizeof(p), "%s/payload", tmpdir);
  idx_header_only(p, 0xffffffffu, 64, 64, 0, 1);
  expect_data_err(p, DATA_FMT_IDX, "payload-images-idx3-ubyte.gz",
                  "IDX dimension 1 (64): payload over 4294967296 bytes");
}

/* The raw reader's per-record sizes go through the same checks. */
TEST(raw_dimensions_do_not_wrap) {
  mk_tmp();
  char p[512];
  uint8_t h[36] = "CTRAINR1";
  h[8] = 1;      /* n = 1 */
  h[20] = 3;     /* rank 3 */
  h[24 + 2] = 1; /* 65536 */
  h[28 + 2] = 1; /* 65536 */
  h[32] = 1;     /* 1 */
  snprintf(p, sizeof(p), "%s/wide.rec", tmpdir);
  write_file(p, h, sizeof(h), 0);
  expect_data_err(p, DATA_FMT_RAW, "wide.rec", "dimensions 0..1: more than 16777216 features");
  h[28 + 2] = 0;
  h[28] = 1; /* 65536 x 1 x 1 features, n = 2^40 records */
  h[8] = 0;
  h[13] = 1;
  write_file(p, h, sizeof(h), 0);
  expect_data_err(p, DATA_FMT_RAW, "wide.rec", "bad record count 1099511627776");
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#ifndef UNDER_ASAN
/* Virtual memory in use now, to set an address-space limit above it. */
static size_t vm_bytes(void) {
  unsigned long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fscanf(f, "%lu", &pages), 1);
  fclose(f);
  return (size_t)pages * (size_t)sysconf(_SC_PAGESIZE);
}
#endif

/* A header that claims 4 GiB (the cap) in a file of a few bytes used to
 * allocate all of it before reading: under a memory limit that is exit 70
 * (out of memory) for a file that is simply truncated (65). Buffers now grow
 * as bytes arrive. (ASan reserves its shadow as address space, so the limit
 * is only set without it; the messages are checked either way.) */
TEST(claimed_sizes_cost_no_memory) {
  mk_tmp();
  char p[512];
#ifndef UNDER_ASAN
  struct rlimit rl = {.rlim_cur = vm_bytes() + ((size_t)512 << 20),
                      .rlim_max = vm_bytes() + ((size_t)512 << 20)};
  ASSERT_OK(setrlimit(RLIMIT_AS, &rl));
#endif
  snprintf(p, sizeof(p), "%s/claim", tmpdir);
  idx_header_only(p, 65536, 256, 256, 1000, 65536);
  expect_data_err(p, DATA_FMT_IDX, "claim-images-idx3-ubyte.gz",
                  "truncated: IDX payload needs 4294967296 bytes, file has 1000");
  /* Raw: 2^32 - 1 records of 1 byte claimed, 3 present. */
  uint8_t h[28 + 15] = "CTRAINR1";
  memset(h + 8, 0xff, 4); /* n = 2^32 - 1 */
  h[20] = 1;              /* rank 1, dtype u8 */
  h[24] = 1;              /* 1 feature */
  snprintf(p, sizeof(p), "%s/claim.rec", tmpdir);
  write_file(p, h, sizeof(h), 0);
  expect_data_err(p, DATA_FMT_RAW, "claim.rec", "bad record count 4294967295");
  memset(h + 8, 0, 4);
  h[11] = 0x33; /* n = 0x33000000 records of 5 bytes: under the 4 GiB cap */
  write_file(p, h, sizeof(h), 0);
  expect_data_err(p, DATA_FMT_RAW, "claim.rec", "truncated: record 3");
}

TEST(raw_round_trip_and_file_sharding) {
  mk_tmp();
  data_set full, a, b;
  char err[512] = "", p1[512], p2[512], both[1100];
  ASSERT_OK(data_load(FMNIST, &IDX, DATA_SHARD_AUTO, 0, 1, &full, err, sizeof(err)));
  snprintf(p1, sizeof(p1), "%s/part0.rec", tmpdir);
  snprintf(p2, sizeof(p2), "%s/part1.rec", tmpdir);
  ASSERT_OK(data_write_raw(p1, &full, 0, 300, err, sizeof(err)));
  ASSERT_OK(data_write_raw(p2, &full, 300, 1000, err, sizeof(err)));
  snprintf(both, sizeof(both), "%s,%s", p1, p2);
  ASSERT_OK(data_load(both, &RAW, DATA_SHARD_OFF, 0, 1, &a, err, sizeof(err)));
  ASSERT_EQ(a.n, 1000);
  ASSERT_EQ(memcmp(a.x, full.x, 1000 * 784 * sizeof(float)), 0);
  ASSERT_EQ(memcmp(a.y, full.y, 1000 * sizeof(int32_t)), 0);
  data_free(&a);
  /* AUTO with 2 files for 2 workers: FILE; worker 1 reads only part1. */
  ASSERT_OK(data_load(both, &RAW, DATA_SHARD_AUTO, 1, 2, &b, err, sizeof(err)));
  ASSERT_EQ(b.policy, DATA_SHARD_FILE);
  ASSERT_EQ(b.n, 700);
  ASSERT_EQ(data_local_count(&b), 700);
  ASSERT_EQ(b.y[0], full.y[300]);
  data_free(&b);
  /* AUTO with 2 files for 3 workers: DATA, never an error. */
  ASSERT_OK(data_load(both, &RAW, DATA_SHARD_AUTO, 2, 3, &b, err, sizeof(err)));
  ASSERT_EQ(b.policy, DATA_SHARD_DATA);
  ASSERT_EQ(data_local_count(&b), 333);
  data_free(&b);
  /* FILE with too few files is a config error naming the policy. */
  ASSERT_EQ(data_load(p1, &RAW, DATA_SHARD_FILE, 0, 2, &b, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "--shard file");
  /* Truncated raw file. */
  FILE *f = fopen(p1, "r+");
  ASSERT_OK(ftruncate(fileno(f), 24 + 8 + 10 * 788 + 5));
  fclose(f);
  expect_data_err(p1, DATA_FMT_RAW, "part0.rec", "truncated: record 10");
  data_free(&full);
}

TEST(epoch_order_and_data_shards) {
  data_set ds;
  memset(&ds, 0, sizeof(ds));
  ds.n = 103;
  ds.shard_world = 1;
  uint32_t g[103], g2[103], s0[103], s1[103];
  ASSERT_EQ(data_epoch_order(&ds, 42, 0, 1, g), 103);
  ASSERT_EQ(data_epoch_order(&ds, 42, 0, 1, g2), 103);
  ASSERT_EQ(memcmp(g, g2, sizeof(g)), 0);
  ASSERT_EQ(data_epoch_order(&ds, 42, 1, 1, g2), 103);
  ASSERT(memcmp(g, g2, sizeof(g)) != 0);
  int seen[103] = {0};
  for (int i = 0; i < 103; i++)
    seen[g[i]]++;
  for (int i = 0; i < 103; i++)
    ASSERT_EQ(seen[i], 1);
  /* DATA shards of 2 workers interleave the global order: at step k with
   * per-worker batch B their union is global positions [2Bk, 2B(k+1)). */
  ds.shard_world = 2;
  ds.shard_rank = 0;
  ASSERT_EQ(data_epoch_order(&ds, 42, 0, 1, s0), 52);
  ds.shard_rank = 1;
  ASSERT_EQ(data_epoch_order(&ds, 42, 0, 1, s1), 51);
  for (int i = 0; i < 51; i++) {
    ASSERT_EQ(s0[i], g[2 * i]);
    ASSERT_EQ(s1[i], g[2 * i + 1]);
  }
}

TEST_MAIN(T(fashion_mnist_test_split), T(idx_errors_name_the_file), T(idx_dimensions_do_not_wrap),
          T(raw_dimensions_do_not_wrap), T(claimed_sizes_cost_no_memory),
          T(raw_round_trip_and_file_sharding), T(epoch_order_and_data_shards))
