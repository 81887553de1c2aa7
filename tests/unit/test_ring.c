/* test_ring.c - the TCP collective with real processes on 127.0.0.1:
 * all-reduce against a serial sum (bitwise identical on every rank),
 * broadcast, all-gather, barrier, a dead and a silent peer named within the
 * peer timeout, forged token / job / attempt refused, rendezvous retry and
 * timeout. */
/* 64 MiB all-reduces with up to 8 processes on 2 cores (and under ASan) need
 * more than the default 30 s per test. */
#define TEST_TIMEOUT_S 240
#include "test.h"

#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "ctrain/log.h"
#include "ctrain/ring.h"

#define MAXW 8

static char addr_store[MAXW][64];
static const char *addrs[MAXW];

/* Picks `n` free loopback ports (bind to 0, read back, close). */
static void pick_ports(int n) {
  for (int i = 0; i < n; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)));
    ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &sl));
    snprintf(addr_store[i], sizeof(addr_store[i]), "127.0.0.1:%d", ntohs(sa.sin_port));
    addrs[i] = addr_store[i];
    close(fd);
  }
}

static ring_config config(int rank, int world) {
  ring_config c = {.rank = rank,
                   .world = world,
                   .addrs = addrs,
                   .job = "job-a",
                   .attempt = 3,
                   .token = "s3cret-token",
                   .rendezvous_timeout = 10.0,
                   .peer_timeout = 2.0,
                   .bind_host = "127.0.0.1"};
  return c;
}

static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef void (*rank_fn)(int rank, int world, void *arg);

/* Forks one process per rank; returns how many exited 0. */
static int run_world(int world, rank_fn fn, void *arg) {
  pid_t pids[MAXW];
  int ok = 0;
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    ASSERT(pids[r] >= 0);
    if (pids[r] == 0) {
      fn(r, world, arg);
      fflush(NULL);
      _exit(0);
    }
  }
  for (int r = 0; r < world; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
      ok++;
    else
      fprintf(stderr, "rank %d: status 0x%x\n", r, st);
  }
  return ok;
}

static float value(int rank, size_t i, int exact) {
  if (exact)
    return (float)((long)((i * 7 + (size_t)rank * 13) % 101) - 50);
  return sinf((float)i * 0.37f + (float)rank) * (float)(rank + 1) * 1e-3f;
}

static float *shared; /* (world, n) results, shared with the children */

/* In floats: 0, 1, 7, 64, 1 MiB + 3 floats, 64 MiB. The largest is checked
 * exactly only (integer-valued floats, so every rank is bitwise equal). */
#define BIG_N ((size_t)16 << 20)
static const size_t sizes[] = {0, 1, 7, 64, (1u << 18) + 3, BIG_N};

static void allreduce_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  ctrain_err rc = ring_create(&cfg, &c, err, sizeof(err));
  if (rc)
    TEST_FAIL_("rank %d: ring_create: %s", rank, err);
  size_t off = 0;
  for (int exact = 1; exact >= 0; exact--) {
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
      size_t n = sizes[k];
      if (!exact && n == BIG_N)
        continue;
      float *buf = malloc((n + 1) * sizeof(float));
      for (size_t i = 0; i < n; i++)
        buf[i] = value(rank, i, exact);
      rc = coll_allreduce_sum(c, buf, n);
      if (rc)
        TEST_FAIL_("rank %d n %zu: %s", rank, n, coll_errmsg(c));
      if (exact) {
        for (size_t i = 0; i < n; i++) {
          /* value() repeats with period 101 in i for every rank. */
          float want = 0;
          if (n == BIG_N && i >= 101) {
            want = buf[i % 101];
          } else {
            for (int r = 0; r < world; r++)
              want += value(r, i, 1);
          }
          if (buf[i] != want)
            TEST_FAIL_("rank %d n %zu [%zu]: %g vs %g", rank, n, i, buf[i], want);
        }
      } else {
        for (size_t i = 0; i < n; i++) {
          double want = 0;
          for (int r = 0; r < world; r++)
            want += value(r, i, 0);
          ASSERT_NEAR(buf[i], want, 1e-6);
        }
        /* Keep the non-exact results to compare ranks bit for bit. */
        memcpy(shared + (size_t)rank * ((1u << 18) + 200) + off, buf, n * sizeof(float));
        off += n;
      }
      free(buf);
    }
  }
  coll_free(c);
}

static void allreduce_world(int world) {
  size_t per = (1u << 18) + 200;
  shared = mmap(NULL, (size_t)world * per * sizeof(float), PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(shared != MAP_FAILED);
  pick_ports(world);
  ASSERT_EQ(run_world(world, allreduce_rank, NULL), world);
  for (int r = 1; r < world; r++)
    ASSERT_EQ(memcmp(shared, shared + (size_t)r * per, per * sizeof(float)), 0);
}

TEST(allreduce_1) {
  allreduce_world(1);
}

TEST(allreduce_2) {
  allreduce_world(2);
}

TEST(allreduce_3) {
  allreduce_world(3);
}

TEST(allreduce_4) {
  allreduce_world(4);
}

TEST(allreduce_5) {
  allreduce_world(5);
}

TEST(allreduce_6) {
  allreduce_world(6);
}

TEST(allreduce_7) {
  allreduce_world(7);
}

TEST(allreduce_8) {
  allreduce_world(8);
}

static void other_ops_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: %s", rank, err);
  for (int root = 0; root < world; root++) {
    char msg[100];
    memset(msg, 0, sizeof(msg));
    if (rank == root)
      snprintf(msg, sizeof(msg), "hello from root %d", root);
    ASSERT_OK(coll_broadcast(c, msg, sizeof(msg), root));
    char want[100];
    memset(want, 0, sizeof(want));
    snprintf(want, sizeof(want), "hello from root %d", root);
    ASSERT_EQ(memcmp(msg, want, sizeof(msg)), 0);
  }
  float mine[3] = {(float)rank, (float)rank * 10, -1}, all[3 * MAXW];
  ASSERT_OK(coll_allgather(c, mine, 3, all));
  for (int r = 0; r < world; r++) {
    ASSERT_EQ(all[3 * r], r);
    ASSERT_EQ(all[3 * r + 1], r * 10);
  }
  /* The barrier holds the fast ranks until the slow one arrives. */
  if (rank == world - 1)
    usleep(300 * 1000);
  double t0 = mono();
  ASSERT_OK(coll_barrier(c));
  if (rank != world - 1)
    ASSERT_GE((mono() - t0) * 1000, 250);
  coll_free(c);
}

TEST(broadcast_allgather_barrier) {
  pick_ports(3);
  ASSERT_EQ(run_world(3, other_ops_rank, NULL), 3);
}

/* Rank 2 dies (SIGKILL: no orderly close) or stops (SIGSTOP: silent) after
 * the rendezvous; the others must fail naming it within the peer timeout. */
static void failing_rank(int rank, int world, void *arg) {
  int sig = *(int *)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  cfg.peer_timeout = 1.0;
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: %s", rank, err);
  float buf[1000];
  for (int i = 0; i < 1000; i++)
    buf[i] = 1;
  ASSERT_OK(coll_allreduce_sum(c, buf, 1000));
  if (rank == 2) {
    usleep(100 * 1000);
    kill(getpid(), sig);
    if (sig == SIGSTOP)
      pause();
  }
  double t0 = mono();
  ctrain_err rc = coll_allreduce_sum(c, buf, 1000);
  double dt = mono() - t0;
  ASSERT_EQ(rc, CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(coll_errmsg(c), "rank 2 (");
  ASSERT_STR_CONTAINS(coll_errmsg(c), sig == SIGSTOP ? "silent" : "died?");
  ASSERT_LT(dt * 1000, 1000 + 800);
  /* A failed collective stays failed. */
  ASSERT_EQ(coll_allreduce_sum(c, buf, 10), CTRAIN_E_PEER);
  coll_free(c);
}

static void failing_world(int sig) {
  pid_t pids[3];
  pick_ports(3);
  for (int r = 0; r < 3; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      failing_rank(r, 3, &sig);
      _exit(0);
    }
  }
  for (int r = 0; r < 2; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  kill(pids[2], SIGKILL);
  waitpid(pids[2], NULL, 0);
}

TEST(dead_peer_named) {
  failing_world(SIGKILL);
}

TEST(silent_peer_named) {
  failing_world(SIGSTOP);
}

/* A forger (wrong token), a stale attempt and a foreign job try rank 1's
 * place first; rank 0 refuses and logs each, then the real rank 1 joins. */
typedef struct {
  const char *token, *job;
  uint32_t attempt;
  const char *reason;
} intruder;

static const intruder intruders[] = {
    {"wrong-token", "job-a", 3, "HMAC mismatch"},
    {"s3cret-token", "job-a", 2, "attempt 2, expected 3"},
    {"s3cret-token", "job-b", 3, "job 'job-b', expected 'job-a'"},
};

static void auth_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  FILE *logf = tmpfile();
  if (rank == 0) {
    ctrain_log_set_stream(logf);
  } else {
    for (size_t k = 0; k < sizeof(intruders) / sizeof(intruders[0]); k++) {
      ring_config bad = cfg;
      bad.token = intruders[k].token;
      bad.job = intruders[k].job;
      bad.attempt = intruders[k].attempt;
      ASSERT_EQ(ring_create(&bad, &c, err, sizeof(err)), CTRAIN_E_AUTH);
      ASSERT_NULL(c);
      ASSERT_STR_CONTAINS(err, "rank 0 (");
    }
  }
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: %s", rank, err);
  float x = (float)rank + 1;
  ASSERT_OK(coll_allreduce_sum(c, &x, 1));
  ASSERT_EQ(x, 3);
  coll_free(c);
  if (rank == 0) {
    char log[8192] = "";
    rewind(logf);
    size_t n = fread(log, 1, sizeof(log) - 1, logf);
    log[n] = 0;
    for (size_t k = 0; k < sizeof(intruders) / sizeof(intruders[0]); k++)
      ASSERT_STR_CONTAINS(log, intruders[k].reason);
    ASSERT_STR_CONTAINS(log, "refused connection from 127.0.0.1");
  }
}

TEST(forged_token_refused) {
  pick_ports(2);
  ASSERT_EQ(run_world(2, auth_rank, NULL), 2);
}

static void late_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  if (rank == 0)
    usleep(800 * 1000); /* rank 1 must retry until rank 0 listens */
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: %s", rank, err);
  ASSERT_OK(coll_barrier(c));
  coll_free(c);
}

TEST(rendezvous_retries) {
  pick_ports(2);
  ASSERT_EQ(run_world(2, late_rank, NULL), 2);
}

TEST(rendezvous_timeout_names_peer) {
  pick_ports(2);
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(1, 2);
  cfg.rendezvous_timeout = 0.5;
  double t0 = mono();
  ASSERT_EQ(ring_create(&cfg, &c, err, sizeof(err)), CTRAIN_E_TIMEOUT);
  ASSERT_LT((mono() - t0) * 1000, 1500);
  ASSERT_STR_CONTAINS(err, "rank 0 (127.0.0.1:");
  ASSERT_NULL(c);
}

TEST(local_backend) {
  coll_t *c = NULL;
  ASSERT_OK(coll_local_create(&c));
  float x[2] = {1, 2}, all[2];
  ASSERT_OK(coll_allreduce_sum(c, x, 2));
  ASSERT_EQ(x[1], 2);
  ASSERT_OK(coll_allgather(c, x, 2, all));
  ASSERT_EQ(all[0], 1);
  ASSERT_EQ(coll_broadcast(c, x, 8, 1), CTRAIN_E_INVAL);
  coll_free(c);
}

TEST_MAIN(T(allreduce_1), T(allreduce_2), T(allreduce_3), T(allreduce_4), T(allreduce_5),
          T(allreduce_6), T(allreduce_7), T(allreduce_8), T(broadcast_allgather_barrier),
          T(dead_peer_named), T(silent_peer_named), T(forged_token_refused), T(rendezvous_retries),
          T(rendezvous_timeout_names_peer), T(local_backend))
