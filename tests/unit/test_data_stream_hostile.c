/* test_data_stream_hostile.c - the streaming data reader (worker/data/
 * stream.h) against a hostile S3 server (s3_fake_server.h): a bucket of
 * GZIP TFRecord shards written with tfrecord_writer.h, three small ones
 * and one larger than a ranged GET (DATA_STREAM_CHUNK), so a fault can
 * land in the middle of a shard.
 *
 * A 503, a short body or a reset in the middle of a shard, while the
 * records are counted (data_stream_open) or read (an epoch), is retried:
 * the records equal a healthy server's, none skipped or twice. A shard
 * that stays unreadable is CTRAIN_E_NET (exit 75) naming the object and the
 * byte offset; a bad CRC is CTRAIN_E_DATA naming the object, the record's
 * index and offset; an object replaced between two ranges is CTRAIN_E_DATA
 * "changed while being read"; an endless body, a drip, a redirect and an
 * endless listing end within a generous bound, naming the bucket. With a
 * cache, later epochs send no GET, and an entry truncated between two
 * processes is detected and fetched again. Each test prints a "figure:"
 * line. */
#include "test.h"
#include "test_fs.h"

#include <curl/curl.h>
#include <zlib.h>

#include "ctrain/clock.h"
#include "ctrain/err.h"
#include "ctrain/s3.h"
#include "s3_fake_server.h"
#include "tfrecord_writer.h"
#include "worker/data/stream.h"

#define DIM     4
#define NSMALL  3 /* small shards, SMALL_N records each */
#define SMALL_N 40
#define BIG_N   90 /* the big shard's records, each padded to pass DATA_STREAM_CHUNK */
#define TOTAL   (NSMALL * SMALL_N + BIG_N)
#define BIG     "train-0003.tfrecord.gz"

/* ---- the shards (the writer: tfrecord_writer.h) ------------------------- */

/* The Example of record `id`: image = {id, id + .25, id + .5, id + .75},
 * label = id % 7, and `pad` bytes of noise in a feature nobody reads. */
static size_t example(uint8_t *out, int id, size_t pad) {
  float x[DIM];
  for (int j = 0; j < DIM; j++)
    x[j] = (float)id + 0.25f * (float)j;
  return tfw_example(out, x, DIM, id % 7, pad, (uint32_t)id);
}

/* A GZIP TFRecord shard of records first..first+n-1 into *out (malloc'd).
 * bad_crc >= 0: that record's data CRC is wrong. *reclen: one record's
 * framed bytes (all are the same size). */
static size_t shard(int first, int n, size_t pad, int bad_crc, uint8_t **out, size_t *reclen) {
  size_t cap = (size_t)n * (tfw_example_bound(DIM, pad) + TFW_FRAME_OVERHEAD), len = 0, zlen;
  uint8_t *raw = malloc(cap), *ex = malloc(tfw_example_bound(DIM, pad));
  ASSERT(raw && ex);
  for (int i = 0; i < n; i++) {
    *reclen = tfw_frame(raw + len, ex, example(ex, first + i, pad), i == bad_crc);
    len += *reclen;
  }
  *out = tfw_compress(raw, len, TFW_GZIP, Z_BEST_SPEED, &zlen);
  free(raw);
  free(ex);
  return zlen;
}

static void add_shard(fake *f, int k, int bad_crc, size_t *reclen) {
  char name[64];
  uint8_t *d;
  size_t rl = 0;
  snprintf(name, sizeof(name), "train-%04d.tfrecord.gz", k);
  int big = k == NSMALL;
  size_t pad = big ? DATA_STREAM_CHUNK / BIG_N * 11 / 10 : 0;
  size_t len = shard(k * SMALL_N, big ? BIG_N : SMALL_N, pad, bad_crc, &d, &rl);
  fake_put_object(f, name, d, len);
  free(d);
  if (reclen)
    *reclen = rl;
}

/* ---- the bucket, the reader ---------------------------------------------- */

typedef struct env {
  fake f;
  char ep[64];
  s3_options s3;
  data_stream_options o;
} env;

static void opts(env *e, const char *cache_dir) {
  fake_endpoint(&e->f, e->ep, sizeof(e->ep));
  memset(&e->s3, 0, sizeof(e->s3));
  e->s3.uri = "s3://" FAKE_BUCKET "/" FAKE_PREFIX;
  e->s3.endpoint = e->ep;
  e->s3.region = "us-east-1";
  e->s3.max_attempts = 3;
  e->s3.backoff_base_ms = 5;
  e->s3.backoff_max_ms = 50;
  e->s3.connect_timeout_s = 5;
  e->s3.stall_timeout_s = 2;
  e->s3.rolling_min_bytes_per_s = 64 << 10;
  e->s3.rolling_window_s = 1;
  e->s3.list_max_bytes = (size_t)4 << 20;
  e->s3.list_max_pages = 200;
  memset(&e->o, 0, sizeof(e->o));
  e->o.spec = "s3://" FAKE_BUCKET "/" FAKE_PREFIX "/";
  e->o.flag = "--data";
  e->o.fmt.format = DATA_FMT_TFRECORD;
  e->o.policy = DATA_SHARD_OFF;
  e->o.world = 1;
  e->o.seed = 7;
  e->o.prefetch_bytes = 4 * DATA_STREAM_CHUNK;
  e->o.cache_dir = cache_dir;
  e->o.s3 = &e->s3;
}

/* The bucket of NSMALL small shards and the big one (the victim), served
 * by get_mode on the victim's GETs after_ok .. after_ok + times. */
static void bucket(env *e, int get_mode, int after_ok, int times) {
  memset(e, 0, sizeof(*e));
  curl_global_init(CURL_GLOBAL_DEFAULT);
  for (int k = 0; k <= NSMALL; k++)
    add_shard(&e->f, k, -1, NULL);
  snprintf(e->f.victim, sizeof(e->f.victim), "%s", BIG);
  e->f.get_mode = get_mode;
  e->f.fault_after = after_ok;
  e->f.fault_times = times;
  e->f.retry_after = "0";
  fake_start(&e->f);
  fake_env_keys();
  opts(e, NULL);
}

/* What one read of the data gave. */
typedef struct run {
  ctrain_err err;
  double secs;
  size_t n; /* records read */
  float x[TOTAL * DIM];
  int32_t y[TOTAL];
  int victim_gets_open; /* the victim's GETs once data_stream_open returned */
  char msg[2048];
} run;

/* Reads the epochs [0, epochs) of s into r (the last epoch's records). */
static void read_epochs(data_stream *s, int epochs, run *r) {
  for (int ep = 0; ep < epochs && !r->err; ep++) {
    r->n = 0;
    r->err = data_stream_begin(s, ep, 0, r->msg, sizeof(r->msg));
    uint64_t count = data_stream_count(s);
    while (!r->err && r->n < count) {
      size_t b = count - r->n < 8 ? (size_t)(count - r->n) : 8;
      ASSERT_LE(r->n + b, TOTAL);
      r->err = data_stream_next(s, b, r->x + r->n * DIM, r->y + r->n, r->msg, sizeof(r->msg));
      if (!r->err)
        r->n += b;
    }
    data_stream_end(s);
  }
}

/* One process's read: open, `epochs` epochs, free. */
static void read_all(env *e, int epochs, run *r) {
  memset(r, 0, sizeof(*r));
  data_stream *s = NULL;
  double t0 = ctrain_mono_s();
  r->err = data_stream_open(&e->o, &s, r->msg, sizeof(r->msg));
  fake_obj *v = fake_find(&e->f, BIG);
  r->victim_gets_open = v ? v->n_get : 0;
  if (!r->err) {
    ASSERT_EQ(data_stream_count(s), TOTAL);
    read_epochs(s, epochs, r);
  }
  r->secs = ctrain_mono_s() - t0;
  data_stream_free(s);
}

/* The records are the ones written, in key order (no shuffle), each once. */
static void assert_every_record_once(const run *r) {
  ASSERT_OK(r->err);
  ASSERT_EQ(r->n, TOTAL);
  for (int i = 0; i < TOTAL; i++) {
    for (int j = 0; j < DIM; j++)
      ASSERT_NEAR(r->x[i * DIM + j], (float)i + 0.25f * (float)j, 0);
    ASSERT_EQ(r->y[i], i % 7);
  }
}

static void figure(const char *what, const env *e, const run *r) {
  fprintf(stderr,
          "figure: %s: %s (exit %d) in %.2f s, %zu records; %d GET (%d ranged, %d faulty, %d "
          "refused on If-Match), %d LIST, %lld body bytes sent%s%s\n",
          what, r->err ? ctrain_strerror(r->err) : "complete", ctrain_exit_for_err(r->err), r->secs,
          r->n, e->f.n_get, e->f.n_range, e->f.n_faults, e->f.n_412, e->f.n_list,
          (long long)e->f.sent, r->err ? "; message: " : "", r->err ? r->msg : "");
}

/* The victim's GETs of a healthy read: while counting (open), and all. */
static void healthy(run *r, int *gets_open, int *gets_all) {
  env e;
  bucket(&e, GET_OK, 0, 0);
  read_all(&e, 1, r);
  figure("healthy server", &e, r);
  assert_every_record_once(r);
  *gets_open = r->victim_gets_open;
  *gets_all = fake_find(&e.f, BIG)->n_get;
  ASSERT_GE(*gets_open, 2); /* the big shard takes two ranges at least */
  ASSERT_GE(*gets_all - *gets_open, 2);
  fake_stop(&e.f);
}

/* ---- (a) transient faults are retried, nothing skipped or twice ---------- */

static run g_good, g_bad;

static void retried(int mode, const char *what) {
  int gets_open = 0, gets_all = 0;
  healthy(&g_good, &gets_open, &gets_all);
  /* The victim's second range while counting, then while reading. */
  const int at[2] = {1, gets_open + 1};
  for (int i = 0; i < 2; i++) {
    env e;
    char label[128];
    bucket(&e, mode, at[i], 1);
    read_all(&e, 1, &g_bad);
    snprintf(label, sizeof(label), "%s on the big shard's GET %d (%s)", what, at[i] + 1,
             i ? "reading" : "counting");
    figure(label, &e, &g_bad);
    assert_every_record_once(&g_bad);
    ASSERT_EQ(memcmp(g_bad.x, g_good.x, sizeof(g_good.x)), 0);
    ASSERT_EQ(memcmp(g_bad.y, g_good.y, sizeof(g_good.y)), 0);
    ASSERT_EQ(e.f.n_faults, 1);                           /* it did happen */
    ASSERT_EQ(fake_find(&e.f, BIG)->n_get, gets_all + 1); /* the one range again */
    fake_stop(&e.f);
  }
}

TEST(a_503_mid_shard_is_retried) {
  retried(GET_503, "503");
}

TEST(a_short_body_mid_shard_is_retried) {
  retried(GET_SHORT, "short body");
}

TEST(a_reset_mid_shard_is_retried) {
  retried(GET_RESET, "reset mid-body");
}

/* ---- (b) a shard that stays unreadable ----------------------------------- */

TEST(b_unreadable_shard_is_retryable_naming_object_and_offset) {
  int gets_open = 0, gets_all = 0;
  healthy(&g_good, &gets_open, &gets_all);
  env e;
  char want[64];
  /* Every GET of the big shard from its second range on, while reading. */
  bucket(&e, GET_503, gets_open + 1, 0);
  read_all(&e, 1, &g_bad);
  figure("503 for good from the big shard's second range", &e, &g_bad);
  ASSERT_EQ(g_bad.err, CTRAIN_E_NET);
  ASSERT_EQ(ctrain_exit_for_err(g_bad.err), CTRAIN_EXIT_TEMPFAIL);
  ASSERT_STR_CONTAINS(g_bad.msg, "s3://" FAKE_BUCKET "/" FAKE_PREFIX "/" BIG);
  snprintf(want, sizeof(want), "%zu", DATA_STREAM_CHUNK);
  ASSERT_STR_CONTAINS(g_bad.msg, want);
  ASSERT_STR_CONTAINS(g_bad.msg, "HTTP 503");
  ASSERT_EQ(e.f.n_faults, e.s3.max_attempts); /* retried, then given up */
  ASSERT_LT(g_bad.n, TOTAL);
  fake_stop(&e.f);
}

/* ---- (c) a corrupt record ------------------------------------------------ */

TEST(c_bad_crc_is_data_error_naming_object_record_offset) {
  env e;
  size_t reclen = 0;
  char want[128];
  memset(&e, 0, sizeof(e));
  curl_global_init(CURL_GLOBAL_DEFAULT);
  for (int k = 0; k <= NSMALL; k++)
    add_shard(&e.f, k, k == 1 ? 5 : -1, k == 1 ? &reclen : NULL);
  fake_start(&e.f);
  fake_env_keys();
  opts(&e, NULL);
  read_all(&e, 1, &g_bad);
  figure("bad data CRC in record 5 of shard 1", &e, &g_bad);
  ASSERT_EQ(g_bad.err, CTRAIN_E_DATA);
  ASSERT_EQ(ctrain_exit_for_err(g_bad.err), CTRAIN_EXIT_DATAERR);
  ASSERT_STR_CONTAINS(g_bad.msg, "s3://" FAKE_BUCKET "/" FAKE_PREFIX "/train-0001.tfrecord.gz");
  snprintf(want, sizeof(want), "record 5 at offset %zu", 5 * reclen);
  ASSERT_STR_CONTAINS(g_bad.msg, want);
  fake_stop(&e.f);
}

/* ---- (d) every misbehaviour ends, bounded -------------------------------- */

static void bounded(int get_mode, int list_mode, const char *what, int exit_code, const char *why) {
  env e;
  bucket(&e, get_mode, 0, 0);
  e.f.list_mode = list_mode;
  read_all(&e, 1, &g_bad);
  figure(what, &e, &g_bad);
  ASSERT_NE(g_bad.err, CTRAIN_OK);
  ASSERT_EQ(ctrain_exit_for_err(g_bad.err), exit_code);
  ASSERT_STR_CONTAINS(g_bad.msg, "s3://" FAKE_BUCKET);
  ASSERT_STR_CONTAINS(g_bad.msg, why);
  ASSERT_LT(g_bad.secs, 20.0); /* a generous bound: each ends in seconds */
  ASSERT_LE(e.f.n_list, e.s3.list_max_pages);
  fake_stop(&e.f);
}

TEST(d_endless_range_body_is_bounded) {
  bounded(GET_ENDLESS, LIST_OK, "endless body on a range", CTRAIN_EXIT_TEMPFAIL,
          "answer too large");
}

TEST(d_dripped_range_is_bounded) {
  bounded(GET_DRIP, LIST_OK, "range dripped at 1500 B/s", CTRAIN_EXIT_TEMPFAIL, BIG);
}

/* A redirect is not followed: the client's verdict on any 3xx is a
 * configuration that cannot work (s3_proto.c), not retried. */
TEST(d_redirect_301_is_not_followed) {
  bounded(GET_REDIRECT_301, LIST_OK, "301 on a range", CTRAIN_EXIT_CONFIG, "301");
}

TEST(d_redirect_307_is_not_followed) {
  bounded(GET_REDIRECT_307, LIST_OK, "307 on a range", CTRAIN_EXIT_CONFIG, "307");
}

TEST(d_endless_listing_is_bounded) {
  bounded(GET_OK, LIST_LOOP, "listing repeating its token", CTRAIN_EXIT_TEMPFAIL, "does not end");
  bounded(GET_OK, LIST_NEW_TOKEN, "listing of empty pages", CTRAIN_EXIT_TEMPFAIL, "does not end");
}

/* ---- (e) an object replaced mid-read -------------------------------------- */

TEST(e_object_replaced_between_ranges_is_data_error) {
  int gets_open = 0, gets_all = 0;
  healthy(&g_good, &gets_open, &gets_all);
  for (int i = 0; i < 2; i++) { /* while counting, then while reading */
    env e;
    bucket(&e, GET_REPLACE, i ? gets_open + 1 : 1, 1);
    read_all(&e, 1, &g_bad);
    figure(i ? "replaced before the second range, reading"
             : "replaced before the second range, "
               "counting",
           &e, &g_bad);
    ASSERT_EQ(g_bad.err, CTRAIN_E_DATA);
    ASSERT_STR_CONTAINS(g_bad.msg, "s3://" FAKE_BUCKET "/" FAKE_PREFIX "/" BIG);
    ASSERT_STR_CONTAINS(g_bad.msg, "changed while being read");
    ASSERT_EQ(e.f.n_replaced, 1);
    ASSERT_GE(e.f.n_412, 1);
    ASSERT_LT(g_bad.n, TOTAL);
    fake_stop(&e.f);
  }
}

/* ---- (f) the cache ------------------------------------------------------- */

/* The cache entries (*.data) in dir: how many, the first's path in p. */
static int cache_entries(const char *dir, char *p, size_t len) {
  DIR *d = opendir(dir);
  struct dirent *de;
  int n = 0;
  ASSERT_NOT_NULL(d);
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l > 5 && !strcmp(de->d_name + l - 5, ".data") && n++ == 0)
      snprintf(p, len, "%s/%s", dir, de->d_name);
  }
  closedir(d);
  return n;
}

/* The first run, in a process of its own (a worker before a restart):
 * forked before the server's thread starts, it learns the port from the
 * pipe, then counts and reads two epochs, filling the cache. */
static pid_t first_run(const char *dir, int *wfd) {
  int p[2];
  ASSERT_OK(pipe(p));
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid) {
    close(p[0]);
    *wfd = p[1];
    return pid;
  }
  close(p[1]);
  env e;
  memset(&e, 0, sizeof(e));
  ASSERT_EQ(read(p[0], &e.f.port, sizeof(e.f.port)), (ssize_t)sizeof(e.f.port));
  curl_global_init(CURL_GLOBAL_DEFAULT);
  fake_env_keys();
  opts(&e, dir);
  read_all(&e, 2, &g_bad);
  if (g_bad.err)
    fprintf(stderr, "first run: %s\n", g_bad.msg);
  assert_every_record_once(&g_bad);
  _exit(0);
}

TEST(f_cache_serves_later_epochs_and_refetches_a_truncated_entry) {
  char dir[256], entry[4096];
  fs_make_dir(dir, sizeof(dir), "ctrain-stream-cache");
  int wfd = -1, st = 0;
  pid_t pid = first_run(dir, &wfd);
  env e;
  memset(&e, 0, sizeof(e));
  for (int k = 0; k <= NSMALL; k++)
    add_shard(&e.f, k, -1, NULL);
  fake_start(&e.f);
  fake_env_keys();
  ASSERT_EQ(write(wfd, &e.f.port, sizeof(e.f.port)), (ssize_t)sizeof(e.f.port));
  close(wfd);
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  int gets_first = e.f.n_get;
  long long sent_first = e.f.sent;
  ASSERT_EQ(cache_entries(dir, entry, sizeof(entry)), NSMALL + 1);
  /* Each object read from the store once: the second epoch read none. */
  for (int k = 0; k <= NSMALL; k++) {
    fake_obj *o = &e.f.objs[k];
    ASSERT_GE(o->n_get, 1);
    ASSERT_LE(o->n_get, (int)((o->len + DATA_STREAM_CHUNK - 1) / DATA_STREAM_CHUNK));
  }
  fprintf(stderr, "figure: first run, 2 epochs with a cache: %d GET, %lld body bytes sent\n",
          gets_first, sent_first);
  /* Between the runs an entry loses its last byte. */
  struct stat sb;
  ASSERT_OK(stat(entry, &sb));
  ASSERT_OK(truncate(entry, sb.st_size - 1));
  int per_obj[NSMALL + 1];
  for (int k = 0; k <= NSMALL; k++)
    per_obj[k] = e.f.objs[k].n_get;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  opts(&e, dir);
  data_stream *s = NULL;
  run *r = &g_bad;
  memset(r, 0, sizeof(*r));
  ASSERT_OK(data_stream_open(&e.o, &s, r->msg, sizeof(r->msg)));
  int refetched = 0, gets_open = e.f.n_get;
  long long sent_open = e.f.sent;
  for (int k = 0; k <= NSMALL; k++)
    refetched += e.f.objs[k].n_get != per_obj[k];
  read_epochs(s, 2, r);
  data_stream_free(s);
  fprintf(stderr,
          "figure: second run, an entry truncated: %d object(s) fetched again (%d GET, %lld body "
          "bytes) while counting, then 2 epochs: %d GET, %lld body bytes sent\n",
          refetched, gets_open - gets_first, sent_open - sent_first, e.f.n_get - gets_open,
          (long long)e.f.sent - sent_open);
  assert_every_record_once(r);
  ASSERT_EQ(refetched, 1);         /* the truncated one, and only it */
  ASSERT_EQ(e.f.n_get, gets_open); /* the epochs read the cache alone */
  ASSERT_EQ(e.f.sent, sent_open);
  ASSERT_EQ(cache_entries(dir, entry, sizeof(entry)), NSMALL + 1);
  fake_stop(&e.f);
  fs_rm_rf(dir);
}

TEST_MAIN(T(a_503_mid_shard_is_retried), T(a_short_body_mid_shard_is_retried),
          T(a_reset_mid_shard_is_retried),
          T(b_unreadable_shard_is_retryable_naming_object_and_offset),
          T(c_bad_crc_is_data_error_naming_object_record_offset),
          T(d_endless_range_body_is_bounded), T(d_dripped_range_is_bounded),
          T(d_redirect_301_is_not_followed), T(d_redirect_307_is_not_followed),
          T(d_endless_listing_is_bounded), T(e_object_replaced_between_ranges_is_data_error),
          T(f_cache_serves_later_epochs_and_refetches_a_truncated_entry))
