/* bench_checkpoint.c - time of one backup save (ckpt_save: header, SHA-256,
 * temp file, fsync, rename, directory fsync) of a ~100 MB model against
 * writing and fsync'ing the same number of bytes with plain write(), in the
 * same run and the same directory.
 *
 * Usage: bench_checkpoint [dir (default .)] [MiB (default 100)] [reps (default 5)]
 * The model is an Adam one (weights + m + v), so the file holds MiB of
 * floats in total. Prints each timing's median and the ratio save/plain. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker/checkpoint/ckpt.h"
#include "worker/checkpoint/ckpt_store.h"
#include "ctrain/log.h"

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

int main(int argc, char **argv) {
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
    ckpt_prune(bkdir, 1, err, sizeof(err));
    uint8_t h[CKPT_HASH_BYTES];
    t0 = now_s();
    ckpt_config_hash(state, 2 * n * sizeof(float), h);
    ckpt_config_hash(params, n * sizeof(float), h);
    t_sha[r] = now_s() - t0;
  }
  /* Restore side: read + verify + parse the last backup (page cache warm). */
  double t_load = -1;
  if (rc == 0) {
    ckpt_state got;
    double t0 = now_s();
    if (ckpt_load_file(path, &got, err, sizeof(err)) == CTRAIN_OK) {
      t_load = now_s() - t0;
      ckpt_state_free(&got);
    } else {
      fprintf(stderr, "%s\n", err);
      rc = 74;
    }
  }
  ckpt_remove_all(bkdir, err, sizeof(err));
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
    printf("ckpt_load_file (read, SHA-256 verify, parse): %.3f s\n", t_load);
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
