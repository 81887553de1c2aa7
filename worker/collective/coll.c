/* coll.c - the collective dispatch and the single-rank backend. */
#include "worker/collective/coll.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static ctrain_err local_allreduce(coll_t *c, float *buf, size_t n) {
  (void)c;
  (void)buf;
  (void)n;
  return CTRAIN_OK;
}

static ctrain_err local_broadcast(coll_t *c, void *buf, size_t bytes, int root) {
  (void)c;
  (void)buf;
  (void)bytes;
  return root == 0 ? CTRAIN_OK : CTRAIN_E_INVAL;
}

static ctrain_err local_barrier(coll_t *c) {
  (void)c;
  return CTRAIN_OK;
}

static ctrain_err local_allgather_bytes(coll_t *c, const void *in, size_t bytes, void *out) {
  (void)c;
  if (bytes)
    memmove(out, in, bytes);
  return CTRAIN_OK;
}

static void local_destroy(coll_t *c) {
  free(c);
}

static const coll_ops local_ops = {
    .name = "local",
    .allreduce_sum = local_allreduce,
    .broadcast = local_broadcast,
    .barrier = local_barrier,
    .allgather_bytes = local_allgather_bytes,
    .destroy = local_destroy,
};

ctrain_err coll_local_create(coll_t **out) {
  coll_t *c = calloc(1, sizeof(*c));
  *out = NULL;
  if (!c)
    return CTRAIN_E_NOMEM;
  c->ops = &local_ops;
  c->rank = 0;
  c->world = 1;
  *out = c;
  return CTRAIN_OK;
}

ctrain_err coll_allreduce_sum(coll_t *c, float *buf, size_t n) {
  return c->ops->allreduce_sum(c, buf, n);
}

int coll_allreduce_parts(coll_t *c, size_t n) {
  return c->ops->allreduce_parts ? c->ops->allreduce_parts(c, n) : 0;
}

ctrain_err coll_allreduce_part(coll_t *c, float *buf, size_t n, size_t lo, size_t hi) {
  if (!coll_allreduce_parts(c, n) || lo > hi || hi > n)
    return CTRAIN_E_INVAL;
  return c->ops->allreduce_part(c, buf, n, lo, hi);
}

ctrain_err coll_broadcast(coll_t *c, void *buf, size_t bytes, int root) {
  if (root < 0 || root >= c->world)
    return CTRAIN_E_INVAL;
  return c->ops->broadcast(c, buf, bytes, root);
}

ctrain_err coll_barrier(coll_t *c) {
  return c->ops->barrier(c);
}

ctrain_err coll_allgather_bytes(coll_t *c, const void *in, size_t bytes, void *out) {
  if (c->world > 1 && bytes > SIZE_MAX / (size_t)c->world)
    return CTRAIN_E_INVAL;
  return c->ops->allgather_bytes(c, in, bytes, out);
}

const char *coll_errmsg(const coll_t *c) {
  return c->err;
}

void coll_free(coll_t *c) {
  if (c)
    c->ops->destroy(c);
}
