/* bench_allreduce.c - ring all-reduce bus bandwidth on loopback against
 * memcpy bandwidth of the same sizes, measured in the same run.
 *
 * busbw follows nccl-tests: size / time x 2(n-1)/n, time the mean over the
 * repetitions; median_us is their median, steadier on a busy machine;
 * cpu_us the CPU time of all ranks together per all-reduce, the steadiest
 * measure of the work done when other processes share the cores. Usage:
 *   bench_allreduce [max_mib (default 256)] [worlds (default 2,4)] [min_bytes (default 4096)]
 *                   [reps (default: 256 MiB worth, 3..200)]
 * Prints one table per world size and the ratio busbw/memcpy at the largest
 * size. bench/allreduce.sh runs it beside Gloo and Open MPI.
 *
 * With CTRAIN_BENCH_ADDRS="host:port,host:port[,...]" it runs one rank only,
 * CTRAIN_BENCH_RANK, of a ring whose other ranks run elsewhere (each listens
 * on its own entry's port, every address): bench/crossnode.py runs one per
 * pod. Rank 0 prints the table (no memcpy column); max_mib, min_bytes and
 * reps apply, worlds does not. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctrain/clock.h"
#include "ctrain/log.h"
#include "worker/collective/ring.h"

#define MAXW 8
#define ROW  (2 + MAXW) /* shared[] per size: mean, median, CPU seconds of each rank */

/* CPU seconds of this process (every thread) so far. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int reps_override;

static int reps_for(size_t bytes) {
  if (reps_override > 0)
    return reps_override;
  size_t r = ((size_t)256 << 20) / (bytes ? bytes : 1);
  return r < 3 ? 3 : (r > 200 ? 200 : (int)r);
}

static double memcpy_gbps(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 0, bytes);
  int reps = reps_for(bytes);
  double t0 = ctrain_mono_s();
  for (int i = 0; i < reps; i++) {
    a[i % bytes] = (char)i;
    memcpy(b, a, bytes);
  }
  double dt = (ctrain_mono_s() - t0) / reps;
  volatile char sink = b[bytes / 2];
  (void)sink;
  free(a);
  free(b);
  return (double)bytes / dt / 1e9;
}

/* Times `reps_for(bytes)` all-reduces of `bytes` on `c` after a warm-up and
 * a barrier: the mean and the median seconds per call and the CPU seconds
 * per call of this process. Non-zero (after printing why) when one failed. */
static int time_size(coll_t *c, int r, size_t bytes, double *mean, double *median, double *cpu) {
  size_t n = bytes / 4;
  int reps = reps_for(bytes), result = 0;
  float *buf = calloc(n, sizeof(float));
  double *each = calloc((size_t)reps, sizeof(double));
  if (coll_allreduce_sum(c, buf, n) || coll_barrier(c)) { /* warm-up */
    fprintf(stderr, "rank %d: warm-up: %s\n", r, coll_errmsg(c));
    result = 1;
  }
  double t0 = ctrain_mono_s(), cpu0 = cpu_s();
  for (int i = 0; i < reps && !result; i++) {
    double t1 = ctrain_mono_s();
    if (coll_allreduce_sum(c, buf, n)) {
      fprintf(stderr, "rank %d: %s\n", r, coll_errmsg(c));
      result = 1;
    }
    each[i] = ctrain_mono_s() - t1;
  }
  *mean = (ctrain_mono_s() - t0) / reps;
  *cpu = (cpu_s() - cpu0) / reps;
  qsort(each, (size_t)reps, sizeof(double), cmp_double);
  *median = each[reps / 2];
  free(each);
  free(buf);
  return result;
}

/* One rank of a ring spread over hosts (CTRAIN_BENCH_ADDRS): rank 0 prints
 * one row per size. */
static int one_rank(const char *list, size_t max_mib, size_t min_bytes) {
  char copy[1024];
  const char *addrs[MAXW];
  int W = 0;
  snprintf(copy, sizeof(copy), "%s", list);
  for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && W < MAXW;
       t = strtok_r(NULL, ",", &save))
    addrs[W++] = t;
  const char *rs = getenv("CTRAIN_BENCH_RANK");
  int r = rs ? atoi(rs) : -1;
  if (W < 2 || r < 0 || r >= W) {
    fprintf(stderr,
            "bench_allreduce: CTRAIN_BENCH_ADDRS needs 2..%d addresses and "
            "CTRAIN_BENCH_RANK one of their indexes\n",
            MAXW);
    return 2;
  }
  ring_config cfg = {.rank = r,
                     .world = W,
                     .addrs = addrs,
                     .job = "bench",
                     .token = "bench",
                     .rendezvous_timeout = 60,
                     .peer_timeout = 60,
                     .bind_host = NULL};
  coll_t *c = NULL;
  char err[512];
  if (ring_create(&cfg, &c, err, sizeof(err))) {
    fprintf(stderr, "rank %d: %s\n", r, err);
    return 1;
  }
  if (r == 0) {
    printf("\n# ring all-reduce, %d ranks: %s (float32, sum)\n", W, list);
    printf("%12s %10s %10s %12s %10s\n", "bytes", "time_us", "median_us", "busbw_GB/s", "cpu_us");
  }
  for (size_t bytes = min_bytes; bytes <= (max_mib << 20); bytes *= 4) {
    double t, median, cpu;
    if (time_size(c, r, bytes, &t, &median, &cpu))
      return 1;
    if (r == 0)
      printf("%12zu %10.1f %10.1f %12.3f %10.1f\n", bytes, t * 1e6, median * 1e6,
             (double)bytes / t * 2.0 * (W - 1) / W / 1e9, cpu * 1e6);
    fflush(stdout);
  }
  int result = 0;
  if (coll_barrier(c)) {
    fprintf(stderr, "rank %d: final barrier: %s\n", r, coll_errmsg(c));
    result = 1;
  }
  coll_free(c);
  return result;
}

int main(int argc, char **argv) {
  size_t max_mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
  if (max_mib < 1)
    max_mib = 1;
  int worlds[MAXW] = {2, 4}, nworlds = 2;
  if (argc > 2) {
    nworlds = 0;
    for (char *s = argv[2], *end; *s && nworlds < MAXW; s = *end ? end + 1 : end) {
      long w = strtol(s, &end, 10);
      if (end == s || w < 1 || w > MAXW) {
        fprintf(stderr, "bench_allreduce: worlds: a comma-separated list of 1..%d\n", MAXW);
        return 2;
      }
      worlds[nworlds++] = (int)w;
    }
  }
  size_t min_bytes = argc > 3 ? strtoul(argv[3], NULL, 10) : 4096;
  if (min_bytes < 4)
    min_bytes = 4;
  reps_override = argc > 4 ? (int)strtol(argv[4], NULL, 10) : 0;
  ctrain_log_init("bench", CTRAIN_LOG_WARN, CTRAIN_LOG_TEXT);
  const char *spread = getenv("CTRAIN_BENCH_ADDRS");
  if (spread && *spread)
    return one_rank(spread, max_mib, min_bytes);
  double *shared = mmap(NULL, 64 * ROW * sizeof(double), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  for (int wi = 0; wi < nworlds; wi++) {
    int W = worlds[wi];
    char store[MAXW][64];
    const char *addrs[MAXW];
    for (int i = 0; i < W; i++) {
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      socklen_t sl = sizeof(sa);
      if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
          getsockname(fd, (struct sockaddr *)&sa, &sl))
        return 1;
      snprintf(store[i], sizeof(store[i]), "127.0.0.1:%d", ntohs(sa.sin_port));
      addrs[i] = store[i];
      close(fd);
    }
    printf("\n# ring all-reduce, %d ranks on loopback (float32, sum)\n", W);
    printf("%12s %10s %10s %12s %12s %8s %10s\n", "bytes", "time_us", "median_us", "busbw_GB/s",
           "memcpy_GB/s", "ratio", "cpu_us");
    pid_t pids[MAXW];
    for (int r = 0; r < W; r++) {
      pids[r] = fork();
      if (pids[r] == 0) {
        ring_config cfg = {.rank = r,
                           .world = W,
                           .addrs = addrs,
                           .job = "bench",
                           .token = "bench",
                           .rendezvous_timeout = 30,
                           .peer_timeout = 30,
                           .bind_host = "127.0.0.1"};
        coll_t *c = NULL;
        char err[512];
        if (ring_create(&cfg, &c, err, sizeof(err))) {
          fprintf(stderr, "rank %d: %s\n", r, err);
          _exit(1);
        }
        int k = 0;
        for (size_t bytes = min_bytes; bytes <= (max_mib << 20); bytes *= 4, k++) {
          double *row = shared + (size_t)k * ROW, t, median;
          if (time_size(c, r, bytes, &t, &median, &row[2 + r]))
            _exit(1);
          if (r == 0) {
            row[0] = t;
            row[1] = median;
          }
        }
        int bad = coll_barrier(c) != CTRAIN_OK;
        if (bad)
          fprintf(stderr, "rank %d: final barrier: %s\n", r, coll_errmsg(c));
        coll_free(c);
        _exit(bad);
      }
    }
    int ok = 1;
    for (int r = 0; r < W; r++) {
      int st = 0;
      waitpid(pids[r], &st, 0);
      ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    if (!ok)
      return 1;
    int k = 0;
    double last_ratio = 0;
    size_t last = 0;
    for (size_t bytes = min_bytes; bytes <= (max_mib << 20); bytes *= 4, k++) {
      const double *row = shared + (size_t)k * ROW;
      double t = row[0], busbw = (double)bytes / t * 2.0 * (W - 1) / W / 1e9, cpu = 0;
      for (int r = 0; r < W; r++)
        cpu += row[2 + r];
      double mc = memcpy_gbps(bytes);
      last_ratio = busbw / mc;
      last = bytes;
      printf("%12zu %10.1f %10.1f %12.3f %12.3f %8.3f %10.1f\n", bytes, t * 1e6, row[1] * 1e6,
             busbw, mc, busbw / mc, cpu * 1e6);
    }
    printf("ratio busbw/memcpy at %zu MiB, %d ranks: %.3f\n", last >> 20, W, last_ratio);
  }
  return 0;
}
