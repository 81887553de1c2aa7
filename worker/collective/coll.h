/* worker/collective/coll.h - the collective interface the train loop talks to.
 *
 * A backend (the TCP ring in ring.h, NCCL in coll_nccl.h, the single-rank local one
 * here) fills a coll_ops table; callers only use the coll_* wrappers and never
 * know which backend runs. All operations are synchronous and must be called
 * by every rank in the same order. On failure the backend's message (naming
 * the peer) is in coll_errmsg(); a failed collective stays failed. */
#ifndef CTRAIN_COLL_H
#define CTRAIN_COLL_H

#include <stddef.h>

#include "ctrain/err.h"

typedef struct coll coll_t;

typedef struct {
  const char *name;
  /* In place: buf[i] = sum over ranks of buf[i], bitwise identical on all ranks. */
  ctrain_err (*allreduce_sum)(coll_t *c, float *buf, size_t n);
  /* Optional (NULL: never). allreduce_parts: whether a vector of n floats
   * may be all-reduced a part at a time; allreduce_part then sums the
   * elements [lo, hi) of it exactly as allreduce_sum of the whole vector
   * would (the same bits), leaving the rest alone. */
  int (*allreduce_parts)(coll_t *c, size_t n);
  ctrain_err (*allreduce_part)(coll_t *c, float *buf, size_t n, size_t lo, size_t hi);
  /* Copies `bytes` bytes of buf from `root` to every other rank. */
  ctrain_err (*broadcast)(coll_t *c, void *buf, size_t bytes, int root);
  ctrain_err (*barrier)(coll_t *c);
  /* out (world * bytes) receives every rank's `in` (bytes) in rank order; `in`
   * may be out's own slot (out + rank * bytes). */
  ctrain_err (*allgather_bytes)(coll_t *c, const void *in, size_t bytes, void *out);
  void (*destroy)(coll_t *c);
} coll_ops;

struct coll {
  const coll_ops *ops;
  int rank;
  int world;
  char err[512]; /* last error, naming the peer */
  void *impl;    /* backend state, owned by the backend */
};

/* A world of one: every operation is a copy or a no-op. *out is owned by the
 * caller (coll_free). */
CTRAIN_NODISCARD ctrain_err coll_local_create(coll_t **out);

CTRAIN_NODISCARD ctrain_err coll_allreduce_sum(coll_t *c, float *buf, size_t n);
/* Whether buf (n) may be all-reduced in parts, each by
 * coll_allreduce_part(c, buf, n, lo, hi): every element of [0, n) in exactly
 * one part, the parts in the same order on every rank (any order, any
 * sizes); the result is allreduce_sum's, bitwise. 0 for a backend without
 * parts, a world of one, or a vector small enough for a latency-bound
 * algorithm. */
int coll_allreduce_parts(coll_t *c, size_t n);
CTRAIN_NODISCARD ctrain_err coll_allreduce_part(coll_t *c, float *buf, size_t n, size_t lo,
                                                size_t hi);
CTRAIN_NODISCARD ctrain_err coll_broadcast(coll_t *c, void *buf, size_t bytes, int root);
CTRAIN_NODISCARD ctrain_err coll_barrier(coll_t *c);
/* out (world, bytes) receives every rank's `in` (bytes) in rank order; every
 * rank passes the same `bytes` (a rank that does not fails the operation on
 * its neighbours, CTRAIN_E_PEER). `in` may be out + rank * bytes (in place);
 * any other overlap is undefined. Both borrowed. CTRAIN_E_INVAL when
 * bytes * world overflows. */
CTRAIN_NODISCARD ctrain_err coll_allgather_bytes(coll_t *c, const void *in, size_t bytes,
                                                 void *out);
/* Borrowed; valid until the next operation or coll_free. */
const char *coll_errmsg(const coll_t *c);
/* Closes connections (telling peers this is an orderly end). Accepts NULL. */
void coll_free(coll_t *c);

#endif
