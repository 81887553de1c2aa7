/* test_numpy.c - .npz (numpy.savez stored, numpy.savez_compressed deflated)
 * and .npy pairs written by real NumPy (tests/unit/data/make_numpy_fixtures.py)
 * read to exactly the IDX samples; dtypes, byte order and names; corrupted,
 * truncated and mistyped arrays are CTRAIN_E_DATA naming the file. */
#include "test.h"
#include "test_data_load.h"
#include "test_fs.h"

#include "worker/data/data.h"
#include "worker/data/numpy.h"

#define FIX    CTRAIN_SOURCE_DIR "/tests/unit/data/"
#define FMNIST "/usr/share/datasets/fashion-mnist/t10k"

static char tmpdir[256];

static void rm_tmp(void) {
  fs_rm_rf(tmpdir);
}

static void mk_tmp(void) {
  if (tmpdir[0])
    return;
  fs_make_dir(tmpdir, sizeof(tmpdir), "ctrain-test-numpy");
  atexit(rm_tmp);
}

TEST(names) {
  data_format f = {.format = DATA_FMT_NUMPY};
  ASSERT(npy_name_matches("a/b.npz"));
  ASSERT(npy_name_matches("x_train.npy"));
  ASSERT(!npy_name_matches("x.npy.gz"));
  char a[] = "d/x_train.npy", b[] = "d/y_train.npy", c[] = "d/y_test.npy", d[] = "e/xy.npz";
  char *names[4] = {strdup(a), strdup(b), strdup(c), strdup(d)};
  int n = 4;
  npy_drop_partners(names, &n, &f);
  ASSERT_EQ(n, 3); /* y_train.npy goes with x_train.npy; y_test.npy has no images */
  ASSERT_STR_EQ(names[0], a);
  ASSERT_STR_EQ(names[1], c);
  ASSERT_STR_EQ(names[2], d);
  for (int i = 0; i < n; i++)
    free(names[i]);
}

/* Stored, deflated and the .npy pair are the first 8 t10k samples. */
TEST(real_numpy_files_equal_idx) {
  data_set idx, ds;
  char err[1024] = "";
  data_format fmt = {.format = DATA_FMT_AUTO};
  ASSERT_OK(data_load(FMNIST, &(data_format){.format = DATA_FMT_IDX}, DATA_SHARD_OFF, 0, 1, &idx,
                      err, sizeof(err)));
  const char *files[] = {FIX "fmnist8.npz", FIX "fmnist8_deflated.npz", FIX "x_fmnist8.npy"};
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(data_load(files[i], &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
    ASSERT_EQ(ds.format, DATA_FMT_NUMPY);
    ASSERT_EQ(ds.n, 8);
    ASSERT_EQ(ds.dim, 784);
    ASSERT_EQ(ds.rank, 2);
    ASSERT_EQ(ds.shape[0], 28);
    ASSERT_EQ(memcmp(ds.x, idx.x, 8 * 784 * sizeof(float)), 0);
    ASSERT_EQ(memcmp(ds.y, idx.y, 8 * sizeof(int32_t)), 0);
    data_free(&ds);
  }
  /* A glob of the .npy pair counts one data file; --image-shape reshapes. */
  fmt.image_rank = 1;
  fmt.image_shape[0] = 784;
  ASSERT_OK(data_load(FIX "?_fmnist8.npy", &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.n, 8);
  ASSERT_EQ(ds.rank, 1);
  data_free(&ds);
  fmt.image_shape[0] = 783;
  expect_data_err(FIX "fmnist8.npz", &fmt, "fmnist8.npz: x.npy", "784 features per sample");
  data_free(&idx);
}

/* float64 big-endian features and int16 (n, 1) labels under other names. */
TEST(dtypes_and_names) {
  data_set ds;
  char err[1024] = "";
  data_format fmt = {.format = DATA_FMT_NUMPY, .feature_image = "feats", .feature_label = "target"};
  ASSERT_OK(data_load(FIX "feats3.npz", &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.n, 3);
  ASSERT_EQ(ds.dim, 4);
  ASSERT_EQ(ds.max_label, 2);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(ds.y[i], i);
    ASSERT_NEAR(ds.x[4 * i], i, 0);
    ASSERT_NEAR(ds.x[4 * i + 1], i + 0.5, 0);
    ASSERT_NEAR(ds.x[4 * i + 3], 2.25, 0);
  }
  data_free(&ds);
  fmt.feature_label = "labels";
  expect_data_err(FIX "feats3.npz", &fmt, "feats3.npz", "no array 'labels' in the archive");
  fmt.feature_label = "feats";
  expect_data_err(FIX "feats3.npz", &fmt, "feats3.npz: feats.npy", "labels must be integers");
}

TEST(corruption_names_the_file) {
  mk_tmp();
  char p[512], q[512];
  data_format fmt = {.format = DATA_FMT_AUTO};
  snprintf(p, sizeof(p), "%s/bad.npz", tmpdir);
  fs_copy_file(FIX "fmnist8.npz", p);
  fs_flip_byte(p, 3000); /* x.npy's pixels: stored, so the member's CRC-32 */
  expect_data_err(p, &fmt, "bad.npz: member x.npy", "CRC-32 mismatch");
  fs_copy_file(FIX "fmnist8_deflated.npz", p);
  fs_flip_byte(p, 1000);
  expect_data_err(p, &fmt, "bad.npz: member x.npy", "");
  fs_copy_file(FIX "fmnist8_deflated.npz", p);
  ASSERT_OK(truncate(p, 3000));
  expect_data_err(p, &fmt, "bad.npz", "not a .npz (no ZIP end of central directory)");
  snprintf(p, sizeof(p), "%s/x_cut.npy", tmpdir);
  snprintf(q, sizeof(q), "%s/y_cut.npy", tmpdir);
  fs_copy_file(FIX "x_fmnist8.npy", p);
  fs_copy_file(FIX "y_fmnist8.npy", q);
  ASSERT_OK(truncate(p, 6000));
  expect_data_err(p, &fmt, "x_cut.npy", "truncated: the array needs 6272 bytes, the file has 5872");
  fs_copy_file(FIX "x_fmnist8.npy", p);
  fs_flip_byte(p, 0);
  expect_data_err(p, &fmt, "x_cut.npy", "not a .npy array");
  unlink(q);
  fs_copy_file(FIX "x_fmnist8.npy", p);
  expect_data_err(p, &fmt, "y_cut.npy", "cannot open");
  snprintf(p, sizeof(p), "%s/images.npy", tmpdir);
  fs_copy_file(FIX "x_fmnist8.npy", p);
  expect_data_err(p, &(data_format){.format = DATA_FMT_NUMPY, .feature_image = "pics"},
                  "images.npy", "does not contain 'pics' (--feature-image)");
}

TEST_MAIN(T(names), T(real_numpy_files_equal_idx), T(dtypes_and_names),
          T(corruption_names_the_file))
