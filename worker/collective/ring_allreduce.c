/* ring_allreduce.c - the TCP collective's all-reduce (sum of floats, in
 * place), chosen by size and world; every rank gets the same bits any way.
 *
 *   doubling (n * 4 <= ring_latency_max_bytes(W), world a power of two):
 *           recursive doubling, log2(W) exchanges of the whole vector with
 *           one peer each (rank ^ 1, ^ 2, ...). Lower latency than the
 *           direct exchange with 4 ranks (half the frames and syscalls; each
 *           rank sends 2 frames, not 3); with 2 ranks it is the direct
 *           exchange.
 *   direct  (n * 4 <= ring_latency_max_bytes(W), other worlds): latency-bound. Every rank sends its
 *           whole vector to every other in one round (all frames in flight
 *           at once), then sums the W vectors in rank order: one round trip
 *           instead of the ring's 2(W-1) dependent steps, and the same order
 *           on every rank, so the same bits.
 *           Up to 64 KiB while a rank sends at most 128 KiB so (2-4 ranks):
 *           there the ring's 2(W-1) dependent exchanges, each a wake-up,
 *           took longer than the one round; larger worlds keep it to smaller
 *           vectors (never below 16 KiB), where the ring's bytes win.
 *           Two ranks up to 512 KiB: there the whole vector in one exchange
 *           is the ring's bytes without its second, dependent exchange, and
 *           the same bits (a + b == b + a); it made the MLP's 407 KB of
 *           gradients faster than the ring did (docs/benchmarks.md, "Two
 *           workers on two CPUs: the machine's ceiling"). From 1 MiB the
 *           ring's pipelined segments were faster (bench_allreduce).
 *   ring    (larger): bandwidth-bound. Reduce-scatter then all-gather around
 *           the ring, each chunk cut into segments, and the loops turned
 *           inside out: segment g goes through all 2(W-1) steps before
 *           segment g+1 starts. So what a rank sends was reduced or received
 *           one step earlier and is still in cache, and the vector is read
 *           from memory once and written once (a chunk-at-a-time ring writes
 *           a reduced chunk of n/W out of cache and reads it back next step).
 *           Chunk k is summed in the fixed order k, k+1, ..., k-1 (each rank
 *           adds its own value to the partial sum it receives), and the
 *           all-gather hands every rank the same bits.
 *
 * Both run under r->mu, over the progress engine of ring_transport.c, so
 * heartbeats, peer-lost detection and the frame checks are those of every
 * other collective. */
#include "worker/collective/ring_internal.h"

#include <stdlib.h>
#include <string.h>

#include "ctrain/buf.h"
#include "ctrain/thread.h"

/* Floats per segment of the pipelined ring (256 KiB): a segment in flight
 * per link, the receive buffer and the segment being reduced stay in a
 * core's L2, and a 64 MiB vector still takes few enough exchanges that their
 * fixed cost (a sendmsg, a poll, two recvs, maybe a wake-up) stays small:
 * 64 KiB segments cost 4 ranks markedly more CPU per 64 MiB all-reduce,
 * 128 KiB to 1 MiB the same as this. */
#define RING_SEG_FLOATS ((size_t)64 << 10)

/* Floats of the rank-order sum's accumulator (on the stack, in L1). */
#define SUM_BLOCK 512

typedef float v4f __attribute__((vector_size(16)));

void ring_add(float *d, const float *a, const float *b, size_t n) {
  size_t i = 0;
  /* Unaligned vector loads through memcpy (compiled to movups): the
   * compiler does not vectorize this loop itself at -O2, since d may be a or
   * b. Every lane adds the same two operands as the scalar loop would. */
  for (; i + 16 <= n; i += 16) {
    v4f x0, x1, x2, x3, y0, y1, y2, y3;
    memcpy(&x0, a + i, 16);
    memcpy(&x1, a + i + 4, 16);
    memcpy(&x2, a + i + 8, 16);
    memcpy(&x3, a + i + 12, 16);
    memcpy(&y0, b + i, 16);
    memcpy(&y1, b + i + 4, 16);
    memcpy(&y2, b + i + 8, 16);
    memcpy(&y3, b + i + 12, 16);
    x0 += y0;
    x1 += y1;
    x2 += y2;
    x3 += y3;
    memcpy(d + i, &x0, 16);
    memcpy(d + i + 4, &x1, 16);
    memcpy(d + i + 8, &x2, 16);
    memcpy(d + i + 12, &x3, 16);
  }
  for (; i < n; i++)
    d[i] = a[i] + b[i];
}

static void chunk(size_t n, int world, int c, size_t *off, size_t *len) {
  size_t base = n / (size_t)world, rem = n % (size_t)world, uc = (size_t)c;
  *off = uc * base + (uc < rem ? uc : rem);
  *len = base + (uc < rem ? 1 : 0);
}

static int mod(int a, int w) {
  return ((a % w) + w) % w;
}

/* buf = src[0] + src[1] + ... + src[W-1], added in that order for every
 * element; src[rank] is buf itself, read block by block before the block
 * is written. */
static void sum_in_rank_order(float *buf, const float *const *src, int W, size_t n) {
  float acc[SUM_BLOCK];
  for (size_t at = 0; at < n; at += SUM_BLOCK) {
    size_t len = n - at < SUM_BLOCK ? n - at : SUM_BLOCK;
    ring_add(acc, src[0] + at, src[1] + at, len);
    for (int k = 2; k < W; k++)
      ring_add(acc, acc, src[k] + at, len);
    memcpy(buf + at, acc, len * sizeof(float));
  }
}

/* The direct exchange: every other rank's vector into r->tmp (slot k for
 * rank k, ours unused), all frames at once, then the rank-order sum. */
static ctrain_err allreduce_direct(coll_t *c, float *buf, size_t n) {
  ring_t *r = c->impl;
  int W = r->world;
  const float *src[64];
  const float **srcp = W <= 64 ? src : NULL;
  ctrain_err result = ctrain_grow(&r->tmp, &r->tmp_cap, n * (size_t)W, sizeof(float), 1024, 0);
  if (!result && !srcp) {
    srcp = malloc((size_t)W * sizeof(*srcp));
    result = srcp ? CTRAIN_OK : CTRAIN_E_NOMEM;
  }
  if (result)
    goto out;
  ring_post_begin(c);
  for (int k = 0; k < W; k++) {
    srcp[k] = k == r->rank ? buf : r->tmp + (size_t)k * n;
    if (k == r->rank)
      continue;
    ring_post_send(c, k, buf, n * sizeof(float));
    result = ring_post_recv(c, k, r->tmp + (size_t)k * n, n * sizeof(float));
    if (result)
      goto out;
  }
  result = ring_progress(c, 0);
  if (!result)
    sum_in_rank_order(buf, srcp, W, n);
out:
  if (srcp != src)
    free(srcp);
  return result;
}

/* Recursive doubling (W a power of two): in step d = 1, 2, 4, ... rank r
 * swaps its whole vector with rank r ^ d and adds, lower group's sum first,
 * so both get the same bits: log2(W) exchanges of one frame each. */
static ctrain_err allreduce_doubling(coll_t *c, float *buf, size_t n) {
  ring_t *r = c->impl;
  int me = r->rank;
  ctrain_err result = ctrain_grow(&r->tmp, &r->tmp_cap, n, sizeof(float), 1024, 0);
  for (int d = 1; !result && d < r->world; d <<= 1) {
    result = ring_exchange(c, me ^ d, buf, n * sizeof(float), me ^ d, r->tmp, n * sizeof(float));
    if (!result && (me & d))
      ring_add(buf, r->tmp, buf, n);
    else if (!result)
      ring_add(buf, buf, r->tmp, n);
  }
  return result;
}

/* Where segment g of a piece of len elements starts (clamped to len). */
static size_t seg_at(size_t len, size_t g) {
  size_t at = g * RING_SEG_FLOATS;
  return at < len ? at : len;
}

/* Piece k of the part [lo, hi): chunk k of the whole vector (n) cut to the
 * part, *off into buf, *len floats (0 where they do not meet). The whole
 * vector's pieces are its chunks. */
static void piece(size_t n, int W, int k, size_t lo, size_t hi, size_t *off, size_t *len) {
  size_t co, cl;
  chunk(n, W, k, &co, &cl);
  size_t a = co > lo ? co : lo, b = co + cl < hi ? co + cl : hi;
  *off = a;
  *len = b > a ? b - a : 0;
}

/* Segment g of piece k: *off into buf, *len floats (0 past the piece's end). */
static void segment(size_t n, int W, int k, size_t lo, size_t hi, size_t g, size_t *off,
                    size_t *len) {
  size_t po, pl;
  piece(n, W, k, lo, hi, &po, &pl);
  size_t a = seg_at(pl, g), b = seg_at(pl, g + 1);
  *off = po + a;
  *len = b - a;
}

/* The pipelined ring over the part [lo, hi) of a vector of n (the whole
 * vector: 0, n). In reduce-scatter step s rank r sends segment g of piece
 * r-s to r+1 and adds segment g of piece r-s-1 from r-1 to its own; after
 * W-1 steps it holds piece r+1 of the sum. In all-gather step s it sends
 * piece r+1-s and receives piece r-s in place. Every rank cuts every piece
 * into the same number of segments (from the largest piece), so the frames
 * on each link agree in number, order and size; some may be empty. The
 * pieces are the whole vector's chunks cut to the part, so an element is
 * summed in the same order (its chunk's k, k+1, ..., k-1) whichever part it
 * travels in: parts give the whole vector's bits. */
static ctrain_err allreduce_ring(coll_t *c, float *buf, size_t n, size_t lo, size_t hi) {
  ring_t *r = c->impl;
  int W = r->world, me = r->rank, next = (me + 1) % W, prev = (me + W - 1) % W;
  size_t maxc = 0;
  for (int k = 0; k < W; k++) {
    size_t po, pl;
    piece(n, W, k, lo, hi, &po, &pl);
    maxc = pl > maxc ? pl : maxc;
  }
  size_t nseg = (maxc + RING_SEG_FLOATS - 1) / RING_SEG_FLOATS;
  ctrain_err result =
      ctrain_grow(&r->tmp, &r->tmp_cap, maxc < RING_SEG_FLOATS ? maxc : RING_SEG_FLOATS,
                  sizeof(float), 1024, 0);
  for (size_t g = 0; !result && g < nseg; g++) {
    for (int s = 0; !result && s < W - 1; s++) {
      size_t so, sl, ro, rl;
      segment(n, W, mod(me - s, W), lo, hi, g, &so, &sl);
      segment(n, W, mod(me - s - 1, W), lo, hi, g, &ro, &rl);
      result =
          ring_exchange(c, next, buf + so, sl * sizeof(float), prev, r->tmp, rl * sizeof(float));
      if (!result)
        ring_add(buf + ro, r->tmp, buf + ro, rl);
    }
    for (int s = 0; !result && s < W - 1; s++) {
      size_t so, sl, ro, rl;
      segment(n, W, mod(me + 1 - s, W), lo, hi, g, &so, &sl);
      segment(n, W, mod(me - s, W), lo, hi, g, &ro, &rl);
      result =
          ring_exchange(c, next, buf + so, sl * sizeof(float), prev, buf + ro, rl * sizeof(float));
    }
  }
  return result;
}

size_t ring_latency_max_bytes(int world) {
  if (world < 2)
    return RING_LATENCY_MAX_BYTES;
  if (world == 2)
    return RING_LATENCY_MAX_BYTES_2;
  size_t sends = 0; /* whole vectors a rank sends: log2(W) doubling, W-1 direct */
  if ((world & (world - 1)) == 0)
    for (int w = world; w > 1; w >>= 1)
      sends++;
  else
    sends = (size_t)world - 1;
  size_t max = RING_LATENCY_SEND_BYTES / sends;
  if (max > RING_LATENCY_MAX_BYTES)
    max = RING_LATENCY_MAX_BYTES;
  return max < RING_SMALL_BYTES ? RING_SMALL_BYTES : max;
}

ctrain_err ring_allreduce_with(coll_t *c, float *buf, size_t n, ring_ar_algo algo) {
  ring_t *r = c->impl;
  ctrain_err result;
  int pow2 = (r->world & (r->world - 1)) == 0;
  if (algo == RING_AR_DOUBLING && !pow2)
    return CTRAIN_E_INVAL;
  if (n == 0 || r->world == 1)
    return r->failed;
  if (algo == RING_AR_AUTO && n * sizeof(float) > ring_latency_max_bytes(r->world))
    algo = RING_AR_RING;
  else if (algo == RING_AR_AUTO)
    algo = pow2 ? RING_AR_DOUBLING : RING_AR_DIRECT;
  ctrain_mutex_lock(&r->mu);
  if (r->failed)
    result = r->failed;
  else if (algo == RING_AR_DIRECT)
    result = allreduce_direct(c, buf, n);
  else if (algo == RING_AR_DOUBLING)
    result = allreduce_doubling(c, buf, n);
  else
    result = allreduce_ring(c, buf, n, 0, n);
  ctrain_mutex_unlock(&r->mu);
  return result;
}

int ring_allreduce_parts(coll_t *c, size_t n) {
  ring_t *r = c->impl;
  return r->world > 1 && n * sizeof(float) > ring_latency_max_bytes(r->world);
}

ctrain_err ring_allreduce_part(coll_t *c, float *buf, size_t n, size_t lo, size_t hi) {
  ring_t *r = c->impl;
  ctrain_err result;
  if (!ring_allreduce_parts(c, n) || lo > hi || hi > n)
    return CTRAIN_E_INVAL;
  ctrain_mutex_lock(&r->mu);
  result = r->failed ? r->failed : allreduce_ring(c, buf, n, lo, hi);
  ctrain_mutex_unlock(&r->mu);
  return result;
}

ctrain_err ring_allreduce_sum(coll_t *c, float *buf, size_t n) {
  return ring_allreduce_with(c, buf, n, RING_AR_AUTO);
}
