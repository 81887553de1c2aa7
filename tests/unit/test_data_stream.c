/* test_data_stream.c - the streaming reader (worker/data/stream.h) on local
 * TFRecord shards written here (tfrecord_writer.h): order, the shuffle buffer against a
 * reference simulation, the policies' partitions, the exact resume,
 * bounded memory, corruption, the cache, NumPy, data_stream_load. */
#include "test.h"
#include "test_fs.h"

#include <malloc.h>
#include <openssl/evp.h>
#include <sys/wait.h>

#include "ctrain/rng.h"
#include "tfrecord_writer.h"
#include "worker/data/data.h"
#include "worker/data/stream.h"
#include "worker/data/stream_impl.h"

#define FIX    CTRAIN_SOURCE_DIR "/tests/unit/data/"
#define DIM    4
#define MAXREC 8192

static char tmpdir[256];

static void rm_tmp(void) {
  fs_rm_rf(tmpdir);
}

static void mk_tmp(void) {
  fs_make_dir(tmpdir, sizeof(tmpdir), "ctrain_stream");
  atexit(rm_tmp);
}

/* The cache's file for uri (stream.h: DIR/<sha256 of the URI><ext>). */
static const char *fs_cache_path(const char *dir, const char *uri, const char *ext) {
  static char p[600];
  uint8_t d[32];
  unsigned n = 0;
  EVP_Digest(uri, strlen(uri), d, &n, EVP_sha256(), NULL);
  int at = snprintf(p, sizeof(p), "%s/", dir);
  for (int i = 0; i < 32; i++)
    at += snprintf(p + at, sizeof(p) - (size_t)at, "%02x", d[i]);
  snprintf(p + at, sizeof(p) - (size_t)at, "%s", ext);
  return p;
}

/* ---- Shards (the writer: tfrecord_writer.h) ---- */

/* The Example of record `id` with `dim` floats id*100+j, label id. */
static size_t example_of(uint8_t *p, uint32_t id, int dim) {
  float fl[256];
  ASSERT(dim <= 256);
  for (int j = 0; j < dim; j++)
    fl[j] = (float)id * 100.0f + (float)j;
  return tfw_example(p, fl, dim, id, 0, 0);
}

/* Frames records [first, first+n) with ids first.. into buf. */
static size_t frame_records(uint8_t *buf, uint32_t first, uint32_t n, int dim) {
  size_t at = 0;
  uint8_t *ex = malloc(tfw_example_bound(dim, 0));
  ASSERT_NOT_NULL(ex);
  for (uint32_t i = 0; i < n; i++)
    at += tfw_frame(buf + at, ex, example_of(ex, first + i, dim), 0);
  free(ex);
  return at;
}

/* Writes a shard: comp 0 none, 1 GZIP, 2 ZLIB. */
static void write_shard(const char *path, uint32_t first, uint32_t n, int comp, int dim) {
  size_t cap = (size_t)n * (64 + 4 * (size_t)dim) + 64;
  uint8_t *buf = malloc(cap), *z = NULL;
  ASSERT_NOT_NULL(buf);
  size_t len = frame_records(buf, first, n, dim), zl = 0;
  if (comp)
    z = tfw_compress(buf, len, comp == 1 ? TFW_GZIP : TFW_ZLIB, 6, &zl);
  FILE *f = fopen(path, "wb");
  ASSERT_NOT_NULL(f);
  ASSERT_EQ(fwrite(z ? z : buf, 1, z ? zl : len, f), z ? zl : len);
  ASSERT_OK(fclose(f));
  free(z);
  free(buf);
}

/* nfiles shards of sizes per[i] (ids consecutive), compressions cycling
 * none/GZIP/ZLIB when mixed; the spec (the directory) in spec. */
static uint32_t make_shards(int nfiles, const uint32_t *per, int mixed, int dim, char *spec,
                            size_t n) {
  uint32_t id = 0;
  for (int i = 0; i < nfiles; i++) {
    char p[512];
    int comp = mixed ? i % 3 : 0;
    snprintf(p, sizeof(p), "%s/shard-%02d.tfrecord%s", tmpdir, i,
             comp == 1   ? ".gz"
             : comp == 2 ? ".zlib"
                         : "");
    write_shard(p, id, per[i], comp, dim);
    id += per[i];
  }
  snprintf(spec, n, "%s", tmpdir); /* the directory */
  return id;
}

static data_stream_options opts(const char *spec) {
  data_stream_options o = {.spec = spec,
                           .flag = "--data",
                           .policy = DATA_SHARD_AUTO,
                           .world = 1,
                           .seed = 7,
                           .shuffle = 1,
                           .shuffle_buffer = 16,
                           .prefetch_bytes = 1 << 14};
  o.fmt.format = DATA_FMT_AUTO;
  return o;
}

/* A whole epoch (from skip) into y (and x when given: count x dim). */
static uint64_t run_epoch(data_stream *s, int epoch, uint64_t skip, int32_t *y, float *x) {
  char err[1024] = "";
  uint64_t n = data_stream_count(s) - skip;
  float *xs = x ? x : malloc((size_t)(n + 1) * DIM * sizeof(float));
  ASSERT_NOT_NULL(xs);
  if (data_stream_begin(s, epoch, skip, err, sizeof(err)))
    TEST_FAIL_("begin: %s", err);
  /* in uneven pieces, as batches */
  for (uint64_t at = 0, k = 1; at < n; at += k, k = k % 5 + 1) {
    size_t m = (size_t)(n - at < k ? n - at : k);
    if (data_stream_next(s, m, xs + at * DIM, y + at, err, sizeof(err)))
      TEST_FAIL_("next: %s", err);
  }
  for (uint64_t i = 0; i < n; i++)
    for (int j = 0; j < DIM; j++)
      ASSERT(xs[i * DIM + j] == (float)y[i] * 100.0f + (float)j);
  ASSERT_EQ(data_stream_next(s, 1, xs, y, err, sizeof(err)), CTRAIN_E_INVAL);
  if (!x)
    free(xs);
  data_stream_end(s);
  return n;
}

static data_stream *open_ok(const data_stream_options *o) {
  data_stream *s = NULL;
  char err[1024] = "";
  if (data_stream_open(o, &s, err, sizeof(err)))
    TEST_FAIL_("open: %s", err);
  return s;
}

static const uint32_t PER[7] = {13, 7, 20, 1, 9, 15, 11}; /* 76 records */

TEST(natural_order_every_compression) {
  char spec[512];
  int32_t y[128];
  mk_tmp();
  uint32_t total = make_shards(7, PER, 1, DIM, spec, sizeof(spec));
  data_stream_options o = opts(spec);
  o.shuffle = 0;
  data_stream *s = open_ok(&o);
  ASSERT_EQ(data_stream_count(s), total);
  data_set d;
  data_stream_describe(s, &d);
  ASSERT_EQ(d.dim, DIM);
  ASSERT_EQ(d.max_label, total - 1);
  ASSERT_EQ(d.format, DATA_FMT_TFRECORD);
  ASSERT_NULL(d.x);
  ASSERT_EQ(run_epoch(s, 0, 0, y, NULL), total);
  for (uint32_t i = 0; i < total; i++)
    ASSERT_EQ(y[i], i);
  ASSERT(data_stream_budget_bytes(s) >= (size_t)(1 << 14));
  data_stream_free(s);
}

TEST(seeded_and_deterministic) {
  char spec[512];
  int32_t a[128], b[128], c[128];
  mk_tmp();
  uint32_t total = make_shards(7, PER, 1, DIM, spec, sizeof(spec));
  data_stream_options o = opts(spec);
  data_stream *s = open_ok(&o), *t = open_ok(&o);
  run_epoch(s, 0, 0, a, NULL);
  run_epoch(t, 0, 0, b, NULL);
  ASSERT_OK(memcmp(a, b, total * sizeof(int32_t)));
  run_epoch(t, 1, 0, c, NULL);
  ASSERT(memcmp(a, c, total * sizeof(int32_t)));
  o.seed = 8;
  data_stream *u = open_ok(&o);
  run_epoch(u, 0, 0, c, NULL);
  ASSERT(memcmp(a, c, total * sizeof(int32_t)));
  /* every record once */
  uint8_t seen[128] = {0};
  for (uint32_t i = 0; i < total; i++)
    seen[a[i]]++;
  for (uint32_t i = 0; i < total; i++)
    ASSERT_EQ(seen[i], 1);
  data_stream_free(s);
  data_stream_free(t);
  data_stream_free(u);
}

/* tf.data's Dataset.shuffle on `in` (n ids) with a buffer of S. */
static void reference_shuffle(const int32_t *in, size_t n, size_t S, uint64_t seed, int epoch,
                              int32_t *out) {
  int32_t buf[128];
  rng_t r;
  stream_buffer_rng(&r, seed, epoch, 0);
  size_t size = S < n ? S : n, next = size;
  memcpy(buf, in, size * sizeof(int32_t));
  for (size_t d = 0; d < n; d++) {
    size_t j = (size_t)rng_below(&r, size);
    out[d] = buf[j];
    if (next < n)
      buf[j] = in[next++];
    else
      buf[j] = buf[--size];
  }
}

TEST(shuffle_buffer_is_tf_data) {
  char spec[512];
  int32_t in[128], got[128], want[128];
  mk_tmp();
  uint32_t total = make_shards(7, PER, 1, DIM, spec, sizeof(spec));
  for (int epoch = 0; epoch < 2; epoch++) {
    size_t sizes[] = {2, 16, 75, 500};
    data_stream_options o = opts(spec);
    o.shuffle_buffer = 1; /* the input order: the epoch's file order */
    data_stream *s = open_ok(&o);
    run_epoch(s, epoch, 0, in, NULL);
    data_stream_free(s);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
      o.shuffle_buffer = sizes[k];
      s = open_ok(&o);
      run_epoch(s, epoch, 0, got, NULL);
      reference_shuffle(in, total, sizes[k], o.seed, epoch, want);
      ASSERT_OK(memcmp(got, want, total * sizeof(int32_t)));
      data_stream_free(s);
    }
  }
}

/* The workers' epochs under `policy`: each record once in all (OFF: every
 * worker has all). */
static void check_partition(const char *spec, data_shard_policy policy, int world, uint32_t total) {
  int seen[128] = {0};
  int32_t y[128];
  uint64_t sum = 0;
  for (int r = 0; r < world; r++) {
    data_stream_options o = opts(spec);
    o.policy = policy;
    o.rank = r;
    o.world = world;
    data_stream *s = open_ok(&o);
    uint64_t n = run_epoch(s, 1, 0, y, NULL);
    ASSERT_EQ(n, data_stream_count(s));
    sum += n;
    for (uint64_t i = 0; i < n; i++)
      seen[y[i]]++;
    data_stream_free(s);
  }
  ASSERT_EQ(sum, policy == DATA_SHARD_OFF ? (uint64_t)total * (uint64_t)world : total);
  for (uint32_t i = 0; i < total; i++)
    ASSERT_EQ(seen[i], policy == DATA_SHARD_OFF ? world : 1);
}

TEST(policies_partition) {
  char spec[512], err[1024] = "";
  mk_tmp();
  uint32_t total = make_shards(7, PER, 1, DIM, spec, sizeof(spec));
  check_partition(spec, DATA_SHARD_FILE, 3, total);
  check_partition(spec, DATA_SHARD_DATA, 3, total);
  check_partition(spec, DATA_SHARD_OFF, 3, total);
  check_partition(spec, DATA_SHARD_AUTO, 7, total); /* FILE: one file each */
  check_partition(spec, DATA_SHARD_AUTO, 9, total); /* DATA: fewer files */
  data_stream_options o = opts(spec);
  data_stream *s = NULL;
  o.policy = DATA_SHARD_FILE;
  o.world = 8;
  ASSERT_EQ(data_stream_open(&o, &s, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "--shard file: 7 data file(s) for 8 workers");
  ASSERT_NULL(s);
}

/* begin(epoch, skip) continues exactly as the unbroken epoch. */
static void check_resume(const char *spec, size_t S, data_shard_policy policy) {
  int32_t full[128], y[128];
  float fx[128 * DIM], x[128 * DIM];
  data_stream_options o = opts(spec);
  o.shuffle_buffer = S;
  o.policy = policy;
  o.world = policy == DATA_SHARD_DATA ? 2 : 1;
  data_stream *s = open_ok(&o);
  uint64_t n = data_stream_count(s);
  for (int epoch = 0; epoch < 2; epoch++) {
    uint64_t skips[] = {0, 1, S ? S - 1 : 2, S, S + 1, n / 2, n - 1, n};
    run_epoch(s, epoch, 0, full, fx);
    for (size_t k = 0; k < sizeof(skips) / sizeof(skips[0]); k++) {
      uint64_t skip = skips[k] < n ? skips[k] : n;
      run_epoch(s, epoch, skip, y, x);
      ASSERT_OK(memcmp(y, full + skip, (n - skip) * sizeof(int32_t)));
      ASSERT_OK(memcmp(x, fx + skip * DIM, (n - skip) * DIM * sizeof(float)));
    }
  }
  char err[256];
  ASSERT_EQ(data_stream_begin(s, 0, n + 1, err, sizeof(err)), CTRAIN_E_INVAL);
  data_stream_free(s);
}

TEST(exact_resume) {
  char spec[512];
  mk_tmp();
  make_shards(7, PER, 1, DIM, spec, sizeof(spec));
  check_resume(spec, 16, DATA_SHARD_AUTO);
  check_resume(spec, 5, DATA_SHARD_DATA);
  check_resume(spec, 0, DATA_SHARD_AUTO);
  check_resume(spec, 1000, DATA_SHARD_AUTO);
}

/* Bytes in use from malloc, all threads (one arena); 0 under a sanitizer. */
static size_t heap_in_use(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

TEST(bounded_memory) {
  char spec[512], err[1024] = "";
  uint32_t per[4] = {1500, 1500, 1500, 1500};
  int dim = 256;
  mallopt(M_ARENA_MAX, 1);
  mk_tmp();
  make_shards(4, per, 0, dim, spec, sizeof(spec));
  size_t data_bytes = 6000 * (size_t)dim * sizeof(float);
  size_t base = heap_in_use(), peak = 0;
  data_stream_options o = opts(spec);
  o.prefetch_bytes = 64 << 10;
  o.shuffle_buffer = 64;
  data_stream *s = open_ok(&o);
  float *x = malloc((size_t)dim * sizeof(float));
  int32_t y;
  ASSERT_NOT_NULL(x);
  size_t budget = data_stream_budget_bytes(s);
  ASSERT_LT(budget * 8, data_bytes);
  for (int epoch = 0; epoch < 2; epoch++) {
    ASSERT_OK(data_stream_begin(s, epoch, epoch ? 3000 : 0, err, sizeof(err)));
    for (uint64_t i = epoch ? 3000 : 0; i < data_stream_count(s); i++) {
      ASSERT_OK(data_stream_next(s, 1, x, &y, err, sizeof(err)));
      ASSERT(x[1] == (float)y * 100.0f + 1.0f);
      size_t now = heap_in_use();
      peak = now > peak ? now : peak;
    }
    data_stream_end(s);
  }
  ASSERT_LE(data_stream_peak_bytes(s), (size_t)(64 << 10));
  ASSERT_GT(data_stream_peak_bytes(s), 0);
  printf("# heap growth %zu, budget %zu, read-ahead peak %zu, data %zu bytes\n",
         peak > base ? peak - base : 0, budget, data_stream_peak_bytes(s), data_bytes);
  if (peak > base) /* glibc's heap (a sanitizer's allocator shows nothing here) */
    ASSERT_LE(peak - base, budget + (16 << 10)); /* the file list, the threads' own */
  free(x);
  data_stream_free(s);
}

/* Flips a byte of record `k`'s data in a plain shard of DIM floats. */
static void corrupt(const char *path, int k) {
  uint8_t buf[MAXREC];
  FILE *f = fopen(path, "r+b");
  ASSERT_NOT_NULL(f);
  size_t n = fread(buf, 1, sizeof(buf), f), at = 0;
  for (int i = 0; i < k; i++)
    at += 16 + (size_t)buf[at]; /* lengths < 256 here */
  ASSERT_LT(at + 20, n);
  buf[at + 14] ^= 0x40;
  ASSERT_OK(fseek(f, 0, SEEK_SET));
  ASSERT_EQ(fwrite(buf, 1, n, f), n);
  ASSERT_OK(fclose(f));
}

TEST(corrupt_record_names_file_record_offset) {
  char spec[512], err[1024] = "", p[600];
  uint32_t per[5] = {6, 6, 6, 6, 6};
  int32_t y[64];
  float x[64 * DIM];
  mk_tmp();
  make_shards(5, per, 0, DIM, spec, sizeof(spec));
  snprintf(p, sizeof(p), "%s/shard-03.tfrecord", tmpdir);
  data_stream_options o = opts(spec);
  o.shuffle = 0;
  data_stream *s = open_ok(&o);
  corrupt(p, 2); /* after the index pass: the decoder finds it */
  ASSERT_OK(data_stream_begin(s, 0, 0, err, sizeof(err)));
  ASSERT_OK(data_stream_next(s, 18, x, y, err, sizeof(err))); /* shards 0-2 */
  ASSERT_OK(data_stream_next(s, 2, x, y, err, sizeof(err)));  /* records 0, 1 of shard 3 */
  ASSERT_EQ(data_stream_next(s, 1, x, y, err, sizeof(err)), CTRAIN_E_DATA);
  ASSERT_STR_CONTAINS(err, "shard-03.tfrecord: record 2 at offset");
  ASSERT_STR_CONTAINS(err, "data CRC32C mismatch");
  data_stream_free(s);
  s = NULL;
  ASSERT_EQ(data_stream_open(&o, &s, err, sizeof(err)), CTRAIN_E_DATA); /* the index pass */
  ASSERT_STR_CONTAINS(err, "shard-03.tfrecord: record 2 at offset");
  ASSERT_NULL(s);
}

static uint8_t bytes[100000];

/* Fills the entry of uri in another process (this one then verifies it). */
static void fill_elsewhere(const char *dir, const char *uri, const char *etag) {
  char err[1024] = "";
  int st = 0;
  pid_t pid = fork();
  if (pid == 0) {
    stream_cache_fill *cf = NULL;
    _exit(stream_cache_begin(dir, uri, &cf, err, sizeof(err)) ||
          stream_cache_write(cf, bytes, 60000, err, sizeof(err)) ||
          stream_cache_write(cf, bytes + 60000, sizeof(bytes) - 60000, err, sizeof(err)) ||
          stream_cache_end(cf, 1, (int64_t)sizeof(bytes), etag, err, sizeof(err)));
  }
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_EQ(st, 0);
}

TEST(cache_fill_reuse_and_bad_entries) {
  char dir[400], err[1024] = "", uri[64], *path = NULL;
  const char *etag = "\"abc\"";
  int64_t size = (int64_t)sizeof(bytes);
  for (size_t i = 0; i < sizeof(bytes); i++)
    bytes[i] = (uint8_t)(i * 7);
  mk_tmp();
  snprintf(dir, sizeof(dir), "%s/cache", tmpdir);
  for (int round = 0; round < 5; round++) {
    snprintf(uri, sizeof(uri), "s3://bucket/train/shard-%d.tfrecord", round);
    fill_elsewhere(dir, uri, etag);
    ASSERT_OK(stream_cache_lookup(dir, uri, size, "\"other\"", &path, err, sizeof(err)));
    ASSERT_NULL(path); /* another ETag: not this object, removed */
    ASSERT_OK(stream_cache_lookup(dir, uri, size, etag, &path, err, sizeof(err)));
    ASSERT_NULL(path);
    fill_elsewhere(dir, uri, etag);
    if (round == 1) { /* truncated: a partial entry */
      ASSERT_OK(truncate(fs_cache_path(dir, uri, ".data"), 5000));
    } else if (round == 2) { /* same size, other bytes: the SHA-256 */
      FILE *f = fopen(fs_cache_path(dir, uri, ".data"), "r+b");
      ASSERT_NOT_NULL(f);
      fputc(0xee ^ bytes[0], f);
      ASSERT_OK(fclose(f));
    } else if (round == 3) { /* data without its sidecar (killed between renames) */
      ASSERT_OK(unlink(fs_cache_path(dir, uri, ".meta")));
    } else if (round == 4) { /* another size listed */
      size = 99999;
    }
    ASSERT_OK(stream_cache_lookup(dir, uri, size, etag, &path, err, sizeof(err)));
    if (round == 0) {
      ASSERT_NOT_NULL(path);
      ASSERT_STR_EQ(path, fs_cache_path(dir, uri, ".data"));
      free(path);
      path = NULL; /* reused: verified once, found again */
      ASSERT_OK(stream_cache_lookup(dir, uri, size, etag, &path, err, sizeof(err)));
      ASSERT_NOT_NULL(path);
    } else {
      ASSERT_NULL(path); /* detected and removed */
      ASSERT(access(fs_cache_path(dir, uri, ".data"), F_OK) != 0);
      ASSERT(access(fs_cache_path(dir, uri, ".meta"), F_OK) != 0);
    }
    free(path);
    path = NULL;
  }
  /* an aborted fill leaves nothing */
  stream_cache_fill *cf = NULL;
  ASSERT_OK(stream_cache_begin(dir, "s3://b/x", &cf, err, sizeof(err)));
  ASSERT_OK(stream_cache_write(cf, bytes, 10, err, sizeof(err)));
  ASSERT_OK(stream_cache_end(cf, 0, 10, "", err, sizeof(err)));
  ASSERT_OK(stream_cache_lookup(dir, "s3://b/x", 10, "", &path, err, sizeof(err)));
  ASSERT_NULL(path);
}

TEST(numpy_and_load_match_data_load) {
  char err[1024] = "", spec[512];
  data_set a, b;
  data_format fmt = {.format = DATA_FMT_AUTO};
  data_stream_options o = opts(FIX "fmnist8.npz," FIX "fmnist8_deflated.npz");
  o.shuffle = 0;
  ASSERT_OK(data_stream_load(&o, &a, err, sizeof(err)));
  ASSERT_OK(data_load(o.spec, &fmt, DATA_SHARD_DATA, 0, 1, &b, err, sizeof(err)));
  ASSERT_EQ(a.n, b.n);
  ASSERT_EQ(a.dim, b.dim);
  ASSERT_EQ(a.format, DATA_FMT_NUMPY);
  ASSERT_OK(memcmp(a.x, b.x, a.n * (size_t)a.dim * sizeof(float)));
  ASSERT_OK(memcmp(a.y, b.y, a.n * sizeof(int32_t)));
  data_free(&a);
  data_free(&b);
  /* TFRecord, a DATA shard of 2 */
  mk_tmp();
  uint32_t total = make_shards(7, PER, 1, DIM, spec, sizeof(spec));
  o = opts(spec);
  o.rank = 1;
  o.world = 2;
  ASSERT_OK(data_stream_load(&o, &a, err, sizeof(err)));
  ASSERT_OK(data_load(spec, &fmt, DATA_SHARD_DATA, 1, 2, &b, err, sizeof(err)));
  ASSERT_EQ(a.n, total);
  ASSERT_EQ(data_local_count(&a), data_local_count(&b));
  ASSERT_EQ(a.shard_rank, 1);
  ASSERT_OK(memcmp(a.x, b.x, a.n * (size_t)a.dim * sizeof(float)));
  ASSERT_OK(memcmp(a.y, b.y, a.n * sizeof(int32_t)));
  data_free(&a);
  data_free(&b);
}

TEST(identity_and_uri_specs) {
  char spec[512], p[600];
  uint8_t a[32], b[32], c[32];
  ASSERT(data_spec_has_uri("a.tfrecord,s3://b/k/"));
  ASSERT(data_spec_has_uri("gs://b/x-*.tfrecord"));
  ASSERT(!data_spec_has_uri("/data/s3://x,train/"));
  mk_tmp();
  make_shards(7, PER, 1, DIM, spec, sizeof(spec));
  data_stream_options o = opts(spec);
  data_stream *s = open_ok(&o), *t = open_ok(&o);
  data_stream_identity(s, a);
  data_stream_identity(t, b);
  ASSERT_OK(memcmp(a, b, 32));
  data_stream_free(t);
  snprintf(p, sizeof(p), "%s/shard-03.tfrecord", tmpdir);
  write_shard(p, 0, 2, 0, DIM); /* another file's content */
  t = open_ok(&o);
  data_stream_identity(t, c);
  ASSERT(memcmp(a, c, 32));
  data_stream_free(t);
  o.shuffle_buffer = 17;
  t = open_ok(&o);
  data_stream_identity(t, c);
  ASSERT(memcmp(a, c, 32));
  data_stream_free(t);
  data_stream_free(s);
}

/* An epoch left half drawn, with its queues full: end, a new begin and
 * free stop and join the threads. */
TEST(stop_mid_epoch) {
  char spec[512], err[1024] = "";
  uint32_t per[3] = {400, 400, 400};
  int32_t y[8];
  float x[8 * DIM];
  mk_tmp();
  make_shards(3, per, 1, DIM, spec, sizeof(spec));
  data_stream_options o = opts(spec);
  o.prefetch_bytes = 8 << 10;
  data_stream *s = open_ok(&o);
  for (int round = 0; round < 20; round++) {
    ASSERT_OK(data_stream_begin(s, round % 3, (uint64_t)round * 37, err, sizeof(err)));
    ASSERT_OK(data_stream_next(s, (size_t)(round % 8) + 1, x, y, err, sizeof(err)));
    for (int i = 0; i <= round % 8; i++)
      ASSERT(x[i * DIM] == (float)y[i] * 100.0f);
    if (round % 2)
      data_stream_end(s);
  }
  data_stream_end(s);
  data_stream_end(s);
  ASSERT_EQ(data_stream_next(s, 1, x, y, err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_OK(data_stream_begin(s, 0, 0, err, sizeof(err)));
  data_stream_free(s); /* mid-epoch */
}

TEST_MAIN(T(stop_mid_epoch), T(natural_order_every_compression), T(seeded_and_deterministic),
          T(shuffle_buffer_is_tf_data), T(policies_partition), T(exact_resume), T(bounded_memory),
          T(corrupt_record_names_file_record_offset), T(cache_fill_reuse_and_bad_entries),
          T(numpy_and_load_match_data_load), T(identity_and_uri_specs))
