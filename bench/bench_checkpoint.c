/* bench_checkpoint.c - time of one backup save (ckpt_save: header, SHA-256
 * tree of format 3 hashed on several threads, temp file, fsync, rename,
 * directory fsync) of a ~100 MB model against writing and fsync'ing the
 * same number of bytes with plain write(), in the same run and the same
 * directory. The restore side too: ckpt_load_file of that backup (format 3,
 * leaves verified in parallel) and of the same state as format 2 (one
 * SHA-256, what an older build wrote and an object store holds).
 *
 * Usage: bench_checkpoint [dir (default .)] [MiB (default 100)] [reps (default 5)]
 *        (BENCH_SAMPLES=1 in the environment: every round's times too, --uri)
 *        bench_checkpoint --uri s3://bucket/prefix [--endpoint URL] [MiB] [reps]
 * The model is an Adam one (weights + m + v), so the file holds MiB of
 * floats in total. Prints each timing's median and the ratio save/plain.
 *
 * With --uri: the backup saved to object storage the way the worker does
 * (ckpt_store_save on the S3 store: the image read straight from the
 * state's arrays, hashed beside the send, x-amz-checksum-sha256 in the
 * aws-chunked trailer; s3_put_fd of a staged file alone too) against a plain
 * streamed PUT of the same bytes with libcurl (CURLOPT_AWS_SIGV4, unsigned
 * payload, no checksum), alternating, same server, same run. Credentials
 * from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, the endpoint from
 * --endpoint or AWS_ENDPOINT_URL. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "ctrain/log.h"
#include "ctrain/s3.h"
#include "worker/checkpoint/ckpt.h"
#include "worker/checkpoint/ckpt_store.h"
#include "worker/checkpoint/ckpt_store_s3.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return v[n / 2];
}

/* The baseline: one write() loop of `bytes` from buf, fsync, close. */
static int plain_write(const char *path, const void *buf, size_t bytes) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -1;
  const char *p = buf;
  size_t left = bytes;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0) {
      close(fd);
      return -1;
    }
    p += w;
    left -= (size_t)w;
  }
  int rc = fsync(fd);
  if (close(fd))
    rc = -1;
  return rc;
}

static size_t discard_body(char *p, size_t size, size_t n, void *u) {
  (void)p;
  (void)u;
  return size * n;
}

/* The baseline: one streamed PUT of the file at `path` to
 * <endpoint>/<bucket>/<key> with libcurl's own SigV4 (payload unsigned). */
static int curl_put(CURL *h, const char *url, const char *path, const char *region,
                    const char *checksum_header) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  char sigv4[128];
  snprintf(sigv4, sizeof(sigv4), "aws:amz:%s:s3", region);
  struct curl_slist *hd = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (checksum_header)
    hd = curl_slist_append(hd, checksum_header);
  curl_easy_reset(h);
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(h, CURLOPT_READDATA, f);
  curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
  curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4);
  curl_easy_setopt(h, CURLOPT_USERNAME, getenv("AWS_ACCESS_KEY_ID"));
  curl_easy_setopt(h, CURLOPT_PASSWORD, getenv("AWS_SECRET_ACCESS_KEY"));
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard_body);
  CURLcode cc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  curl_slist_free_all(hd);
  fclose(f);
  if (cc != CURLE_OK || code != 200) {
    fprintf(stderr, "curl PUT %s: %s, HTTP %ld\n", url, curl_easy_strerror(cc), code);
    return -1;
  }
  return 0;
}

/* --uri: the object-store save against curl's plain PUT. */
static int bench_uri(const char *uri, const char *endpoint, long mib, long reps) {
  int rc = 0;
  char err[1024], path[1200], stage[4096], url[2048];
  ckpt_store *st = NULL;
  s3_client *cl = NULL;
  CURL *h = curl_easy_init();
  size_t total = (size_t)mib << 20, n = total / 12;
  float *params = malloc(n * sizeof(float)), *state = malloc(2 * n * sizeof(float));
  uint64_t rank[CKPT_RANK_WORDS] = {1, 2, 3, 4, 0, 0};
  double *t_save = calloc((size_t)reps, sizeof(double)), *t_put = calloc((size_t)reps, 8);
  double *t_curl = calloc((size_t)reps, sizeof(double));
  double *t_curlsum = calloc((size_t)reps, sizeof(double));
  int fd = -1;
  uint8_t digest[CKPT_HASH_BYTES];
  char sumhdr[128];
  if (!h || !params || !state || !t_save || !t_put || !t_curl || !t_curlsum) {
    fprintf(stderr, "out of memory\n");
    rc = 70;
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    params[i] = (float)i * 1e-6f;
    state[i] = -(float)i;
    state[n + i] = (float)(i & 1023);
  }
  ckpt_state s;
  memset(&s, 0, sizeof(s));
  s.world = s.replicas = 1;
  s.optim_kind = 1;
  s.optim_slots = 2;
  s.n_params = n;
  s.per_rank = rank;
  s.params = params;
  s.optim_state = state;
  s3_options so;
  memset(&so, 0, sizeof(so));
  so.uri = uri;
  so.endpoint = endpoint;
  so.multipart_threshold = CKPT_S3_MULTIPART_THRESHOLD; /* the plain client as the store's */
  if (ckpt_store_open_s3(&so, &st, err, sizeof(err)) || s3_client_new(&so, &cl, err, sizeof(err))) {
    fprintf(stderr, "%s\n", err);
    rc = 78;
    goto out;
  }
  /* The same bytes for curl: the image the store uploads. */
  snprintf(stage, sizeof(stage), "%s/bench_checkpoint.%d.img",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
  fd = open(stage, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ckpt_write_fd(fd, stage, &s, digest, err, sizeof(err))) {
    fprintf(stderr, "%s: %s\n", stage, fd < 0 ? strerror(errno) : err);
    rc = 74;
    goto out;
  }
  /* A second baseline: the same PUT carrying the x-amz-checksum-sha256 ours
   * sends, so the store checks the body the same way (its own hashing). */
  memcpy(sumhdr, "x-amz-checksum-sha256: ", 23);
  EVP_EncodeBlock((unsigned char *)sumhdr + 23, digest, CKPT_HASH_BYTES);
  const s3_location *loc = s3_client_location(cl);
  snprintf(url, sizeof(url), "%s/%s/%s%splain.bin", loc->endpoint, loc->bucket, loc->prefix,
           loc->prefix[0] ? "/" : "");
  for (long r = 0; r < reps && rc == 0; r++) {
    double t0 = now_s();
    if (curl_put(h, url, stage, loc->region, NULL)) {
      rc = 74;
      break;
    }
    t_curl[r] = now_s() - t0;
    t0 = now_s();
    if (curl_put(h, url, stage, loc->region, sumhdr)) {
      rc = 74;
      break;
    }
    t_curlsum[r] = now_s() - t0;
    s.global_step = (uint64_t)r + 1;
    t0 = now_s();
    if (ckpt_store_save(st, &s, path, sizeof(path), err, sizeof(err))) {
      fprintf(stderr, "%s\n", err);
      rc = 74;
      break;
    }
    t_save[r] = now_s() - t0;
    if (ckpt_store_prune(st, 1, err, sizeof(err))) {
      fprintf(stderr, "%s\n", err);
      rc = 74;
      break;
    }
    t0 = now_s();
    if (s3_put_fd(cl, "put.bin", fd, NULL, err, sizeof(err))) {
      fprintf(stderr, "%s\n", err);
      rc = 74;
      break;
    }
    t_put[r] = now_s() - t0;
  }
  if (rc == 0 && getenv("BENCH_SAMPLES"))
    for (long r = 0; r < reps; r++)
      printf("round %ld: curl %.3f, curl+checksum %.3f, backup save %.3f, s3_put_fd %.3f\n", r,
             t_curl[r], t_curlsum[r], t_save[r], t_put[r]);
  if (rc == 0) {
    double ms = median(t_save, (int)reps), mc = median(t_curl, (int)reps);
    double mp = median(t_put, (int)reps), mcs = median(t_curlsum, (int)reps);
    uint64_t fsize = ckpt_file_size(&s);
    printf("backup of %zu parameters (Adam): %.1f MiB; %s (endpoint %s)\n", n,
           (double)fsize / (1 << 20), uri, loc->endpoint);
    printf("median of %ld: backup save (streamed from memory) %.3f s (%.0f MiB/s), s3_put_fd alone "
           "%.3f s, curl streamed PUT %.3f s (%.0f MiB/s)\n",
           reps, ms, (double)fsize / (1 << 20) / ms, mp, mc, (double)fsize / (1 << 20) / mc);
    printf("min of %ld: backup save %.3f s, s3_put_fd %.3f s, curl PUT %.3f s\n", reps, t_save[0],
           t_put[0], t_curl[0]);
    printf("ratio backup save / curl PUT: %.2f (medians), %.2f (minima); s3_put_fd / curl PUT: "
           "%.2f (medians)\n",
           ms / mc, t_save[0] / t_curl[0], mp / mc);
    printf("curl PUT with x-amz-checksum-sha256 (the store hashes the body, as for ours): %.3f s "
           "median, %.3f s min; ratio backup save / it: %.2f (medians), %.2f (minima)\n",
           mcs, t_curlsum[0], ms / mcs, t_save[0] / t_curlsum[0]);
  }
  if (st) {
    if (ckpt_store_remove_all(st, err, sizeof(err)) ||
        s3_delete(cl, "plain.bin", err, sizeof(err)) ||
        s3_delete(cl, "put.bin", err, sizeof(err))) {
      fprintf(stderr, "cleanup: %s\n", err);
      rc = 74;
    }
  }
out:
  if (fd >= 0) {
    close(fd);
    unlink(stage);
  }
  ckpt_store_free(st);
  s3_client_free(cl);
  if (h)
    curl_easy_cleanup(h);
  free(params);
  free(state);
  free(t_save);
  free(t_put);
  free(t_curl);
  free(t_curlsum);
  return rc;
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "--uri")) {
    const char *uri = argv[2], *endpoint = NULL;
    int i = 3;
    if (argc > 4 && !strcmp(argv[3], "--endpoint")) {
      endpoint = argv[4];
      i = 5;
    }
    long mib = argc > i ? strtol(argv[i], NULL, 10) : 100;
    long reps = argc > i + 1 ? strtol(argv[i + 1], NULL, 10) : 5;
    if (mib < 1 || mib > 65536 || reps < 1 || reps > 100) {
      fprintf(stderr, "usage: bench_checkpoint --uri s3://B/P [--endpoint URL] [MiB] [reps]\n");
      return 64;
    }
    ctrain_log_init("bench", CTRAIN_LOG_WARN, CTRAIN_LOG_TEXT);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return bench_uri(uri, endpoint, mib, reps);
  }
  const char *dir = argc > 1 ? argv[1] : ".";
  long mib = argc > 2 ? strtol(argv[2], NULL, 10) : 100;
  long reps = argc > 3 ? strtol(argv[3], NULL, 10) : 5;
  if (mib < 1 || mib > 65536 || reps < 1 || reps > 100) {
    fprintf(stderr, "usage: bench_checkpoint [dir] [MiB 1..65536] [reps 1..100]\n");
    return 64;
  }
  ctrain_log_init("bench", CTRAIN_LOG_WARN, CTRAIN_LOG_TEXT);
  size_t total = (size_t)mib << 20, n = total / 12; /* params + Adam m + v */
  float *params = malloc(n * sizeof(float)), *state = malloc(2 * n * sizeof(float));
  uint64_t rank[CKPT_RANK_WORDS] = {1, 2, 3, 4, 0, 0};
  double *t_save = calloc((size_t)reps, sizeof(double));
  double *t_plain = calloc((size_t)reps, sizeof(double));
  double *t_sha = calloc((size_t)reps, sizeof(double));
  char *plainbuf = malloc(total);
  if (!params || !state || !t_save || !t_plain || !t_sha || !plainbuf) {
    fprintf(stderr, "out of memory\n");
    return 70;
  }
  for (size_t i = 0; i < n; i++) {
    params[i] = (float)i * 1e-6f;
    state[i] = -(float)i;
    state[n + i] = (float)(i & 1023);
  }
  memset(plainbuf, 0x5a, total);
  char bkdir[4096], plain[4200], err[1024], path[4096];
  snprintf(bkdir, sizeof(bkdir), "%s/bench_checkpoint.%d", dir, (int)getpid());
  snprintf(plain, sizeof(plain), "%s/bench_checkpoint.%d.plain", dir, (int)getpid());
  ckpt_state s;
  memset(&s, 0, sizeof(s));
  s.world = 1;
  s.replicas = 1;
  s.optim_kind = 1;
  s.optim_slots = 2;
  s.n_params = n;
  s.per_rank = rank;
  s.params = params;
  s.optim_state = state;
  uint64_t fsize = ckpt_file_size(&s);
  size_t plain_bytes = (size_t)fsize;
  if (plain_bytes > total)
    plain_bytes = total;
  int rc = 0;
  for (long r = 0; r < reps; r++) {
    /* Alternate so page-cache and device state favour neither. */
    double t0 = now_s();
    if (plain_write(plain, plainbuf, plain_bytes)) {
      fprintf(stderr, "%s: %s\n", plain, strerror(errno));
      rc = 74;
      break;
    }
    t_plain[r] = now_s() - t0;
    unlink(plain);
    s.global_step = (uint64_t)r + 1;
    t0 = now_s();
    if (ckpt_save(bkdir, &s, path, sizeof(path), err, sizeof(err))) {
      fprintf(stderr, "%s\n", err);
      rc = 74;
      break;
    }
    t_save[r] = now_s() - t0;
    if (ckpt_prune(bkdir, 1, err, sizeof(err))) {
      fprintf(stderr, "%s\n", err);
      rc = 74;
      break;
    }
    uint8_t h[CKPT_HASH_BYTES];
    t0 = now_s();
    ckpt_config_hash(state, 2 * n * sizeof(float), h);
    ckpt_config_hash(params, n * sizeof(float), h);
    t_sha[r] = now_s() - t0;
  }
  /* Restore side: read + verify + parse the last backup (page cache warm),
   * then the same state written as format 2 (ckpt_write_fd with the whole
   * file's SHA-256, as for an object store). */
  double t_load = -1, t_load2 = -1;
  char v2path[4200];
  snprintf(v2path, sizeof(v2path), "%s/format2.ckpt", bkdir);
  for (int k = 0; k < 2 && rc == 0; k++) {
    ckpt_state got;
    uint8_t digest[CKPT_HASH_BYTES];
    if (k == 1) {
      int fd = open(v2path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0 || ckpt_write_fd(fd, v2path, &s, digest, err, sizeof(err))) {
        fprintf(stderr, "%s: %s\n", v2path, fd < 0 ? strerror(errno) : err);
        rc = 74;
      }
      if (fd >= 0)
        close(fd);
      if (rc)
        break;
    }
    double t0 = now_s();
    if (ckpt_load_file(k ? v2path : path, &got, err, sizeof(err)) == CTRAIN_OK) {
      *(k ? &t_load2 : &t_load) = now_s() - t0;
      ckpt_state_free(&got);
    } else {
      fprintf(stderr, "%s\n", err);
      rc = 74;
    }
  }
  unlink(v2path);
  if (ckpt_remove_all(bkdir, err, sizeof(err))) {
    fprintf(stderr, "cleanup: %s\n", err);
    rc = 74;
  }
  rmdir(bkdir);
  if (rc == 0) {
    double ms = median(t_save, (int)reps), mp = median(t_plain, (int)reps);
    double mh = median(t_sha, (int)reps);
    /* median() sorted them: [0] is the minimum, the run least disturbed by
     * other load on a shared machine. */
    double ns = t_save[0], np = t_plain[0];
    printf("backup of %zu parameters (Adam): %.1f MiB file; plain write: %.1f MiB; dir %s\n", n,
           (double)fsize / (1 << 20), (double)plain_bytes / (1 << 20), dir);
    printf("median of %ld: ckpt_save %.3f s (%.0f MiB/s), write+fsync %.3f s (%.0f MiB/s), "
           "SHA-256 alone %.3f s\n",
           reps, ms, (double)fsize / (1 << 20) / ms, mp, (double)plain_bytes / (1 << 20) / mp, mh);
    printf("ckpt_load_file (read, SHA-256 verify, parse): %.3f s format 3 (tree), %.3f s format 2 "
           "(one SHA-256)\n",
           t_load, t_load2);
    printf("min of %ld: ckpt_save %.3f s, write+fsync %.3f s\n", reps, ns, np);
    printf("ratio ckpt_save / plain write+fsync: %.2f (medians), %.2f (minima)\n", ms / mp,
           ns / np);
  }
  free(params);
  free(state);
  free(plainbuf);
  free(t_save);
  free(t_plain);
  free(t_sha);
  return rc;
}
