/* test_s3_hostile.c - the S3 client and the object-store backup store
 * against a hostile server: a scripted HTTP/1.1 server on loopback
 * (s3_fake_server.h, the library ctrain_test_s3) that holds a small bucket
 * (two backups) and misbehaves on demand. It cuts a GET short
 * (close-delimited, no checksum), drips it, never ends it, lies in its
 * checksum, answers Retry-After: 100000, loops a listing forever, answers
 * with 300 KB of headers or a 40 MiB listing, puts a forged log line in an
 * error <Message>, declares a 1 GB body and drips it, or reads an upload at
 * 1500 B/s. Every restore must either resume from a backup that verifies or
 * stop with a retryable exit (75) naming the bucket and the cause, and the
 * bucket keeps every backup: no DELETE of a backup unless a whole copy of
 * it was made first. Limits are small (s3_options) so each test takes a
 * second or two; wall-clock assertions are generous bounds only. Each test
 * prints a "figure:" line. */
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "ctrain/clock.h"
#include "ctrain/err.h"
#include "ctrain/log.h"
#include "ctrain/s3.h"
#include "s3_fake_server.h"
#include "worker/checkpoint/ckpt.h"
#include "worker/checkpoint/ckpt_store.h"
#include "worker/checkpoint/ckpt_store_s3.h"

#define BUCKET FAKE_BUCKET
#define NP     1000

static float g_params[NP], g_state[2 * NP];
static uint64_t g_ranks[CKPT_RANK_WORDS];

/* Adds backup-<step>.ckpt, a real backup image, to the bucket. */
static void add_backup(fake *f, uint64_t step) {
  ckpt_state s;
  memset(&s, 0, sizeof(s));
  s.global_step = step;
  s.world = 1;
  s.replicas = 1;
  s.optim_kind = 1;
  s.optim_slots = 2;
  s.n_params = NP;
  for (int i = 0; i < NP; i++)
    g_params[i] = (float)i + (float)step;
  s.per_rank = g_ranks;
  s.params = g_params;
  s.optim_state = g_state;
  char path[] = "/tmp/ctrain-hostile-XXXXXX", err[512];
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  unlink(path);
  ASSERT_OK(ckpt_write_fd(fd, "test", &s, NULL, err, sizeof(err)));
  char name[CKPT_NAME_BYTES];
  ckpt_backup_name(step, name);
  size_t len = (size_t)lseek(fd, 0, SEEK_END);
  unsigned char *data = malloc(len);
  ASSERT_NOT_NULL(data);
  ASSERT_EQ(pread(fd, data, len, 0), (long long)len);
  close(fd);
  fake_put_object(f, name, data, len);
  free(data);
}

/* Small limits, so that a test takes a second or two. */
static s3_options small_opts(const fake *f, char *endpoint, size_t len) {
  fake_endpoint(f, endpoint, len);
  s3_options o;
  memset(&o, 0, sizeof(o));
  o.uri = "s3://" BUCKET "/p";
  o.endpoint = endpoint;
  o.region = "us-east-1";
  o.max_attempts = 3;
  o.backoff_base_ms = 5;
  o.backoff_max_ms = 50;
  o.connect_timeout_s = 5;
  o.stall_timeout_s = 1;
#ifndef HOSTILE_OLD_API /* to show each test failing against the code before these limits */
  o.min_rate_bytes_per_s = 256 << 10;
  o.list_max_bytes = (size_t)4 << 20;
  o.list_max_pages = 200;
#endif
  return o;
}

/* A bucket with backups 100 and 200; the newest (200) is the victim. */
static void bucket_of_two(fake *f, int get_mode) {
  memset(f, 0, sizeof(*f));
  add_backup(f, 100);
  add_backup(f, 200);
  ckpt_backup_name(200, f->victim);
  f->get_mode = get_mode;
  f->retry_after = "1";
  fake_start(f);
  fake_env_keys();
}

typedef struct outcome {
  ctrain_err err;
  int exit_code;
  double seconds;
  uint64_t step; /* restored */
  char msg[2048], path[1200];
  char log[16384]; /* what the restore logged */
} outcome;

/* The waits the restore logged before retrying a request: how many, each
 * line also holding `why` (NULL: any), the longest in *max_ms. */
static int logged_retries(const outcome *r, const char *why, long *max_ms) {
  int n = 0;
  *max_ms = -1;
  for (const char *p = r->log; (p = strstr(p, "retrying in ")); p++) {
    const char *bol = p;
    while (bol > r->log && bol[-1] != '\n')
      bol--;
    long ms = -1;
    ASSERT_EQ(sscanf(p, "retrying in %ld ms", &ms), 1);
    if (why) {
      char line[2048];
      size_t len = (size_t)(p - bol) < sizeof(line) - 1 ? (size_t)(p - bol) : sizeof(line) - 1;
      memcpy(line, bol, len);
      line[len] = '\0';
      if (!strstr(line, why))
        TEST_FAIL_("a retry not for %s: %s", why, line);
    }
    if (ms > *max_ms)
      *max_ms = ms;
    n++;
  }
  return n;
}

static outcome restore(fake *f, s3_options *o) {
  outcome out;
  memset(&out, 0, sizeof(out));
  ckpt_store *s = NULL;
  char err[1024];
  ASSERT_OK(ckpt_store_open_s3(o, &s, err, sizeof(err)));
  ckpt_state st;
  FILE *lf = tmpfile();
  ASSERT_NOT_NULL(lf);
  ctrain_log_set_stream(lf);
  double t0 = ctrain_mono_s();
  out.err = ckpt_store_restore_latest(s, &st, out.path, sizeof(out.path), out.msg, sizeof(out.msg));
  out.seconds = ctrain_mono_s() - t0;
  ctrain_log_set_stream(NULL);
  rewind(lf);
  size_t n = fread(out.log, 1, sizeof(out.log) - 1, lf);
  out.log[n] = '\0';
  fclose(lf);
  fputs(out.log, stderr);
  out.exit_code = ctrain_exit_for_err(out.err);
  if (!out.err) {
    out.step = st.global_step;
    ckpt_state_free(&st);
  }
  ckpt_store_free(s);
  (void)f;
  return out;
}

/* Both backups are still in the bucket, byte for byte. */
static void assert_bucket_keeps_both(fake *f) {
  ASSERT_EQ(f->n_delete, 0);
  char n1[CKPT_NAME_BYTES], n2[CKPT_NAME_BYTES];
  ckpt_backup_name(100, n1);
  ckpt_backup_name(200, n2);
  ASSERT_NOT_NULL(fake_find(f, n1));
  ASSERT_NOT_NULL(fake_find(f, n2));
}

static void figure(const char *what, fake *f, const outcome *r) {
  fprintf(stderr,
          "figure: %s: restore %s (exit %d) in %.2f s; %d GET, %d LIST, %d DELETE, %d copy; %lld "
          "body bytes sent; message: %s\n",
          what, r->err ? ctrain_strerror(r->err) : "resumed", r->err ? r->exit_code : 0, r->seconds,
          f->n_get, f->n_list, f->n_delete, f->n_copy, (long long)f->sent,
          r->err ? r->msg : r->path);
}

/* ---- a read that went wrong is never damage -------------------------------- */

TEST(truncated_get_is_retried_then_75_and_nothing_deleted) {
  fake f;
  char ep[64];
  bucket_of_two(&f, GET_TRUNCATE);
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure("truncating server", &f, &r);
  ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
  ASSERT_STR_CONTAINS(r.msg, "s3://" BUCKET "/p/backup-00000000000000000200.ckpt");
  ASSERT_STR_CONTAINS(r.msg, "short answer");
  ASSERT_STR_CONTAINS(r.msg, "(3 attempts)");
  ASSERT_EQ(f.n_get, 3); /* retried, and the older backup not tried: the read failed, not it */
  assert_bucket_keeps_both(&f);
  ASSERT_EQ(f.n_copy, 0);
  fake_stop(&f);
}

/* Damage seen in a whole object is quarantined (copied aside, then
 * deleted), and the restore falls back to the previous backup. */
static void damaged_is_quarantined(int mode, const char *what, const char *why) {
  fake f;
  char ep[64];
  bucket_of_two(&f, mode);
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure(what, &f, &r);
  ASSERT_OK(r.err);
  ASSERT_EQ(r.step, 100);
  ASSERT_EQ(f.n_copy, 1);
  ASSERT_EQ(f.deleted_uncopied, 0);
  char n2[CKPT_NAME_BYTES];
  ckpt_backup_name(200, n2);
  ASSERT_NULL(fake_find(&f, n2));
  int kept = 0;
  for (int i = 0; i < f.nobj; i++)
    kept += !strncmp(f.objs[i].name, n2, strlen(n2)) && strstr(f.objs[i].name, ".corrupt-");
  ASSERT_EQ(kept, 1);
  (void)why;
  fake_stop(&f);
}

TEST(checksum_mismatch_is_quarantined_never_deleted) {
  damaged_is_quarantined(GET_BAD_SUM, "lying checksum", "ChecksumMismatch");
}

TEST(damaged_backup_is_quarantined_never_deleted) {
  damaged_is_quarantined(GET_FLIPPED, "flipped byte", "SHA-256");
}

/* ---- every wait capped, every loop bounded ------------------------------ */

TEST(retry_after_is_capped) {
  const char *values[] = {"100000", "9223372036854775807", "-5", "Wed, 21 Oct 2099 07:28:00 GMT"};
  for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
    fake f;
    char ep[64];
    bucket_of_two(&f, GET_RETRY_503);
    f.retry_after = values[i];
    s3_options o = small_opts(&f, ep, sizeof(ep));
    outcome r = restore(&f, &o);
    figure("Retry-After", &f, &r);
    ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
    ASSERT_STR_CONTAINS(r.msg, "HTTP 503 SlowDown");
    ASSERT_EQ(f.n_get, 3);
    /* Two waits, each capped at backoff_max_ms (50 ms) whatever the header
     * asked: the waits as the client logged them (it sleeps what it logs),
     * not the total time, which a loaded machine stretches. */
    long max_ms = 0;
    ASSERT_EQ(logged_retries(&r, "HTTP 503 SlowDown", &max_ms), 2);
    ASSERT_GE(max_ms, 0);
    ASSERT_LE(max_ms, o.backoff_max_ms);
    assert_bucket_keeps_both(&f);
    fake_stop(&f);
  }
}

static void list_never_ends(int mode, const char *what, const char *why) {
  fake f;
  char ep[64];
  bucket_of_two(&f, GET_OK);
  f.list_mode = mode;
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure(what, &f, &r);
  ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
  ASSERT_STR_CONTAINS(r.msg, "s3://" BUCKET "/p");
  ASSERT_STR_CONTAINS(r.msg, why);
  ASSERT_LE(f.n_list, 200);
  assert_bucket_keeps_both(&f);
  fake_stop(&f);
}

TEST(list_repeating_its_token_is_bounded) {
  list_never_ends(LIST_LOOP, "listing loop, same token", "the same continuation twice");
}

TEST(list_of_empty_pages_is_bounded) {
  list_never_ends(LIST_NEW_TOKEN, "listing loop, empty pages", "without an entry");
}

TEST(dripped_get_times_out) {
  fake f;
  char ep[64];
  bucket_of_two(&f, GET_DRIP);
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure("dripping server (1500 B/s)", &f, &r);
  ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
  /* Whichever fires first on a loaded machine: the total deadline or curl's
   * low-speed limit; both end the transfer and name it. */
  ASSERT(strstr(r.msg, "deadline") || strstr(r.msg, "too slow"));
  ASSERT_STR_CONTAINS(r.msg, "s3://" BUCKET "/p/backup-00000000000000000200.ckpt");
  ASSERT_EQ(f.n_get, 3);
  /* 3 attempts, each ended by its ~1 s deadline or curl's low-speed limit:
   * the first two as logged before their (capped) retry, the last in the
   * message; each would otherwise have run the 8 s the whole drip takes and
   * resumed from it. No wall-clock ceiling on the total (one flakes on a
   * loaded machine). */
  long max_ms = 0;
  ASSERT_EQ(logged_retries(&r, NULL, &max_ms), 2);
  ASSERT_LE(max_ms, o.backoff_max_ms);
  for (const char *p = r.log; (p = strstr(p, "retrying in ")); p++) {
    const char *bol = p;
    while (bol > r.log && bol[-1] != '\n')
      bol--;
    const char *d = strstr(bol, "within its deadline of 1 s"), *t = strstr(bol, "too slow");
    if (!((d && d < p) || (t && t < p)))
      TEST_FAIL_("an attempt ended by neither the deadline nor the low-speed limit: %.*s",
                 (int)(p - bol), bol);
  }
  assert_bucket_keeps_both(&f);
  fake_stop(&f);
}

/* ---- a transfer ends on a rolling minimum rate ------------------------- */

/* A bucket holding one object `name` of len pseudo-random bytes, served
 * by get_mode (it is the victim), with PUTs served by put_mode. */
static void bucket_of_one(fake *f, const char *name, size_t len, int get_mode, int put_mode) {
  memset(f, 0, sizeof(*f));
  unsigned char *data = malloc(len);
  ASSERT_NOT_NULL(data);
  uint32_t x = 0x2545f491u;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    data[i] = (unsigned char)x;
  }
  fake_put_object(f, name, data, len);
  free(data);
  snprintf(f->victim, sizeof(f->victim), "%s", name);
  f->get_mode = get_mode;
  f->put_mode = put_mode;
  f->retry_after = "1";
  fake_start(f);
  fake_env_keys();
}

/* small_opts with the outer deadline far off (30 s + the bytes at
 * 256 KiB/s: for the 1 GB a drip declares, about an hour), two attempts, and
 * the rolling minimum rate 64 KiB/s over a short window. */
static s3_options rate_opts(const fake *f, char *endpoint, size_t len, long window_s) {
  s3_options o = small_opts(f, endpoint, len);
  o.max_attempts = 2;
  o.stall_timeout_s = 30;
  o.min_rate_bytes_per_s = 256 << 10;
  o.rolling_min_bytes_per_s = 64 << 10;
  o.rolling_window_s = window_s;
  return o;
}

/* An unlinked scratch file, with len bytes of `fill` when len > 0. */
static int scratch_fd(size_t len, unsigned char fill) {
  char path[] = "/tmp/ctrain-hostile-XXXXXX";
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  unlink(path);
  if (len) {
    unsigned char *b = malloc(len);
    ASSERT_NOT_NULL(b);
    memset(b, fill, len);
    ASSERT_EQ(pwrite(fd, b, len, 0), (long long)len);
    free(b);
  }
  return fd;
}

/* The rate an attempt ended at, as its message gives it ("too slow: N B/s"). */
static double measured_rate(const char *msg) {
  const char *p = strstr(msg, "too slow: ");
  double rate = -1;
  ASSERT_NOT_NULL(p);
  ASSERT_EQ(sscanf(p, "too slow: %lf B/s", &rate), 1);
  return rate;
}

TEST(huge_declared_drip_ends_on_the_rolling_rate) {
  /* 1 GB declared, 1500 B/s sent: under the declared-size deadline alone
   * an attempt ran about an hour (30 s + 1 GB at 256 KiB/s), and curl's
   * low-speed limit (1 KiB/s) never fires. Each attempt now ends once its
   * first window (2 s) has passed under 64 KiB/s, retryable. */
  fake f;
  char ep[64], err[2048], want[128];
  bucket_of_two(&f, GET_DRIP_HUGE);
  s3_options o = rate_opts(&f, ep, sizeof(ep), 2);
  s3_client *c = NULL;
  ASSERT_OK(s3_client_new(&o, &c, err, sizeof(err)));
  int fd = scratch_fd(0, 0);
  double t0 = ctrain_mono_s();
  ctrain_err e = s3_get_fd(c, f.victim, fd, -1, NULL, NULL, err, sizeof(err));
  double secs = ctrain_mono_s() - t0;
  fprintf(stderr,
          "figure: 1 GB declared, dripped at 1500 B/s: %s (exit %d) in %.2f s, %d attempts, "
          "%lld body bytes sent; message: %s\n",
          ctrain_strerror(e), ctrain_exit_for_err(e), secs, s3_client_last_attempts(c),
          (long long)f.sent, err);
  ASSERT_EQ(e, CTRAIN_E_TIMEOUT);
  ASSERT_EQ(ctrain_exit_for_err(e), CTRAIN_EXIT_TEMPFAIL);
  ASSERT_EQ(s3_client_last_retryable(c), 1);
  ASSERT_EQ(s3_client_last_attempts(c), 2); /* retried by the backoff, as any transient failure */
  ASSERT_EQ(f.n_get, 2);
  ASSERT_STR_CONTAINS(err, "s3: GET s3://" BUCKET "/p/backup-00000000000000000200.ckpt: ");
  snprintf(want, sizeof(want), "B/s from 127.0.0.1:%d over the last ", f.port);
  ASSERT_STR_CONTAINS(err, want);
  ASSERT_STR_CONTAINS(err, "under the minimum of 65536 B/s");
  ASSERT_STR_CONTAINS(err, "(2 attempts)");
  ASSERT(!strstr(err, "deadline"));
  double rate = measured_rate(err);
  ASSERT(rate >= 0 && rate < 65536);
  /* A floor: no attempt ends before its first window has passed; the
   * ceiling is the period it would otherwise have run, one attempt's outer
   * deadline (a hang is the test's alarm's). */
  ASSERT(secs >= 2.0 * (double)o.rolling_window_s);
  ASSERT(secs < (double)o.stall_timeout_s + 1e9 / (double)o.min_rate_bytes_per_s);
  ASSERT_LT(f.sent, 1000000);
  close(fd);
  s3_client_free(c);
  fake_stop(&f);
}

TEST(slow_transfer_above_the_rolling_rate_completes) {
  /* 600 KB at about 200 KB/s, three times the minimum: the transfer
   * outlasts its window (the rate is checked) and completes in one attempt. */
  fake f;
  char ep[64], err[2048], hex[65], want_hex[65];
  unsigned char sum[32];
  bucket_of_one(&f, "paced.bin", 600000, GET_PACED, PUT_NONE);
  s3_options o = rate_opts(&f, ep, sizeof(ep), 2);
  s3_client *c = NULL;
  ASSERT_OK(s3_client_new(&o, &c, err, sizeof(err)));
  int fd = scratch_fd(0, 0);
  s3_object info;
  double t0 = ctrain_mono_s();
  ctrain_err e = s3_get_fd(c, "paced.bin", fd, -1, &info, hex, err, sizeof(err));
  double secs = ctrain_mono_s() - t0;
  fprintf(stderr, "figure: 600 KB at about 200 KB/s: %s in %.2f s, %d attempt(s)%s%s\n",
          e ? ctrain_strerror(e) : "complete", secs, s3_client_last_attempts(c), e ? ": " : "",
          e ? err : "");
  ASSERT_OK(e);
  ASSERT_EQ(s3_client_last_attempts(c), 1);
  ASSERT_EQ(f.n_get, 1);
  ASSERT_EQ(info.size, 600000);
  EVP_Digest(f.objs[0].data, f.objs[0].len, sum, NULL, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++)
    snprintf(want_hex + 2 * i, 3, "%02x", sum[i]);
  ASSERT_STR_EQ(hex, want_hex);
  ASSERT(secs > (double)o.rolling_window_s); /* 30 sends 100 ms apart: the rule was checked */
  close(fd);
  s3_client_free(c);
  fake_stop(&f);
}

TEST(dripped_upload_ends_on_the_rolling_rate) {
  /* A server reading a PUT's 8 MiB at 1500 B/s: once the socket buffers
   * are full, the bytes sent fall under the rate and the attempt ends. */
  fake f;
  char ep[64], err[2048], want[128];
  bucket_of_one(&f, "other.bin", 1000, GET_OK, PUT_DRIP);
  s3_options o = rate_opts(&f, ep, sizeof(ep), 2);
  s3_client *c = NULL;
  ASSERT_OK(s3_client_new(&o, &c, err, sizeof(err)));
  size_t len = (size_t)8 << 20;
  int fd = scratch_fd(len, 'u');
  double t0 = ctrain_mono_s();
  ctrain_err e = s3_put_fd(c, "up.bin", fd, NULL, err, sizeof(err));
  double secs = ctrain_mono_s() - t0;
  fprintf(stderr,
          "figure: 8 MiB PUT read at 1500 B/s: %s in %.2f s, %d attempts, %lld body bytes read; "
          "message: %s\n",
          ctrain_strerror(e), secs, s3_client_last_attempts(c), (long long)f.received, err);
  ASSERT_EQ(e, CTRAIN_E_TIMEOUT);
  ASSERT_EQ(s3_client_last_retryable(c), 1);
  ASSERT_EQ(s3_client_last_attempts(c), 2);
  /* The server may still be draining the first attempt's bytes (queued
   * before the client left, its FIN behind them) when the second arrives. */
  ASSERT_GE(f.n_put, 1);
  ASSERT_STR_CONTAINS(err, "s3: PUT s3://" BUCKET "/p/up.bin: ");
  snprintf(want, sizeof(want), "B/s to 127.0.0.1:%d over the last ", f.port);
  ASSERT_STR_CONTAINS(err, want);
  ASSERT_STR_CONTAINS(err, "under the minimum of 65536 B/s");
  ASSERT(measured_rate(err) < 65536);
  ASSERT(secs >= 2.0 * (double)o.rolling_window_s);
  ASSERT_LT(f.received, (long long)len);
  close(fd);
  s3_client_free(c);
  fake_stop(&f);
}

TEST(upload_under_a_send_cap_is_held_to_half_the_cap) {
  /* max_send_bytes_per_s (48 KiB/s) under the rolling minimum (64 KiB/s):
   * an upload is held to half the cap instead, so a capped PUT that
   * outlasts its window completes. curl paces it in bursts of its 64 KiB
   * upload buffer, 1.33 s apart: a 3 s window always holds two. */
  fake f;
  char ep[64], err[2048];
  bucket_of_one(&f, "other.bin", 1000, GET_OK, PUT_OK);
  s3_options o = rate_opts(&f, ep, sizeof(ep), 3);
  o.max_send_bytes_per_s = 48 << 10;
  s3_client *c = NULL;
  ASSERT_OK(s3_client_new(&o, &c, err, sizeof(err)));
  size_t len = (size_t)256 << 10;
  int fd = scratch_fd(len, 'c');
  double t0 = ctrain_mono_s();
  ctrain_err e = s3_put_fd(c, "capped.bin", fd, NULL, err, sizeof(err));
  double secs = ctrain_mono_s() - t0;
  fprintf(stderr, "figure: 256 KiB PUT capped at 48 KiB/s: %s in %.2f s, %d attempt(s)%s%s\n",
          e ? ctrain_strerror(e) : "complete", secs, s3_client_last_attempts(c), e ? ": " : "",
          e ? err : "");
  ASSERT_OK(e);
  ASSERT_EQ(s3_client_last_attempts(c), 1);
  ASSERT_EQ(f.received, (long long)len);
  ASSERT(secs > (double)o.rolling_window_s); /* at the cap it takes over 4 s */
  close(fd);
  s3_client_free(c);
  fake_stop(&f);
}

/* ---- bounded disk and memory --------------------------------------------- */

TEST(endless_get_writes_no_more_than_the_listing_says) {
  fake f;
  char ep[64];
  bucket_of_two(&f, GET_ENDLESS);
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure("endless body", &f, &r);
  ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
  ASSERT_STR_CONTAINS(r.msg, "answer too large");
  ASSERT_EQ(f.n_get, 3);
  assert_bucket_keeps_both(&f);
  fake_stop(&f);
}

TEST(list_uploads_follows_both_markers) {
  /* The second page is asked for after the first's key (holding a newline)
   * and upload ID; the uploads of both pages are listed. */
  fake f;
  char ep[64], err[1024];
  bucket_of_two(&f, GET_OK);
  f.uploads_paged = 1;
  s3_options o = small_opts(&f, ep, sizeof(ep));
  s3_client *c = NULL;
  ASSERT_OK(s3_client_new(&o, &c, err, sizeof(err)));
  s3_upload_list l = {0};
  ASSERT_OK(s3_list_uploads(c, NULL, &l, err, sizeof(err)));
  ASSERT_EQ(f.n_uploads, 2);
  ASSERT_STR_CONTAINS(f.uploads_query, "key-marker=p%2Fa%0Ab");
  ASSERT_STR_CONTAINS(f.uploads_query, "upload-id-marker=u1");
  ASSERT_EQ(l.n, 2);
  ASSERT_STR_EQ(l.items[0].name, "a\nb");
  ASSERT_STR_EQ(l.items[0].upload_id, "u1");
  ASSERT_STR_EQ(l.items[1].name, "c");
  ASSERT_STR_EQ(l.items[1].upload_id, "u2");
  s3_upload_list_free(&l);
  ASSERT_EQ(l.items, NULL);
  s3_client_free(c);
  fake_stop(&f);
}

#ifndef HOSTILE_OLD_API
TEST(endless_get_into_a_file_is_capped) {
  /* The staging file never holds more than the listed size. */
  fake f;
  char ep[64], err[1024];
  bucket_of_two(&f, GET_ENDLESS);
  s3_options o = small_opts(&f, ep, sizeof(ep));
  s3_client *c = NULL;
  ASSERT_OK(s3_client_new(&o, &c, err, sizeof(err)));
  char path[] = "/tmp/ctrain-hostile-XXXXXX";
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  unlink(path);
  fake_obj *v = fake_find(&f, f.victim);
  int64_t max_size = 0;
  ctrain_err e = s3_get_fd(c, f.victim, fd, (int64_t)v->len, NULL, NULL, err, sizeof(err));
  struct stat st;
  ASSERT_OK(fstat(fd, &st));
  max_size = st.st_size;
  fprintf(stderr, "figure: endless body into a file: %s; file %lld bytes (listed %zu)\n", err,
          (long long)max_size, v->len);
  ASSERT_EQ(e, CTRAIN_E_TOOBIG);
  ASSERT_EQ(s3_client_last_retryable(c), 1);
  ASSERT_LE(max_size, (int64_t)v->len);
  /* Without a listed size, an answer without a Content-Length is refused. */
  e = s3_get_fd(c, f.victim, fd, -1, NULL, NULL, err, sizeof(err));
  ASSERT_NE(e, CTRAIN_OK);
  ASSERT_STR_CONTAINS(err, "without a Content-Length");
  close(fd);
  s3_client_free(c);
  fake_stop(&f);
}
#endif

TEST(listing_memory_is_bounded_in_bytes) {
  fake f;
  char ep[64];
  bucket_of_two(&f, GET_OK);
  f.list_mode = LIST_MANY;
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure("listing of endless long keys", &f, &r);
  ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
  ASSERT_STR_CONTAINS(r.msg, "answer too large");
  ASSERT_STR_CONTAINS(r.msg, "s3://" BUCKET "/p");
  /* 4 MiB of s3_object entries is about 3600: four pages of 1000. */
  ASSERT_LE(f.n_list, 6);
  assert_bucket_keeps_both(&f);
  fake_stop(&f);
}

/* ---- what happened, named ------------------------------------------------ */

TEST(huge_header_is_answer_too_large) {
  fake f;
  char ep[64];
  bucket_of_two(&f, GET_BIG_HEADER);
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure("300 KB header", &f, &r);
  ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
  ASSERT_STR_CONTAINS(r.msg, "answer too large");
  ASSERT(!strstr(r.msg, "out of memory"));
  assert_bucket_keeps_both(&f);
  fake_stop(&f);
}

TEST(huge_listing_is_answer_too_large) {
  fake f;
  char ep[64];
  bucket_of_two(&f, GET_OK);
  f.list_mode = LIST_HUGE;
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure("40 MiB listing", &f, &r);
  ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
  ASSERT_STR_CONTAINS(r.msg, "answer too large");
  ASSERT(!strstr(r.msg, "Failure writing output"));
  assert_bucket_keeps_both(&f);
  fake_stop(&f);
}

/* ---- the server's text is escaped before it reaches a message ------------ */

TEST(forged_message_is_escaped) {
  fake f;
  char ep[64];
  bucket_of_two(&f, GET_FORGED_MSG);
  s3_options o = small_opts(&f, ep, sizeof(ep));
  outcome r = restore(&f, &o);
  figure("forged <Message>", &f, &r);
  ASSERT_EQ(r.exit_code, CTRAIN_EXIT_TEMPFAIL);
  ASSERT(!strchr(r.msg, '\n'));
  ASSERT(!strchr(r.msg, '\x1b'));
  ASSERT_STR_CONTAINS(r.msg, "oops\\x0a2025-01-01");
  ASSERT_STR_CONTAINS(r.msg, "\\x1b[2J");
  assert_bucket_keeps_both(&f);
  fake_stop(&f);
}

#ifndef HOSTILE_OLD_API
TEST(escape_and_header_lines) {
  char out[64];
  ASSERT_STR_EQ(s3_escape("a\nb\x1b[c\\d\x80", 9, out, sizeof(out)), "a\\x0ab\\x1b[c\\x5cd\\x80");
  ASSERT_STR_EQ(s3_escape("abcdefghij", 10, out, 8), "abcd...");
  ASSERT_STR_EQ(s3_escape("\n\n\n", 3, out, 8), "\\x0a...");
  ASSERT_STR_EQ(s3_escape("abc", 3, out, 4), "abc");
  s3_headers h;
  memset(&h, 0, sizeof(h));
  const char *st = "HTTP/1.1 503 Slow Down\r\n";
  s3_header_line(st, strlen(st), &h);
  ASSERT_EQ(h.http, 503);
  ASSERT_EQ(h.content_length, -1);
  st = "HTTP/1.1 0153 Slow\r\n"; /* fuzz_s3 found "015" taken for a status */
  s3_header_line(st, strlen(st), &h);
  ASSERT_EQ(h.http, 0);
  const char *lines[] = {"Retry-After: 9223372036854775807\r\n", "Retry-After: 100000\r\n",
                         "Retry-After: -1\r\n", "Retry-After: Wed, 21 Oct 2099 07:28:00 GMT\r\n",
                         "Retry-After: 7\r\n"};
  const long want[] = {S3_RETRY_AFTER_MAX_S, S3_RETRY_AFTER_MAX_S, 0, 0, 7};
  for (size_t i = 0; i < 5; i++) {
    s3_header_line(lines[i], strlen(lines[i]), &h);
    ASSERT_EQ(h.retry_after_s, want[i]);
  }
  const char *cl = "content-length: 99999999999999999999999\r\n";
  s3_header_line(cl, strlen(cl), &h);
  ASSERT_EQ(h.content_length, INT64_MAX);
  cl = "Content-Length: 12x\r\n";
  s3_header_line(cl, strlen(cl), &h);
  ASSERT_EQ(h.content_length, -1);
  cl = "Content-Length: 12\r\n";
  s3_header_line(cl, strlen(cl), &h);
  ASSERT_EQ(h.content_length, 12);
}
#else
TEST(endless_get_into_a_file_is_capped) {
  ASSERT(0);
}
TEST(escape_and_header_lines) {
  ASSERT(0);
}
#endif

TEST_MAIN(T(truncated_get_is_retried_then_75_and_nothing_deleted),
          T(checksum_mismatch_is_quarantined_never_deleted),
          T(damaged_backup_is_quarantined_never_deleted), T(retry_after_is_capped),
          T(list_repeating_its_token_is_bounded), T(list_of_empty_pages_is_bounded),
          T(dripped_get_times_out), T(endless_get_writes_no_more_than_the_listing_says),
          T(endless_get_into_a_file_is_capped), T(listing_memory_is_bounded_in_bytes),
          T(huge_header_is_answer_too_large), T(huge_listing_is_answer_too_large),
          T(forged_message_is_escaped), T(escape_and_header_lines),
          T(list_uploads_follows_both_markers), T(huge_declared_drip_ends_on_the_rolling_rate),
          T(slow_transfer_above_the_rolling_rate_completes),
          T(dripped_upload_ends_on_the_rolling_rate),
          T(upload_under_a_send_cap_is_held_to_half_the_cap))
