/* test_ring.c - the TCP collective with real processes on 127.0.0.1:
 * all-reduce against a serial sum (bitwise identical on every rank),
 * broadcast, all-gather (floats and bytes), barrier, a dead and a silent peer named within the
 * peer timeout, forged token / job / attempt refused, rendezvous retry and
 * timeout; the handshake's wire format against an independent HMAC, refusals
 * that tell the client nothing, and a join that idle and dribbling
 * connections without the token cannot hold up. */
/* 64 MiB all-reduces with up to 8 processes on 2 cores (and under ASan) need
 * more than the default 30 s per test. */
#define TEST_TIMEOUT_S 240
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "ctrain/clock.h"
#include "ctrain/log.h"
#include "worker/collective/ring.h"
#include "worker/collective/ring_internal.h"

#define MAXW 8
#include "ring_world.h"

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

static float value(int rank, size_t i, int exact) {
  if (exact)
    return (float)((long)((i * 7 + (size_t)rank * 13) % 101) - 50);
  return sinf((float)i * 0.37f + (float)rank) * (float)(rank + 1) * 1e-3f;
}

static float *shared; /* (world, n) results, shared with the children */

/* In floats: 0, 1, 7, 64, 16 KiB (the largest on the latency path), 16 KiB +
 * 4 bytes (the smallest on the ring), 1 MiB + 3 floats, 64 MiB. The largest is checked
 * exactly only (integer-valued floats, so every rank is bitwise equal). */
#define BIG_N ((size_t)16 << 20)
static const size_t sizes[] = {0, 1, 7, 64, 4096, 4097, (1u << 18) + 3, BIG_N};
#define PER_RANK ((1u << 18) + 8400) /* floats of non-exact results kept per rank */

static void allreduce_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  /* Up to 8 processes moving 64 MiB on 2 shared cores, under TSan too: a
   * rank may well be descheduled for seconds. Silence is tested below. */
  cfg.peer_timeout = 30.0;
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
        memcpy(shared + (size_t)rank * PER_RANK + off, buf, n * sizeof(float));
        off += n;
      }
      free(buf);
    }
  }
  coll_free(c);
}

static void allreduce_world(int world) {
  size_t per = PER_RANK;
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
  ASSERT_OK(coll_allgather_bytes(c, mine, sizeof(mine), all));
  for (int r = 0; r < world; r++) {
    ASSERT_EQ(all[3 * r], r);
    ASSERT_EQ(all[3 * r + 1], r * 10);
  }
  /* The barrier holds the fast ranks until the slow one arrives. */
  if (rank == world - 1)
    usleep(300 * 1000);
  double t0 = ctrain_mono_s();
  ASSERT_OK(coll_barrier(c));
  if (rank != world - 1)
    ASSERT_GE((ctrain_mono_s() - t0) * 1000, 250);
  coll_free(c);
}

TEST(broadcast_allgather_barrier) {
  pick_ports(3);
  ASSERT_EQ(run_world(3, other_ops_rank, NULL), 3);
}

/* The byte all-gather: every rank's bytes (a pattern of rank and index) land
 * in rank order, exactly, with nothing written past world * bytes, at odd
 * sizes (0 included), from a separate input and in place; and 64-bit values
 * above 2^24, which a float would round, come through bit for bit. */
static uint8_t pattern(int rank, size_t i) {
  return (uint8_t)(rank * 61 + (int)(i * 7 % 251) + 1);
}

#define GUARD 16

static void allgather_bytes_rank(int rank, int world, void *arg) {
  (void)arg;
  static const size_t bsizes[] = {1, 7, 4097, 0, 3, (1u << 20) + 5};
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: %s", rank, err);
  for (int inplace = 0; inplace <= 1; inplace++) {
    for (size_t k = 0; k < sizeof(bsizes) / sizeof(bsizes[0]); k++) {
      size_t n = bsizes[k], total = n * (size_t)world;
      uint8_t *out = malloc(total + GUARD), *in = malloc(n + 1);
      ASSERT_NOT_NULL(out);
      ASSERT_NOT_NULL(in);
      memset(out, 0xEE, total + GUARD);
      for (size_t i = 0; i < n; i++)
        in[i] = pattern(rank, i);
      const uint8_t *src = in;
      if (inplace) {
        memcpy(out + (size_t)rank * n, in, n);
        src = out + (size_t)rank * n;
      }
      ctrain_err rc = coll_allgather_bytes(c, src, n, out);
      if (rc)
        TEST_FAIL_("rank %d bytes %zu: %s", rank, n, coll_errmsg(c));
      for (int r = 0; r < world; r++)
        for (size_t i = 0; i < n; i++)
          if (out[(size_t)r * n + i] != pattern(r, i))
            TEST_FAIL_("rank %d bytes %zu in place %d: slot %d [%zu] = %u, want %u", rank, n,
                       inplace, r, i, out[(size_t)r * n + i], pattern(r, i));
      for (size_t i = 0; i < GUARD; i++)
        ASSERT_EQ(out[total + i], 0xEE);
      free(out);
      free(in);
    }
  }
  uint64_t mine = 0x0123456789abcdefull + (uint64_t)rank * 0x100000001ull, all[MAXW];
  ASSERT_OK(coll_allgather_bytes(c, &mine, sizeof(mine), all));
  for (int r = 0; r < world; r++)
    ASSERT_EQ(all[r], 0x0123456789abcdefull + (uint64_t)r * 0x100000001ull);
  coll_free(c);
}

TEST(allgather_bytes_2) {
  pick_ports(2);
  ASSERT_EQ(run_world(2, allgather_bytes_rank, NULL), 2);
}

TEST(allgather_bytes_3) {
  pick_ports(3);
  ASSERT_EQ(run_world(3, allgather_bytes_rank, NULL), 3);
}

TEST(allgather_bytes_4) {
  pick_ports(4);
  ASSERT_EQ(run_world(4, allgather_bytes_rank, NULL), 4);
}

/* Ranks that disagree on the size fail (naming the frame size), never
 * write past their buffer or hang. */
static void allgather_mismatch_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: %s", rank, err);
  ASSERT_OK(coll_barrier(c));
  size_t n = rank == 0 ? 8 : 7;
  uint8_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[2 * 8 + GUARD];
  memset(out, 0xEE, sizeof(out));
  ASSERT_EQ(coll_allgather_bytes(c, in, n, out), CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(coll_errmsg(c), "protocol error");
  for (size_t i = 2 * n; i < sizeof(out); i++)
    ASSERT_EQ(out[i], 0xEE);
  coll_free(c);
}

TEST(allgather_bytes_size_mismatch) {
  pick_ports(2);
  ASSERT_EQ(run_world(2, allgather_mismatch_rank, NULL), 2);
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
  double t0 = ctrain_mono_s();
  ctrain_err rc = coll_allreduce_sum(c, buf, 1000);
  double dt = ctrain_mono_s() - t0;
  ASSERT_EQ(rc, CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(coll_errmsg(c), "rank 2 (");
  ASSERT_STR_CONTAINS(coll_errmsg(c), sig == SIGSTOP ? "silent" : "died?");
  /* A silent peer is named only once the peer timeout has passed (a floor);
   * no wall-clock ceiling (one flakes on a loaded machine): the error above says which peer and
   * why, and a collective that never gives up hangs to ctest's TIMEOUT. */
  if (sig == SIGSTOP)
    ASSERT_GE(dt * 1000, 1000 - 50);
  /* A failed collective stays failed. */
  ASSERT_EQ(coll_allreduce_sum(c, buf, 10), CTRAIN_E_PEER);
  coll_free(c);
}

TEST(dead_peer_named) {
  run_loss_world(failing_rank, SIGKILL);
}

TEST(silent_peer_named) {
  run_loss_world(failing_rank, SIGSTOP);
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
    /* The job name is not on the wire: a foreign job fails the MAC. */
    {"s3cret-token", "job-b", 3, "HMAC mismatch"},
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
      ASSERT_STR_CONTAINS(err, "refused our handshake");
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

/* A bad address is a config error (78), whether it is our own or a peer's,
 * and nothing listens: port 99999 used to listen on 34463, port 0 on a
 * random port, and a bad own address failed as a retryable listen error. */
TEST(bad_addresses_are_config_errors) {
  const char *cases[][2] = {{"127.0.0.1:99999", "127.0.0.1:2222"},
                            {"127.0.0.1:0", "127.0.0.1:2222"},
                            {"127.0.0.1:2222", "127.0.0.1:99999"},
                            {"127.0.0.1:2222", "no-port"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *a[2] = {cases[i][0], cases[i][1]};
    ring_config cfg = config(0, 2);
    cfg.addrs = a;
    coll_t *c = NULL;
    char err[512] = "";
    ASSERT_EQ(ring_create(&cfg, &c, err, sizeof(err)), CTRAIN_E_CONFIG);
    ASSERT_NULL(c);
    ASSERT_STR_CONTAINS(err, i < 2 ? "rank 0 (own address)" : "rank 1:");
  }
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
  double t0 = ctrain_mono_s();
  ASSERT_EQ(ring_create(&cfg, &c, err, sizeof(err)), CTRAIN_E_TIMEOUT);
  /* The timeout, named, and not before it (a floor); a rendezvous that never
   * gives up hangs to ctest's TIMEOUT: no wall-clock ceiling (one flakes
   * on a loaded machine). */
  ASSERT_GE((ctrain_mono_s() - t0) * 1000, 500 - 50);
  ASSERT_STR_CONTAINS(err, "rank 0 (127.0.0.1:");
  ASSERT_NULL(c);
}

/* Rank 0's port accepts connections (the kernel completes them) but rank 0
 * never answers, as when it is stopped: rank 1 still gives up at the
 * rendezvous timeout, naming it and what it did not do. */
TEST(rendezvous_silent_listener_named) {
  pick_ports(2);
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port =
                               htons((uint16_t)strtol(strrchr(addrs[0], ':') + 1, NULL, 10)),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  ASSERT_OK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)));
  ASSERT_OK(listen(lfd, 8));
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(1, 2);
  cfg.rendezvous_timeout = 1.0;
  double t0 = ctrain_mono_s();
  ASSERT_EQ(ring_create(&cfg, &c, err, sizeof(err)), CTRAIN_E_TIMEOUT);
  ASSERT_GE((ctrain_mono_s() - t0) * 1000, 1000 - 50); /* a floor; no ceiling: it flakes */
  ASSERT_STR_CONTAINS(err, "rank 0 (127.0.0.1:");
  ASSERT_STR_CONTAINS(err, "no handshake challenge");
  ASSERT_NULL(c);
  close(lfd);
}

TEST(local_backend) {
  coll_t *c = NULL;
  ASSERT_OK(coll_local_create(&c));
  float x[2] = {1, 2}, all[2];
  ASSERT_OK(coll_allreduce_sum(c, x, 2));
  ASSERT_EQ(x[1], 2);
  ASSERT_OK(coll_allgather_bytes(c, x, 2 * sizeof(float), all));
  ASSERT_EQ(all[0], 1);
  ASSERT_EQ(all[1], 2);
  uint8_t b[7] = {9, 8, 7, 6, 5, 4, 3}, ball[7 + GUARD];
  memset(ball, 0xEE, sizeof(ball));
  ASSERT_OK(coll_allgather_bytes(c, b, 7, ball));
  ASSERT_EQ(memcmp(ball, b, 7), 0);
  ASSERT_EQ(ball[7], 0xEE);
  ASSERT_OK(coll_allgather_bytes(c, b, 0, ball));    /* nothing to move */
  ASSERT_OK(coll_allgather_bytes(c, ball, 7, ball)); /* in place */
  ASSERT_EQ(memcmp(ball, b, 7), 0);
  ASSERT_EQ(coll_broadcast(c, x, 8, 1), CTRAIN_E_INVAL);
  coll_free(c);
}

/* ---------------------------------------------------------------------------
 * The handshake on the wire
 * ------------------------------------------------------------------------- */

static void be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* The MACs as ring.h documents them, computed here without ring.c. */
static void spec_mac(const char *token, const char *label, const char *job, uint32_t server_rank,
                     const uint8_t *nonce_s, const uint8_t *signed36, uint8_t out[32]) {
  uint8_t msg[512];
  size_t off = 0, ll = strlen(label), jl = strlen(job);
  memcpy(msg, label, ll);
  off += ll;
  be32(msg + off, (uint32_t)jl);
  off += 4;
  memcpy(msg + off, job, jl);
  off += jl;
  be32(msg + off, server_rank);
  off += 4;
  memcpy(msg + off, nonce_s, 16);
  off += 16;
  memcpy(msg + off, signed36, 36);
  off += 36;
  unsigned int ml = 32;
  ASSERT_NOT_NULL(HMAC(EVP_sha256(), token, (int)strlen(token), msg, off, out, &ml));
}

TEST(handshake_wire_format) {
  pick_ports(3);
  ring_config client = config(2, 3), server = config(1, 3);
  uint8_t ns[RING_HS_NONCE_LEN], nc[RING_HS_NONCE_LEN], hello[RING_HS_HELLO_LEN],
      want[RING_HS_HELLO_LEN], mac[32], proof[RING_HS_PROOF_LEN];
  char why[256];
  ring_hs_hello hi;
  for (int i = 0; i < RING_HS_NONCE_LEN; i++) {
    ns[i] = (uint8_t)(0xa0 + i);
    nc[i] = (uint8_t)(0x10 + i);
  }
  ASSERT_OK(ring_hs_hello_encode(&client, 1, ns, nc, hello));
  memcpy(want, "CTRH", 4);
  be32(want + 4, RING_HS_VERSION);
  be32(want + 8, 3);  /* attempt */
  be32(want + 12, 2); /* client rank */
  be32(want + 16, 3); /* world */
  memcpy(want + 20, nc, 16);
  spec_mac("s3cret-token", "ctrain-client", "job-a", 1, ns, want, want + 36);
  ASSERT_EQ(memcmp(hello, want, sizeof(want)), 0);
  ASSERT_OK(ring_hs_hello_check(&server, ns, hello, sizeof(hello), &hi, why, sizeof(why)));
  ASSERT_EQ(hi.rank, 2);
  ASSERT_EQ(hi.world, 3);
  ASSERT_EQ(hi.attempt, 3);
  ASSERT_EQ(memcmp(hi.nonce, nc, 16), 0);
  /* Every byte counts; a replay against another challenge fails; so do a
   * short or long record. */
  for (size_t i = 0; i < sizeof(hello); i++) {
    hello[i] ^= 0x01;
    ASSERT_EQ(ring_hs_hello_check(&server, ns, hello, sizeof(hello), &hi, why, sizeof(why)),
              CTRAIN_E_AUTH);
    hello[i] ^= 0x01;
  }
  uint8_t other[RING_HS_NONCE_LEN];
  memcpy(other, ns, sizeof(other));
  other[5] ^= 0x80;
  ASSERT_EQ(ring_hs_hello_check(&server, other, hello, sizeof(hello), &hi, why, sizeof(why)),
            CTRAIN_E_AUTH);
  ASSERT_STR_CONTAINS(why, "HMAC mismatch");
  ASSERT_EQ(ring_hs_hello_check(&server, ns, hello, sizeof(hello) - 1, &hi, why, sizeof(why)),
            CTRAIN_E_AUTH);
  /* Meant for rank 0, not for us. */
  ring_config rank0 = config(0, 3);
  ASSERT_EQ(ring_hs_hello_check(&rank0, ns, hello, sizeof(hello), &hi, why, sizeof(why)),
            CTRAIN_E_AUTH);
  /* The token holder of another attempt passes the MAC and is still refused. */
  ring_config stale = client;
  stale.attempt = 2;
  ASSERT_OK(ring_hs_hello_encode(&stale, 1, ns, nc, hello));
  ASSERT_EQ(ring_hs_hello_check(&server, ns, hello, sizeof(hello), &hi, why, sizeof(why)),
            CTRAIN_E_AUTH);
  ASSERT_STR_CONTAINS(why, "attempt 2, expected 3");
  /* The server's proof. */
  memcpy(proof, "CTRS", 4);
  spec_mac("s3cret-token", "ctrain-server", "job-a", 1, ns, want, proof + 4);
  ASSERT_OK(ring_hs_proof_check(&client, 1, ns, want, proof, sizeof(proof)));
  ASSERT_EQ(ring_hs_proof_check(&client, 0, ns, want, proof, sizeof(proof)), CTRAIN_E_AUTH);
  spec_mac("s3cret-token", "ctrain-client", "job-a", 1, ns, want, mac);
  memcpy(proof + 4, mac, 32); /* the client's own MAC reflected back */
  ASSERT_EQ(ring_hs_proof_check(&client, 1, ns, want, proof, sizeof(proof)), CTRAIN_E_AUTH);
  /* Frame headers. */
  uint8_t hdr[RING_FRAME_HDR_LEN] = {'C', 'T', 'R', 'F', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0};
  uint32_t type;
  uint64_t len;
  ASSERT_OK(ring_frame_header_parse(hdr, sizeof(hdr), &type, &len, why, sizeof(why)));
  ASSERT_EQ(type, RING_FRAME_DATA);
  ASSERT_EQ(len, 256);
  hdr[7] = (uint8_t)RING_FRAME_HEARTBEAT;
  ASSERT_EQ(ring_frame_header_parse(hdr, sizeof(hdr), &type, &len, why, sizeof(why)),
            CTRAIN_E_PARSE);
  ASSERT_STR_CONTAINS(why, "payload");
  hdr[7] = 9;
  ASSERT_EQ(ring_frame_header_parse(hdr, sizeof(hdr), &type, &len, why, sizeof(why)),
            CTRAIN_E_PARSE);
  hdr[0] = 'X';
  hdr[7] = 1;
  ASSERT_EQ(ring_frame_header_parse(hdr, sizeof(hdr), &type, &len, why, sizeof(why)),
            CTRAIN_E_PARSE);
  ASSERT_STR_CONTAINS(why, "magic");
}

/* ---------------------------------------------------------------------------
 * The receive path: rank 0 of two adopted over a socketpair, rank 1 played by
 * hand (tests/fuzz/fuzz_ring_frames.c fuzzes the same path).
 * ------------------------------------------------------------------------- */

static void put_frame(int fd, uint32_t type, const void *payload, size_t len) {
  uint8_t h[RING_FRAME_HDR_LEN];
  be32(h, RING_FRAME_MAGIC);
  be32(h + 4, type);
  be32(h + 8, (uint32_t)((uint64_t)len >> 32));
  be32(h + 12, (uint32_t)len);
  ASSERT_EQ(write(fd, h, sizeof(h)), sizeof(h));
  if (len)
    ASSERT_EQ(write(fd, payload, len), len);
}

/* *c: rank 0 of 2 (no heartbeat thread); returns rank 1's raw socket. */
static int adopt_pair(coll_t **c, double peer_timeout) {
  int sv[2];
  ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
  int fds[2] = {-1, sv[0]};
  ASSERT_OK(ring_adopt(0, 2, fds, peer_timeout, 0, c));
  ASSERT_NOT_NULL(*c);
  return sv[1];
}

/* ring_adopt takes the sockets: on a bad rank they are closed, not leaked. */
TEST(adopt_bad_rank_closes_fds) {
  int sv[2];
  coll_t *c = NULL;
  ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
  int fds[2] = {-1, sv[0]};
  ASSERT_EQ(ring_adopt(2, 2, fds, 1.0, 0, &c), CTRAIN_E_INVAL);
  ASSERT_NULL(c);
  ASSERT_EQ(fcntl(sv[0], F_GETFD), -1);
  ASSERT_EQ(errno, EBADF);
  close(sv[1]);
}

TEST(frames_heartbeats_data_bye) {
  coll_t *c = NULL;
  int raw = adopt_pair(&c, 5.0);
  char buf[6] = "";
  put_frame(raw, RING_FRAME_HEARTBEAT, NULL, 0);
  put_frame(raw, RING_FRAME_HEARTBEAT, NULL, 0);
  put_frame(raw, RING_FRAME_DATA, "abcdef", 6);
  ASSERT_OK(coll_broadcast(c, buf, 6, 1));
  ASSERT_EQ(memcmp(buf, "abcdef", 6), 0);
  put_frame(raw, RING_FRAME_BYE, NULL, 0);
  ASSERT_EQ(coll_broadcast(c, buf, 6, 1), CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(coll_errmsg(c), "peer rank 1");
  ASSERT_STR_CONTAINS(coll_errmsg(c), "closed its end");
  coll_free(c);
  close(raw);
}

TEST(frames_bad_magic_named) {
  coll_t *c = NULL;
  int raw = adopt_pair(&c, 5.0);
  uint8_t junk[RING_FRAME_HDR_LEN + 4] = "GET / HTTP/1.1\r\n";
  char buf[4];
  ASSERT_EQ(write(raw, junk, sizeof(junk)), sizeof(junk));
  ASSERT_EQ(coll_broadcast(c, buf, 4, 1), CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(coll_errmsg(c), "peer rank 1");
  ASSERT_STR_CONTAINS(coll_errmsg(c), "bad frame magic");
  /* Failed stays failed. */
  ASSERT_EQ(coll_barrier(c), CTRAIN_E_PEER);
  coll_free(c);
  close(raw);
}

TEST(frames_wrong_size_named) {
  coll_t *c = NULL;
  int raw = adopt_pair(&c, 5.0);
  char buf[4];
  put_frame(raw, RING_FRAME_DATA, "toolong", 7);
  ASSERT_EQ(coll_broadcast(c, buf, 4, 1), CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(coll_errmsg(c), "frame of 7 bytes, expected 4");
  coll_free(c);
  close(raw);
}

TEST(frames_abort_reason_passed_on) {
  coll_t *c = NULL;
  int raw = adopt_pair(&c, 5.0);
  const char why[] = "peer rank 7 (w7:2222) lost: silent for 9.0 s";
  char buf[4];
  put_frame(raw, RING_FRAME_ABORT, why, strlen(why));
  ASSERT_EQ(coll_broadcast(c, buf, 4, 1), CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(coll_errmsg(c), why);
  ASSERT_STR_CONTAINS(coll_errmsg(c), "reported by peer rank 1");
  coll_free(c);
  close(raw);
}

/* An empty frame whose header a pass read before any operation wanted it
 * (the heartbeat thread's, or another exchange's) is whole: the operation
 * that wants it takes it at once rather than waiting for more bytes, which
 * never come (the overlapped all-reduce's parts send empty pieces). */
TEST(empty_frame_read_early_is_whole) {
  coll_t *c = NULL;
  int raw = adopt_pair(&c, 3.0);
  ring_t *r = c->impl;
  r->spin_max_s = r->spin_s = 0; /* a spin pass would read it anyway, as large frames do not */
  put_frame(raw, RING_FRAME_DATA, NULL, 0);
  pthread_mutex_lock(&r->mu);
  double until = ctrain_mono_s() + 2.0;
  while (!r->peers[1].rx_pending && ctrain_mono_s() < until) {
    ASSERT_OK(ring_progress(c, 1));
    usleep(1000);
  }
  pthread_mutex_unlock(&r->mu);
  ASSERT_EQ(r->peers[1].rx_pending, 1);
  char buf[1];
  double t0 = ctrain_mono_s();
  ASSERT_OK(coll_broadcast(c, buf, 0, 1));
  ASSERT_LT((int)((ctrain_mono_s() - t0) * 1000), 500);
  coll_free(c);
  close(raw);
}

/* A rank busy for longer than the peer timeout (a long reduce, or
 * descheduled on a loaded node) reads what its peer sent meanwhile before
 * calling it silent: the heartbeats waiting in the socket prove it alive. */
TEST(busy_rank_reads_before_blaming) {
  coll_t *c = NULL;
  int raw = adopt_pair(&c, 1.0);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    double t0 = ctrain_mono_s();
    while (ctrain_mono_s() - t0 < 2.5) {
      put_frame(raw, RING_FRAME_HEARTBEAT, NULL, 0);
      usleep(100 * 1000);
    }
    put_frame(raw, RING_FRAME_DATA, "live", 4);
    put_frame(raw, RING_FRAME_BYE, NULL, 0);
    _exit(0);
  }
  usleep(1500 * 1000); /* busy past the 1 s peer timeout */
  char buf[4] = "";
  ctrain_err rc = coll_broadcast(c, buf, 4, 1);
  if (rc)
    TEST_FAIL_("%s", coll_errmsg(c));
  ASSERT_EQ(memcmp(buf, "live", 4), 0);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  coll_free(c);
  close(raw);
}

static int port_of(int rank) {
  const char *colon = strrchr(addrs[rank], ':');
  return (int)strtol(colon + 1, NULL, 10);
}

/* A non-blocking TCP connect to 127.0.0.1:port; the fd (connecting). */
static int connect_nb(int port) {
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT(fd >= 0);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

/* Reads until EOF, reset or `secs`: how many bytes came into buf (at most
 * cap); *closed says whether the server closed (1) or we timed out (0). */
static size_t read_until_close(int fd, uint8_t *buf, size_t cap, double secs, int *closed) {
  size_t got = 0;
  double end = ctrain_mono_s() + secs;
  *closed = 0;
  while (ctrain_mono_s() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0)
      continue;
    uint8_t sink[256];
    ssize_t n = got < cap ? recv(fd, buf + got, cap - got, 0) : recv(fd, sink, sizeof(sink), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (n <= 0) {
      *closed = 1;
      break;
    }
    got += (size_t)n;
  }
  return got;
}

/* Reads exactly n bytes unless the server closes or `secs` pass; how many. */
static size_t read_exact(int fd, uint8_t *buf, size_t n, double secs) {
  size_t got = 0;
  double end = ctrain_mono_s() + secs;
  while (got < n && ctrain_mono_s() < end) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0)
      continue;
    ssize_t r = recv(fd, buf + got, n - got, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  return got;
}

static int connect_wait(int port) {
  for (int tries = 0; tries < 100; tries++) {
    int fd = connect_nb(port);
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t el = sizeof(err);
    if (fd >= 0 && poll(&p, 1, 1000) == 1 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) &&
        !err)
      return fd;
    if (fd >= 0)
      close(fd);
    usleep(50 * 1000);
  }
  TEST_FAIL_("could not connect to port %d", port);
}

static void rank0_then_bye(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  ctrain_log_set_stream(tmpfile()); /* the refusals are expected */
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: %s", rank, err);
  coll_free(c);
}

/* Plays rank 1 by hand against a real rank 0: a forged token, a stale
 * attempt, a foreign job and garbage each get the challenge and then the
 * same plain close, with no byte after it (so nothing about the job, the
 * rank, or which check failed); then the real credentials get a proof that
 * verifies, and rank 0's orderly BYE. */
TEST(refusals_say_nothing) {
  pick_ports(2);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    rank0_then_bye(0, 2, NULL);
    fflush(NULL);
    _exit(0);
  }
  static const struct {
    const char *what, *token, *job;
    uint32_t attempt;
  } tries[] = {{"forged token", "forged", "job-a", 3},
               {"wrong attempt", "s3cret-token", "job-a", 2},
               {"foreign job", "s3cret-token", "job-b", 3},
               {"garbage", NULL, NULL, 0}};
  for (size_t k = 0; k < sizeof(tries) / sizeof(tries[0]); k++) {
    int fd = connect_wait(port_of(0)), closed = 0;
    uint8_t chal[RING_HS_CHALLENGE_LEN], hello[RING_HS_HELLO_LEN], after[256], nc[16] = {7};
    ASSERT_EQ(read_exact(fd, chal, sizeof(chal), 5.0), RING_HS_CHALLENGE_LEN);
    ASSERT_EQ(memcmp(chal, "CTRN", 4), 0);
    ring_config bad = config(1, 2);
    if (tries[k].token) {
      bad.token = tries[k].token;
      bad.job = tries[k].job;
      bad.attempt = tries[k].attempt;
      ASSERT_OK(ring_hs_hello_encode(&bad, 0, chal + 8, nc, hello));
    } else {
      memset(hello, 'A', sizeof(hello));
    }
    ASSERT_EQ(send(fd, hello, sizeof(hello), MSG_NOSIGNAL), (ssize_t)sizeof(hello));
    double t0 = ctrain_mono_s();
    size_t got = read_until_close(fd, after, sizeof(after), 5.0, &closed);
    printf("# %s: %zu bytes after the hello, %s after %.3f s\n", tries[k].what, got,
           closed ? "closed" : "still open", ctrain_mono_s() - t0);
    ASSERT_EQ(got, 0);
    ASSERT_EQ(closed, 1);
    close(fd);
  }
  /* Control: the real credentials on the same path get the proof. */
  int fd = connect_wait(port_of(0));
  uint8_t chal[RING_HS_CHALLENGE_LEN], hello[RING_HS_HELLO_LEN], proof[RING_HS_PROOF_LEN],
      nc[16] = {9};
  ASSERT_EQ(read_exact(fd, chal, sizeof(chal), 5.0), RING_HS_CHALLENGE_LEN);
  ring_config good = config(1, 2);
  ASSERT_OK(ring_hs_hello_encode(&good, 0, chal + 8, nc, hello));
  ASSERT_EQ(send(fd, hello, sizeof(hello), MSG_NOSIGNAL), (ssize_t)sizeof(hello));
  ASSERT_EQ(read_exact(fd, proof, sizeof(proof), 5.0), RING_HS_PROOF_LEN);
  ASSERT_OK(ring_hs_proof_check(&good, 0, chal + 8, hello, proof, sizeof(proof)));
  /* Then frames: heartbeats, maybe, and BYE. */
  for (;;) {
    uint8_t hdr[RING_FRAME_HDR_LEN];
    char why[128];
    uint32_t type;
    uint64_t len;
    ASSERT_EQ(read_exact(fd, hdr, sizeof(hdr), 5.0), RING_FRAME_HDR_LEN);
    ASSERT_OK(ring_frame_header_parse(hdr, sizeof(hdr), &type, &len, why, sizeof(why)));
    if (type == RING_FRAME_BYE)
      break;
    ASSERT_EQ(type, RING_FRAME_HEARTBEAT);
  }
  close(fd);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT(WIFEXITED(st));
  ASSERT_EQ(WEXITSTATUS(st), 0);
}

/* ---------------------------------------------------------------------------
 * Connections without the token do not hold the rendezvous up
 * ------------------------------------------------------------------------- */

#define N_IDLE      50
#define N_SLOW      50
#define HOSTILE_RDV 20.0 /* the rendezvous timeout of the reported hang */

/* Shared with the children. */
typedef struct {
  double join_s; /* rank 1's ring_create */
  int reopened;  /* connections the attacker had to open again */
} hostile_stats;
static hostile_stats *hostile;

/* Keeps N_IDLE connections that send nothing and N_SLOW that dribble a
 * plausible hello (right magic, version, attempt, rank and world; a MAC
 * without the token) one byte per 100 ms, against `port`, reopening any that
 * the server closes, until killed. Writes a byte to ready_fd once each of
 * them has been connected (the server sheds some as soon as the others
 * come, so they are never all up at the same instant) and 2.5 s more have
 * passed, so that the server has been timing out and shedding lures. */
static void attacker(int port, int ready_fd) {
  int fds[N_IDLE + N_SLOW];
  size_t sent[N_IDLE + N_SLOW];
  int up[N_IDLE + N_SLOW], ever[N_IDLE + N_SLOW];
  uint8_t lure[RING_HS_HELLO_LEN];
  memset(lure, 0x5a, sizeof(lure));
  memcpy(lure, "CTRH", 4);
  be32(lure + 4, RING_HS_VERSION);
  be32(lure + 8, 3);
  be32(lure + 12, 1);
  be32(lure + 16, 2);
  for (int i = 0; i < N_IDLE + N_SLOW; i++) {
    fds[i] = -1;
    ever[i] = 0;
  }
  int told = 0, ticks_up = 0;
  for (;;) {
    int n_up = 0;
    for (int i = 0; i < N_IDLE + N_SLOW; i++) {
      if (fds[i] < 0) {
        hostile->reopened += ever[i];
        fds[i] = connect_nb(port);
        sent[i] = 0;
        up[i] = 0;
        if (fds[i] < 0)
          continue;
      }
      struct pollfd p = {.fd = fds[i], .events = (short)(up[i] ? POLLIN : POLLOUT)};
      int pr = poll(&p, 1, 0);
      if (!up[i] && pr == 1) {
        int err = 0;
        socklen_t el = sizeof(err);
        getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &el);
        up[i] = !err;
        if (err) {
          close(fds[i]);
          fds[i] = -1;
          continue;
        }
      } else if (up[i] && pr == 1) {
        uint8_t sink[64]; /* the challenge, or the close */
        ssize_t r = recv(fds[i], sink, sizeof(sink), 0);
        if (r == 0 || (r < 0 && errno != EAGAIN)) {
          close(fds[i]);
          fds[i] = -1;
          continue;
        }
      }
      if (up[i] && i >= N_IDLE && sent[i] < sizeof(lure)) {
        if (send(fds[i], lure + sent[i], 1, MSG_NOSIGNAL) == 1)
          sent[i]++;
      }
      ever[i] |= up[i];
    }
    for (int i = 0; i < N_IDLE + N_SLOW; i++)
      n_up += ever[i];
    if (!told && n_up == N_IDLE + N_SLOW && ++ticks_up > 25) {
      told = 1;
      ASSERT_EQ(write(ready_fd, "r", 1), 1);
    }
    usleep(100 * 1000);
  }
}

static void hostile_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = NULL;
  char err[512] = "";
  ring_config cfg = config(rank, world);
  cfg.rendezvous_timeout = HOSTILE_RDV;
  if (rank == 0)
    ctrain_log_set_stream(tmpfile()); /* a refusal per lure */
  double t0 = ctrain_mono_s();
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: %s (after %.1f s)", rank, err, ctrain_mono_s() - t0);
  if (rank == 1)
    hostile->join_s = ctrain_mono_s() - t0;
  float x[3] = {(float)rank + 1, 10, -1};
  ASSERT_OK(coll_allreduce_sum(c, x, 3));
  ASSERT_EQ(x[0], 3);
  ASSERT_EQ(x[1], 20);
  ASSERT_EQ(x[2], -2);
  coll_free(c);
}

/* The reported attack, bigger: 50 idle and 50 dribbling connections open
 * against rank 0 (more than it holds pending), and the real rank 1 still
 * joins at once and the all-reduce works. Before the fix rank 0 gave every
 * connection 10 s in turn, and both ranks timed out. */
TEST(hostile_connections_do_not_delay_join) {
  int ready[2];
  pid_t pids[3];
  hostile = mmap(NULL, sizeof(*hostile), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(hostile != MAP_FAILED);
  hostile->join_s = -1;
  hostile->reopened = 0;
  pick_ports(2);
  ASSERT_OK(pipe(ready));
  fflush(NULL);
  pids[0] = fork();
  ASSERT(pids[0] >= 0);
  if (pids[0] == 0) {
    hostile_rank(0, 2, NULL);
    fflush(NULL);
    _exit(0);
  }
  pids[2] = fork();
  ASSERT(pids[2] >= 0);
  if (pids[2] == 0) {
    close(ready[0]);
    attacker(port_of(0), ready[1]);
    _exit(0);
  }
  close(ready[1]);
  /* All connected (a server that handshakes one at a time never gets
   * there: its backlog fills), then the real peer. No clock of the test's
   * own: the wait ends when the attacker says so or when rank 0 ends (its
   * rendezvous timer ran out: it failed). */
  struct pollfd p = {.fd = ready[0], .events = POLLIN};
  int all_up = 0, st0 = 0, rank0_done = 0;
  while (!all_up && !rank0_done) {
    all_up = poll(&p, 1, 100) == 1;
    rank0_done = !all_up && waitpid(pids[0], &st0, WNOHANG) == pids[0];
  }
  printf("# %s %d hostile connections up; starting rank 1\n", all_up ? "all" : "NOT all",
         N_IDLE + N_SLOW);
  fflush(NULL);
  pids[1] = fork();
  ASSERT(pids[1] >= 0);
  if (pids[1] == 0) {
    hostile_rank(1, 2, NULL);
    fflush(NULL);
    _exit(0);
  }
  int ok = 0;
  for (int r = 0; r < 2; r++) {
    int st = st0;
    if (r > 0 || !rank0_done)
      waitpid(pids[r], &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
      ok++;
    else
      fprintf(stderr, "rank %d: status 0x%x\n", r, st);
  }
  kill(pids[2], SIGKILL);
  waitpid(pids[2], NULL, 0);
  close(ready[0]);
  printf("# rank 1 joined in %.3f s with %d idle + %d dribbling connections against rank 0 "
         "(%.2f%% of the %.0f s rendezvous timeout)\n",
         hostile->join_s, N_IDLE, N_SLOW, 100 * hostile->join_s / HOSTILE_RDV, HOSTILE_RDV);
  printf("# the attacker reopened %d connections that rank 0 closed\n", hostile->reopened);
  ASSERT_EQ(ok, 2);
  ASSERT(all_up);
  /* Rank 1 joined within the rendezvous timeout: a server that gave the
   * lures their RING_HS_TIMEOUT_S in turn would have needed 100 x 2 s, ten
   * times the timeout, and both ranks would have failed (ok above; the
   * premise is checked here). How fast it joined is printed, not asserted:
   * the time is the machine's. */
  ASSERT(hostile->join_s >= 0);
  ASSERT_GT((N_IDLE + N_SLOW) * RING_HS_TIMEOUT_S, HOSTILE_RDV);
  /* The attack was on: rank 0 closed lures (out of time, or shed). */
  ASSERT_GT(hostile->reopened, 0);
}

TEST_MAIN(T(allreduce_1), T(allreduce_2), T(allreduce_3), T(allreduce_4), T(allreduce_5),
          T(allreduce_6), T(allreduce_7), T(allreduce_8), T(broadcast_allgather_barrier),
          T(allgather_bytes_2), T(allgather_bytes_3), T(allgather_bytes_4),
          T(allgather_bytes_size_mismatch), T(dead_peer_named), T(silent_peer_named),
          T(forged_token_refused), T(rendezvous_retries), T(bad_addresses_are_config_errors),
          T(rendezvous_timeout_names_peer), T(rendezvous_silent_listener_named), T(local_backend),
          T(adopt_bad_rank_closes_fds), T(frames_heartbeats_data_bye), T(frames_bad_magic_named),
          T(frames_wrong_size_named), T(frames_abort_reason_passed_on),
          T(empty_frame_read_early_is_whole), T(busy_rank_reads_before_blaming),
          T(handshake_wire_format), T(refusals_say_nothing),
          T(hostile_connections_do_not_delay_join))
