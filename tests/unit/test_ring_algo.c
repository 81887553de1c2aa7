/* test_ring_algo.c - the TCP collective's all-reduce algorithms
 * (ring_allreduce.c), each forced on the same vectors with real processes on
 * 127.0.0.1: the direct exchange, the segment-pipelined ring and (power-of-
 * two worlds) recursive doubling.
 *
 * Each fixes its order of addition, so each is checked bit for bit against
 * a serial model of that order (direct: x0 + x1 + ... in rank order; ring:
 * chunk k as xk + xk+1 + ... + xk-1; doubling: lower half's sum + upper
 * half's, recursively), on values of mixed magnitudes where the orders
 * really differ (asserted, so the check can fail); every
 * rank's result is compared bitwise with every other's; both agree with a
 * double-precision sum within float tolerance. Odd and even rank counts,
 * sizes of 0, 1, fewer than the ranks, not divisible by them, on both sides
 * of the size threshold, and several segments per chunk with a short last
 * one. The spin before a small exchange blocks (ring_transport.c) gives up
 * on a slow peer, and the algorithms are right with it and without it. And
 * a peer lost in the middle of the ring is named, as in the direct path's
 * tests (test_ring.c). */
#define TEST_TIMEOUT_S 120
#include "test.h"

#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "ctrain/clock.h"
#include "worker/collective/coll_queue.h"
#include "worker/collective/ring.h"
#include "worker/collective/ring_internal.h"

#define MAXW 6
#include "ring_world.h"

static coll_t *connect_rank(int rank, int world, double peer_timeout) {
  ring_config cfg = {.rank = rank,
                     .world = world,
                     .addrs = addrs,
                     .job = "job-algo",
                     .attempt = 1,
                     .token = "algo-token",
                     .rendezvous_timeout = 20.0,
                     .peer_timeout = peer_timeout,
                     .bind_host = "127.0.0.1"};
  coll_t *c = NULL;
  char err[512] = "";
  if (ring_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("rank %d: ring_create: %s", rank, err);
  return c;
}

/* Mixed magnitudes (1e-3 .. 1e3 by rank), so the order of addition shows. */
static float value(int rank, size_t i) {
  uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503 + 7);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  static const float scale[] = {1e-3f, 1.0f, 1e3f, 3e-2f, 7e1f, 0.5f};
  return ((float)(h % 2000001u) / 1e6f - 1.0f) * scale[rank % 6];
}

/* The direct exchange's order: ((x0 + x1) + x2) + ... */
static float model_direct(int world, size_t i) {
  float s = value(0, i);
  for (int r = 1; r < world; r++)
    s = s + value(r, i);
  return s;
}

/* Recursive doubling's order: ranks lo .. lo+len-1 sum as the lower half's
 * sum + the upper half's (len a power of two). */
static float model_doubling_of(int lo, int len, size_t i) {
  if (len == 1)
    return value(lo, i);
  return model_doubling_of(lo, len / 2, i) + model_doubling_of(lo + len / 2, len / 2, i);
}

static float model_doubling(int world, size_t i) {
  return model_doubling_of(0, world, i);
}

static int is_pow2(int w) {
  return (w & (w - 1)) == 0;
}

/* The ring's order: element i of chunk k is xk + xk+1 + ... + xk-1, chunk k
 * being [k*base + min(k, rem), ...) of n = base*world + rem. */
static float model_ring(int world, size_t n, size_t i) {
  size_t base = n / (size_t)world, rem = n % (size_t)world;
  int k = 0;
  while (k + 1 < world) {
    size_t uk = (size_t)(k + 1);
    if (i < uk * base + (uk < rem ? uk : rem))
      break;
    k++;
  }
  float s = value(k, i);
  for (int j = 1; j < world; j++)
    s = s + value((k + j) % world, i);
  return s;
}

/* Floats per segment in ring_allreduce.c is 64 Ki; these sizes give 1 to 3
 * segments per chunk, the last one short. */
static const size_t sizes[] = {0, 1, 2, 3, 5, 64, 4096, 4097, 100003, (size_t)3 * 65536 * 2 + 5};
#define NSIZES  (sizeof(sizes) / sizeof(sizes[0]))
#define MAXN    ((size_t)3 * 65536 * 2 + 5)
#define ALGOS   3
#define PER_RUN (ALGOS * MAXN) /* floats each rank keeps for the cross-rank check */

static float *shared; /* (world, ALGOS, MAXN) each rank's results of the largest size */
static int *differ;   /* (world) whether direct's and ring's models differed somewhere */
static int *differ2;  /* (world) whether direct's and doubling's did */

static const ring_ar_algo algos[ALGOS] = {RING_AR_DIRECT, RING_AR_RING, RING_AR_DOUBLING};
static const char *const algo_names[ALGOS] = {"direct", "ring", "doubling"};

static void algo_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = connect_rank(rank, world, 30.0);
  float *buf = malloc(MAXN * sizeof(float));
  ASSERT(buf);
  for (size_t k = 0; k < NSIZES; k++) {
    size_t n = sizes[k];
    for (int a = 0; a < ALGOS; a++) {
      for (size_t i = 0; i < n; i++)
        buf[i] = value(rank, i);
      ctrain_err rc = ring_allreduce_with(c, buf, n, algos[a]);
      if (algos[a] == RING_AR_DOUBLING && !is_pow2(world)) {
        ASSERT_EQ(rc, CTRAIN_E_INVAL); /* nothing sent: the ring goes on */
        continue;
      }
      if (rc)
        TEST_FAIL_("rank %d n %zu algo %d: %s", rank, n, a, coll_errmsg(c));
      for (size_t i = 0; i < n; i++) {
        float md = model_direct(world, i), mr = model_ring(world, n, i);
        float mb = is_pow2(world) ? model_doubling(world, i) : md;
        float want = a == 0 ? md : a == 1 ? mr : mb;
        if (memcmp(&buf[i], &want, sizeof(float)))
          TEST_FAIL_("rank %d of %d, n %zu, %s [%zu]: %.9g, the model's order gives %.9g", rank,
                     world, n, algo_names[a], i, buf[i], want);
        double exact = 0, mag = 0;
        for (int r = 0; r < world; r++) {
          exact += value(r, i);
          mag += fabs(value(r, i));
        }
        ASSERT_NEAR(buf[i], exact, 1e-6 * mag + 1e-30);
        if (md != mr)
          differ[rank] = 1;
        if (md != mb)
          differ2[rank] = 1;
      }
      /* Every rank's bits, compared by the parent. */
      memcpy(shared + ((size_t)rank * ALGOS + (size_t)a) * MAXN, buf, n * sizeof(float));
    }
  }
  free(buf);
  coll_free(c);
}

static void algo_world(int world) {
  size_t bytes = (size_t)world * PER_RUN * sizeof(float);
  shared = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  differ =
      mmap(NULL, 2 * MAXW * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(shared != MAP_FAILED && differ != MAP_FAILED);
  differ2 = differ + MAXW;
  pick_ports(world);
  ASSERT_EQ(run_world(world, algo_rank, NULL), world);
  for (int r = 1; r < world; r++)
    ASSERT_EQ(memcmp(shared, shared + (size_t)r * PER_RUN, PER_RUN * sizeof(float)), 0);
  /* With 3 or more ranks the two orders give different bits somewhere, so
   * the exact checks above tell the algorithms apart. */
  if (world >= 3)
    ASSERT(differ[0]);
  if (world >= 4 && is_pow2(world))
    ASSERT(differ2[0]);
  munmap(shared, bytes);
  munmap(differ, 2 * MAXW * sizeof(int));
}

TEST(algos_2) {
  algo_world(2);
}

TEST(algos_3) {
  algo_world(3);
}

TEST(algos_4) {
  algo_world(4);
}

TEST(algos_5) {
  algo_world(5);
}

/* All-reduce in parts (coll_allreduce_part, and on the queue's thread,
 * coll_queue.h): the parts of a backward pass (top first, bucket-sized,
 * across chunk boundaries, some empty), or bottom first in uneven sizes,
 * each element gets the whole vector's ring order, bit for bit; a small
 * whole all-reduce queued between parts (synchronized BatchNormalization's
 * statistics) comes back right; sizes on the latency path refuse parts. */
static void parts_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = connect_rank(rank, world, 30.0);
  static const size_t ns[] = {150001, (size_t)3 * 65536 * 2 + 5}; /* above 2 ranks' 512 KiB */
  size_t small = ring_latency_max_bytes(world) / sizeof(float);
  ASSERT(!coll_allreduce_parts(c, small));
  ASSERT(coll_allreduce_parts(c, small + 1));
  ASSERT_EQ(coll_allreduce_part(c, NULL, small, 0, 1), CTRAIN_E_INVAL);
  float *buf = malloc(MAXN * sizeof(float));
  ASSERT(buf);
  for (size_t k = 0; k < sizeof(ns) / sizeof(ns[0]); k++) {
    size_t n = ns[k];
    for (int how = 0; how < 3; how++) {
      for (size_t i = 0; i < n; i++)
        buf[i] = value(rank, i);
      coll_queue *q = NULL;
      if (how == 2)
        ASSERT_OK(coll_queue_create(c, &q));
      float bn[5];
      if (how == 0) { /* top first, 64 Ki-float buckets, then an empty part */
        for (size_t hi = n; hi > 0;) {
          size_t lo = hi > 65536 ? hi - 65536 : 0;
          ASSERT_OK(coll_allreduce_part(c, buf, n, lo, hi));
          hi = lo;
        }
        ASSERT_OK(coll_allreduce_part(c, buf, n, 0, 0));
      } else if (how == 1) { /* bottom first, uneven: [0, 7), [7, 87), [87, 970), ... */
        for (size_t lo = 0, len = 7; lo < n; len = len * 11 + 3) {
          size_t hi2 = lo + len < n ? lo + len : n;
          ASSERT_OK(coll_allreduce_part(c, buf, n, lo, hi2));
          lo = hi2;
        }
      } else { /* on the queue, a whole small all-reduce between the parts */
        ASSERT_OK(coll_queue_part(q, buf, n, n / 2, n));
        for (int j = 0; j < 5; j++)
          bn[j] = (float)(rank + 1) * (float)(j + 1);
        ASSERT_OK(coll_queue_allreduce(q, bn, 5));
        ASSERT_OK(coll_queue_part(q, buf, n, 1000, n / 2));
        ASSERT_OK(coll_queue_drain(q));
        ASSERT_OK(coll_allreduce_part(c, buf, n, 0, 1000)); /* the caller's own, after */
        coll_queue_free(q);
        for (int j = 0; j < 5; j++)
          ASSERT_EQ(bn[j], (float)(world * (world + 1) / 2) * (float)(j + 1));
      }
      for (size_t i = 0; i < n; i++) {
        float want = model_ring(world, n, i);
        if (memcmp(&buf[i], &want, sizeof(float)))
          TEST_FAIL_("rank %d of %d, n %zu, parts %d [%zu]: %.9g, the ring's order gives %.9g",
                     rank, world, n, how, i, buf[i], want);
      }
    }
  }
  free(buf);
  coll_free(c);
}

TEST(parts_are_the_whole_vectors_bits) {
  for (int world = 2; world <= 4; world++) {
    pick_ports(world);
    ASSERT_EQ(run_world(world, parts_rank, NULL), world);
  }
}

/* The automatic choice: up to ring_latency_max_bytes(world) recursive
 * doubling when the world is a power of two, else direct; the ring above.
 * With the spin off (every wait blocks in poll). */
static void auto_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = connect_rank(rank, world, 30.0);
  ring_t *r = c->impl;
  r->spin_max_s = r->spin_s = 0;
  size_t edge = ring_latency_max_bytes(world) / sizeof(float);
  for (size_t n = edge; n <= edge + 1; n++) {
    float *buf = malloc(n * sizeof(float));
    ASSERT(buf);
    for (size_t i = 0; i < n; i++)
      buf[i] = value(rank, i);
    ASSERT_OK(coll_allreduce_sum(c, buf, n));
    for (size_t i = 0; i < n; i++) {
      float want = n > edge         ? model_ring(world, n, i)
                   : is_pow2(world) ? model_doubling(world, i)
                                    : model_direct(world, i);
      if (memcmp(&buf[i], &want, sizeof(float)))
        TEST_FAIL_("rank %d n %zu [%zu]: %.9g vs %.9g", rank, n, i, buf[i], want);
    }
    free(buf);
  }
  coll_free(c);
}

/* The latency path's limit by world: 512 KiB for 2 ranks (the ring's own
 * bytes); else 64 KiB while a rank sends at most 128 KiB, never under
 * 16 KiB. */
TEST(latency_limit_by_world) {
  ASSERT_EQ(ring_latency_max_bytes(2), 512u << 10);
  ASSERT_EQ(ring_latency_max_bytes(3), 64u << 10);         /* direct: 2 vectors sent */
  ASSERT_EQ(ring_latency_max_bytes(4), 64u << 10);         /* doubling: 2 */
  ASSERT_EQ(ring_latency_max_bytes(5), 32u << 10);         /* direct: 4 */
  ASSERT_EQ(ring_latency_max_bytes(8), (128u << 10) / 3);  /* doubling: 3 */
  ASSERT_EQ(ring_latency_max_bytes(16), 32u << 10);        /* doubling: 4 */
  ASSERT_EQ(ring_latency_max_bytes(17), 16u << 10);        /* direct: 16, the floor */
  ASSERT_EQ(ring_latency_max_bytes(64), (128u << 10) / 6); /* doubling: 6 */
  ASSERT_EQ(ring_latency_max_bytes(65), 16u << 10);
}

TEST(auto_choice_by_size) {
  pick_ports(3);
  ASSERT_EQ(run_world(3, auto_rank, NULL), 3);
  pick_ports(4);
  ASSERT_EQ(run_world(4, auto_rank, NULL), 4);
}

/* Rank 1 answers each small all-reduce 3 ms late, far past the spin's
 * budget (RING_SPIN_MAX_US): rank 0's budget halves at each and is off
 * after a few; the sums stay right. */
static void slow_peer_rank(int rank, int world, void *arg) {
  (void)arg;
  coll_t *c = connect_rank(rank, world, 30.0);
  ring_t *r = c->impl;
  ASSERT(r->spin_s > 0);
  for (int k = 0; k < 12; k++) {
    float v[4] = {1, 2, 3, (float)k};
    if (rank == 1)
      usleep(3000);
    ASSERT_OK(coll_allreduce_sum(c, v, 4));
    ASSERT_EQ(v[0], 2.0f);
    ASSERT_EQ(v[3], 2.0f * (float)k);
  }
  if (rank == 0) {
    ASSERT_EQ(r->spin_s, 0.0);
    ASSERT(r->spin_probe > 0);
  }
  coll_free(c);
}

TEST(spin_gives_up_on_a_slow_peer) {
  pick_ports(2);
  ASSERT_EQ(run_world(2, slow_peer_rank, NULL), 2);
}

/* Rank 2 of 3 dies (SIGKILL) or stops (SIGSTOP) while the others are in a
 * ring all-reduce of several segments: they fail naming it within the peer
 * timeout (1 s) plus slack, and stay failed. */
static void ring_loss_rank(int rank, int world, void *arg) {
  int sig = *(int *)arg;
  coll_t *c = connect_rank(rank, world, 1.0);
  size_t n = (size_t)3 * 65536 * 3;
  float *buf = calloc(n, sizeof(float));
  ASSERT(buf);
  ASSERT_OK(ring_allreduce_with(c, buf, n, RING_AR_RING));
  if (rank == 2) {
    usleep(100 * 1000);
    kill(getpid(), sig);
    if (sig == SIGSTOP)
      pause();
  }
  double t0 = ctrain_mono_s();
  ctrain_err rc = ring_allreduce_with(c, buf, n, RING_AR_RING);
  double dt = ctrain_mono_s() - t0;
  ASSERT_EQ(rc, CTRAIN_E_PEER);
  ASSERT_STR_CONTAINS(coll_errmsg(c), "rank 2 (");
  ASSERT_STR_CONTAINS(coll_errmsg(c), sig == SIGSTOP ? "silent" : "died?");
  /* A silent peer is named only once the peer timeout has passed since its
   * last frame (a floor). That frame, a heartbeat (every timeout / 5 =
   * 200 ms), can come up to one interval before rank 2 stops, which is
   * 100 ms after t0: so at least 1000 - 200 ms after t0 (a loaded CI run
   * saw 940). No wall-clock ceiling (one flakes on a loaded machine): the error above says which
   * peer and why, and a ring that never gives up hangs to ctest's TIMEOUT. */
  if (sig == SIGSTOP)
    ASSERT_GE(dt * 1000, 1000 - 200 - 50);
  ASSERT_EQ(ring_allreduce_with(c, buf, n, RING_AR_RING), CTRAIN_E_PEER);
  ASSERT_EQ(coll_allreduce_sum(c, buf, 3), CTRAIN_E_PEER);
  free(buf);
  coll_free(c);
}

TEST(ring_dead_peer_named) {
  run_loss_world(ring_loss_rank, SIGKILL);
}

TEST(ring_silent_peer_named) {
  run_loss_world(ring_loss_rank, SIGSTOP);
}

TEST_MAIN(T(algos_2), T(algos_3), T(algos_4), T(algos_5), T(parts_are_the_whole_vectors_bits),
          T(latency_limit_by_world), T(auto_choice_by_size), T(spin_gives_up_on_a_slow_peer),
          T(ring_dead_peer_named), T(ring_silent_peer_named))
