/* test_tfrecord.c - TFRecord files written by real TensorFlow
 * (tests/unit/data/make_tfrecord_fixtures.py: tf.io.TFRecordWriter, plain,
 * GZIP and ZLIB) read to exactly the IDX samples; CRC32C; a corrupted,
 * truncated or mistyped record is CTRAIN_E_DATA naming the file and the
 * record's offset, and ctrain-worker exits 65 on it; files, directories and
 * globs; FILE and DATA sharding of TFRecord shards. */
#include "test.h"
#include "test_data_load.h"
#include "test_fs.h"

#include <sys/wait.h>

#include "worker/data/data.h"
#include "worker/data/tfrecord.h"

#define FIX    CTRAIN_SOURCE_DIR "/tests/unit/data/"
#define FMNIST "/usr/share/datasets/fashion-mnist/t10k"

static char tmpdir[256];

static void rm_tmp(void) {
  fs_rm_rf(tmpdir);
}

static void mk_tmp(void) {
  if (tmpdir[0])
    return;
  fs_make_dir(tmpdir, sizeof(tmpdir), "ctrain-test-tfrecord");
  atexit(rm_tmp);
}

/* TFRecord of 28x28 bytes images, the fixtures' layout. */
static data_format fmnist_fmt(void) {
  data_format f = {.format = DATA_FMT_AUTO, .image_rank = 2, .image_shape = {28, 28}};
  return f;
}

TEST(crc32c_known_values) {
  /* The CRC-32C check value, and RFC 3720's 32 bytes of zeros. */
  ASSERT_EQ(tfr_crc32c(0, "123456789", 9), 0xe3069283u);
  uint8_t z[32] = {0};
  ASSERT_EQ(tfr_crc32c(0, z, 32), 0x8a9136aau);
  ASSERT_EQ(tfr_crc32c(tfr_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
  /* The first record of the fixture: its stored length CRC. */
  uint8_t len8[8] = {0x36, 0x03, 0, 0, 0, 0, 0, 0}; /* 822 bytes */
  FILE *f = fopen(FIX "fmnist8.tfrecord", "rb");
  ASSERT_NOT_NULL(f);
  uint8_t hdr[12];
  ASSERT_EQ(fread(hdr, 1, 12, f), 12);
  fclose(f);
  ASSERT_EQ(memcmp(hdr, len8, 8), 0);
  uint32_t stored = hdr[8] | hdr[9] << 8 | hdr[10] << 16 | (uint32_t)hdr[11] << 24;
  ASSERT_EQ(tfr_masked_crc(len8, 8), stored);
}

TEST(names_choose_tfrecord) {
  ASSERT(tfr_name_matches("a/train-00000-of-00008.tfrecord"));
  ASSERT(tfr_name_matches("x.tfrecords"));
  ASSERT(tfr_name_matches("x.tfrecord.gz"));
  ASSERT(tfr_name_matches("x.tfrecords.zlib"));
  ASSERT(!tfr_name_matches("train-images-idx3-ubyte.gz"));
  ASSERT(!tfr_name_matches("x.tfrecord.bak"));
  ASSERT(!tfr_name_matches(".gz"));
}

/* Each fixture, plain, GZIP and ZLIB, is the first 8 t10k samples. */
TEST(real_tensorflow_files_equal_idx) {
  data_set idx, ds;
  char err[1024] = "";
  data_format fmt = fmnist_fmt();
  ASSERT_OK(data_load(FMNIST, &(data_format){.format = DATA_FMT_IDX}, DATA_SHARD_OFF, 0, 1, &idx,
                      err, sizeof(err)));
  const char *files[] = {FIX "fmnist8.tfrecord", FIX "fmnist8.tfrecord.gz",
                         FIX "fmnist8.tfrecord.zlib"};
  for (int i = 0; i < 3; i++) {
    ASSERT_OK(data_load(files[i], &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
    ASSERT_EQ(ds.format, DATA_FMT_TFRECORD);
    ASSERT_EQ(ds.n, 8);
    ASSERT_EQ(ds.dim, 784);
    ASSERT_EQ(ds.rank, 2);
    ASSERT_EQ(ds.shape[1], 28);
    ASSERT_EQ(memcmp(ds.x, idx.x, 8 * 784 * sizeof(float)), 0);
    ASSERT_EQ(memcmp(ds.y, idx.y, 8 * sizeof(int32_t)), 0);
    data_free(&ds);
  }
  /* The compression given explicitly; the wrong one is a data error. */
  fmt.compression = DATA_COMP_GZIP;
  ASSERT_OK(data_load(files[1], &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.n, 8);
  data_free(&ds);
  expect_data_err(files[2], &fmt, "fmnist8.tfrecord.zlib", "GZIP stream");
  fmt.compression = DATA_COMP_NONE;
  expect_data_err(files[1], &fmt, "fmnist8.tfrecord.gz", "record 0 at offset 0");
  data_free(&idx);
}

TEST(float_list_and_other_features) {
  data_set ds;
  char err[1024] = "";
  data_format fmt = {.format = DATA_FMT_TFRECORD, .feature_image = "x", .feature_label = "y"};
  ASSERT_OK(data_load(FIX "float3.tfrecord", &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.n, 3);
  ASSERT_EQ(ds.dim, 4);
  ASSERT_EQ(ds.rank, 1);
  ASSERT_EQ(ds.max_label, 2);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(ds.y[i], i);
    ASSERT_NEAR(ds.x[4 * i], i, 0);
    ASSERT_NEAR(ds.x[4 * i + 1], i + 0.5, 0);
    ASSERT_NEAR(ds.x[4 * i + 2], -1, 0);
    ASSERT_NEAR(ds.x[4 * i + 3], 2.25, 0);
  }
  data_free(&ds);
  /* A shape that does not match the list's length. */
  fmt.image_rank = 2;
  fmt.image_shape[0] = fmt.image_shape[1] = 2;
  ASSERT_OK(data_load(FIX "float3.tfrecord", &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.dim, 4);
  data_free(&ds);
  fmt.image_shape[1] = 3;
  expect_data_err(FIX "float3.tfrecord", &fmt, "record 0 at offset 0", "has 4 floats, expected 6");
  /* Missing and mistyped features name the flag. */
  fmt.image_rank = 0;
  fmt.feature_image = "pixels";
  expect_data_err(FIX "float3.tfrecord", &fmt, "float3.tfrecord: record 0",
                  "feature 'pixels' (--feature-image) is absent");
  fmt.feature_image = "name";
  expect_data_err(FIX "float3.tfrecord", &fmt, "float3.tfrecord: record 0",
                  "feature 'name' is a bytes_list: give its shape (--image-shape");
  fmt.feature_image = "x";
  fmt.feature_label = "w";
  expect_data_err(FIX "float3.tfrecord", &fmt, "record 0",
                  "feature 'w' (--feature-label) is an int64_list of 3 value(s)");
  fmt.feature_label = "x";
  expect_data_err(FIX "float3.tfrecord", &fmt, "record 0", "is a float_list of 4 value(s)");
}

/* Corrupt one byte: a length, a payload; cut the file. Offsets of the
 * fixture's records: 838 * k (822 bytes of Example each). */
TEST(corruption_names_file_and_offset) {
  mk_tmp();
  char p[512];
  data_format fmt = fmnist_fmt();
  snprintf(p, sizeof(p), "%s/bad.tfrecord", tmpdir);
  fs_copy_file(FIX "fmnist8.tfrecord", p);
  fs_flip_byte(p, 3 * 838 + 12 + 400); /* record 3's data */
  expect_data_err(p, &fmt, "bad.tfrecord: record 3 at offset 2514", "data CRC32C mismatch");
  fs_copy_file(FIX "fmnist8.tfrecord", p);
  fs_flip_byte(p, 2 * 838 + 1); /* record 2's length */
  expect_data_err(p, &fmt, "bad.tfrecord: record 2 at offset 1676", "length CRC32C mismatch");
  fs_copy_file(FIX "fmnist8.tfrecord", p);
  fs_flip_byte(p, 5 * 838 + 837); /* record 5's data CRC */
  expect_data_err(p, &fmt, "record 5 at offset 4190", "data CRC32C mismatch");
  fs_copy_file(FIX "fmnist8.tfrecord", p);
  ASSERT_OK(truncate(p, 7 * 838 + 100));
  expect_data_err(p, &fmt, "record 7 at offset 5866", "truncated record: 822 data bytes");
  ASSERT_OK(truncate(p, 7 * 838 + 5));
  expect_data_err(p, &fmt, "record 7 at offset 5866", "truncated record header (5 of 12 bytes)");
  /* Compressed: the offset is in the uncompressed stream. */
  snprintf(p, sizeof(p), "%s/bad.tfrecord.gz", tmpdir);
  fs_copy_file(FIX "fmnist8.tfrecord.gz", p);
  ASSERT_OK(truncate(p, 2000));
  expect_data_err(p, &fmt, "bad.tfrecord.gz", "truncated GZIP stream");
  fs_copy_file(FIX "fmnist8.tfrecord.gz", p);
  fs_flip_byte(p, 1500);
  expect_data_err(p, &fmt, "bad.tfrecord.gz", "GZIP stream");
  /* An empty file holds no samples. */
  snprintf(p, sizeof(p), "%s/empty.tfrecord", tmpdir);
  fs_put_file(p, "");
  expect_data_err(p, &fmt, "empty.tfrecord", "no samples");
}

/* The worker's documented exit code for bad data, with the message. */
TEST(worker_exits_65_on_a_bad_record) {
  mk_tmp();
  char p[512], cmd[2048], log[512];
  snprintf(p, sizeof(p), "%s/w.tfrecord", tmpdir);
  snprintf(log, sizeof(log), "%s/w.log", tmpdir);
  fs_copy_file(FIX "fmnist8.tfrecord", p);
  fs_flip_byte(p, 6 * 838 + 12 + 100);
  snprintf(cmd, sizeof(cmd),
           "env -u TF_CONFIG %s/worker/ctrain-worker train --model %s/examples/"
           "fashion-mnist-model.json --data %s --image-shape 28,28 --device cpu "
           "--termination-log '' >%s 2>&1",
           CTRAIN_BINARY_DIR, CTRAIN_SOURCE_DIR, p, log);
  int st = system(cmd);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 65);
  ASSERT_STR_CONTAINS(fs_slurp(log), "w.tfrecord: record 6 at offset 5028: corrupted record");
}

/* A directory, a glob and a list name the same 3 shards; FILE sharding
 * deals them round-robin, AUTO falls back to DATA with too few files. */
TEST(specs_and_sharding) {
  mk_tmp();
  char d[512], p[600], spec[2048], err[1024] = "";
  data_format fmt = fmnist_fmt();
  data_set ds;
  snprintf(d, sizeof(d), "%s/shards", tmpdir);
  ASSERT_OK(mkdir(d, 0755));
  const char *names[] = {"s-0.tfrecord", "s-1.tfrecord.gz", "s-2.tfrecord.zlib"};
  const char *src[] = {"fmnist8.tfrecord", "fmnist8.tfrecord.gz", "fmnist8.tfrecord.zlib"};
  for (int i = 0; i < 3; i++) {
    char s[512];
    snprintf(s, sizeof(s), "%s%s", FIX, src[i]);
    snprintf(p, sizeof(p), "%s/%s", d, names[i]);
    fs_copy_file(s, p);
  }
  snprintf(p, sizeof(p), "%s/.hidden", d);
  fs_put_file(p, "not data");
  ASSERT_OK(data_load(d, &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.n, 24);
  data_free(&ds);
  snprintf(spec, sizeof(spec), "%s/s-*", d);
  ASSERT_OK(data_load(spec, &fmt, DATA_SHARD_AUTO, 0, 2, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.policy, DATA_SHARD_FILE);
  ASSERT_EQ(ds.n, 16); /* s-0 and s-2 */
  ASSERT_EQ(data_local_count(&ds), 16);
  data_free(&ds);
  snprintf(spec, sizeof(spec), "%s/s-1.tfrecord.gz,%s/s-0.tfrecord", d, d);
  ASSERT_OK(data_load(spec, &fmt, DATA_SHARD_FILE, 1, 2, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.n, 8);
  data_free(&ds);
  ASSERT_OK(data_load(d, &fmt, DATA_SHARD_AUTO, 3, 4, &ds, err, sizeof(err)));
  ASSERT_EQ(ds.policy, DATA_SHARD_DATA);
  ASSERT_EQ(ds.n, 24);
  ASSERT_EQ(data_local_count(&ds), 6);
  data_free(&ds);
  ASSERT_EQ(data_load(d, &fmt, DATA_SHARD_FILE, 0, 4, &ds, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "--shard file: 3 data file(s) for 4 workers");
  snprintf(spec, sizeof(spec), "%s/none-*.tfrecord", d);
  expect_data_err(spec, &fmt, "none-*.tfrecord", "no file matches the pattern");
}

/* The CRC32C in use (the crc32 instruction where the CPU has one) against
 * the bitwise definition, every length 0..80 at every alignment 0..7, and a
 * long run: the fast path and the table agree with it. */
static uint32_t crc32c_bitwise(uint32_t crc, const uint8_t *p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; i++) {
    crc ^= p[i];
    for (int k = 0; k < 8; k++)
      crc = crc & 1 ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

TEST(crc32c_matches_the_bitwise_definition) {
  static uint8_t buf[8192];
  uint32_t seed = 12345;
  for (size_t i = 0; i < sizeof(buf); i++) {
    seed = seed * 1103515245u + 12345u;
    buf[i] = (uint8_t)(seed >> 16);
  }
  for (size_t off = 0; off < 8; off++)
    for (size_t n = 0; n <= 80; n++)
      ASSERT_EQ(tfr_crc32c(7u, buf + off, n), crc32c_bitwise(7u, buf + off, n));
  ASSERT_EQ(tfr_crc32c(0, buf + 3, sizeof(buf) - 3), crc32c_bitwise(0, buf + 3, sizeof(buf) - 3));
}

TEST_MAIN(T(crc32c_known_values), T(crc32c_matches_the_bitwise_definition),
          T(names_choose_tfrecord), T(real_tensorflow_files_equal_idx),
          T(float_list_and_other_features), T(corruption_names_file_and_offset),
          T(worker_exits_65_on_a_bad_record), T(specs_and_sharding))
