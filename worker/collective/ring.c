/* ring.c - the TCP collective (ring.h): broadcast, all-gather and barrier
 * over ring_exchange (ring_transport.c; the all-reduce is ring_allreduce.c's),
 * and the coll_t's life: create (ring_handshake.c's rendezvous), adopt,
 * destroy. */
#include "ctrain/clock.h"
#include "worker/collective/ring.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/log.h"
#include "ctrain/thread.h"
#include "worker/collective/ring_internal.h"

/* ---------------------------------------------------------------------------
 * Collectives
 * ------------------------------------------------------------------------- */

/* Broadcast along the ring (root -> root+1 -> ...): each rank receives, then
 * forwards, so the root's bandwidth is not divided by N. */
static ctrain_err ring_broadcast(coll_t *c, void *buf, size_t bytes, int root) {
  ring_t *r = c->impl;
  ctrain_err result = CTRAIN_OK;
  int W = r->world, next = (r->rank + 1) % W, prev = (r->rank + W - 1) % W;
  if (W == 1)
    return r->failed;
  ctrain_mutex_lock(&r->mu);
  if (r->rank != root) {
    result = ring_exchange(c, -1, NULL, 0, prev, buf, bytes);
    if (result)
      goto out;
  }
  if (next != root)
    result = ring_exchange(c, next, buf, bytes, -1, NULL, 0);
out:
  ctrain_mutex_unlock(&r->mu);
  return result;
}

/* N-1 ring steps: in step s rank r passes slot (r-s) on to r+1 and takes
 * slot (r-s-1) from r-1, so every slot travels the ring once. */
static ctrain_err ring_allgather_bytes(coll_t *c, const void *in, size_t bytes, void *out) {
  ring_t *r = c->impl;
  ctrain_err result = CTRAIN_OK;
  int W = r->world, next = (r->rank + 1) % W, prev = (r->rank + W - 1) % W;
  uint8_t *o = out;
  if (bytes)
    memmove(o + (size_t)r->rank * bytes, in, bytes);
  if (W == 1)
    return r->failed;
  ctrain_mutex_lock(&r->mu);
  for (int s = 0; s < W - 1; s++) {
    int sc = ((r->rank - s) % W + W) % W, rc = ((r->rank - s - 1) % W + W) % W;
    result =
        ring_exchange(c, next, o + (size_t)sc * bytes, bytes, prev, o + (size_t)rc * bytes, bytes);
    if (result)
      break;
  }
  ctrain_mutex_unlock(&r->mu);
  return result;
}

/* An all-gather of one 4-byte word per rank (the frames it has always sent). */
static ctrain_err ring_barrier(coll_t *c) {
  ring_t *r = c->impl;
  float one = 1.0f, *all = calloc((size_t)r->world, sizeof(float));
  ctrain_err result;
  if (!all)
    return CTRAIN_E_NOMEM;
  result = ring_allgather_bytes(c, &one, sizeof(one), all);
  free(all);
  return result;
}

static void ring_destroy(coll_t *c) {
  ring_t *r = c->impl;
  if (r) {
    if (r->hb_started) {
      ctrain_mutex_lock(&r->mu);
      r->stop = 1;
      ctrain_mutex_unlock(&r->mu);
      pthread_join(r->hb_thread, NULL);
    }
    if (r->peers) {
      ring_say_goodbye(c);
      for (int i = 0; i < r->world; i++)
        if (r->peers[i].fd >= 0)
          close(r->peers[i].fd);
    }
    free(r->peers);
    free(r->pfd);
    free(r->pidx);
    free(r->tmp);
    pthread_mutex_destroy(&r->mu);
    free(r);
  }
  free(c);
}

static const coll_ops ring_ops = {
    .name = "ring",
    .allreduce_sum = ring_allreduce_sum,
    .allreduce_parts = ring_allreduce_parts,
    .allreduce_part = ring_allreduce_part,
    .broadcast = ring_broadcast,
    .barrier = ring_barrier,
    .allgather_bytes = ring_allgather_bytes,
    .destroy = ring_destroy,
};

/* A ring of `world` unconnected peers named by addrs (NULL: "fd"), or NULL
 * when out of memory. Freed with ring_destroy. */
static coll_t *ring_new(int rank, int world, const char *const *addrs, double peer_timeout) {
  coll_t *c = calloc(1, sizeof(*c));
  ring_t *r = calloc(1, sizeof(*r));
  if (!c || !r) {
    free(c);
    free(r);
    return NULL;
  }
  c->ops = &ring_ops;
  c->impl = r;
  c->rank = rank;
  c->world = world;
  r->rank = rank;
  r->world = world;
  r->peer_timeout = peer_timeout;
  r->hb_interval = peer_timeout / 5;
  if (r->hb_interval > 2.0)
    r->hb_interval = 2.0;
  if (r->hb_interval < 0.01)
    r->hb_interval = 0.01;
  pthread_mutex_init(&r->mu, NULL);
  r->peers = calloc((size_t)world, sizeof(ring_peer));
  r->pfd = calloc((size_t)world, sizeof(*r->pfd));
  r->pidx = calloc((size_t)world, sizeof(*r->pidx));
  if (!r->peers || !r->pfd || !r->pidx) {
    ring_destroy(c);
    return NULL;
  }
  for (int i = 0; i < world; i++) {
    r->peers[i].fd = -1;
    r->peers[i].rank = i;
    snprintf(r->peers[i].addr, sizeof(r->peers[i].addr), "%s", addrs ? addrs[i] : "fd");
  }
  return c;
}

/* Every peer connected: the clocks start, and the heartbeat thread. */
static ctrain_err ring_start(coll_t *c, int heartbeat) {
  ring_t *r = c->impl;
  double t = ctrain_mono_s();
  for (int i = 0; i < r->world; i++)
    r->peers[i].last_rx = r->peers[i].last_tx = t;
  ring_spin_init(r);
  if (r->world > 1 && heartbeat) {
    if (pthread_create(&r->hb_thread, NULL, ring_hb_main, c))
      return CTRAIN_E_NOMEM;
    r->hb_started = 1;
  }
  return CTRAIN_OK;
}

ctrain_err ring_create(const ring_config *cfg, coll_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  coll_t *c = NULL;
  double start = ctrain_mono_s(), deadline = start + cfg->rendezvous_timeout;
  *out = NULL;
  if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world || !ring_hs_cfg_ok(cfg)) {
    snprintf(errbuf, errlen, "ring: bad config (rank %d of %d, job and token required)", cfg->rank,
             cfg->world);
    return CTRAIN_E_INVAL;
  }
  /* Every address parses (port in range) before anything is opened: a bad
   * one is a config error (78), never a failed listen (75). */
  for (int j = 0; j < cfg->world; j++) {
    char h[TFCONFIG_HOST_MAX + 1], p[TFCONFIG_PORT_MAX + 1], why[384];
    if (tfconfig_split_hostport(cfg->addrs[j], h, sizeof(h), p, sizeof(p), why, sizeof(why))) {
      snprintf(errbuf, errlen, "ring: rank %d%s: %s", j, j == cfg->rank ? " (own address)" : "",
               why);
      return CTRAIN_E_CONFIG;
    }
  }
  c = ring_new(cfg->rank, cfg->world, cfg->addrs, cfg->peer_timeout);
  if (!c)
    return CTRAIN_E_NOMEM;
  if (cfg->world > 1)
    result = ring_rendezvous(cfg, c->impl, start, deadline, errbuf, errlen);
  if (!result)
    result = ring_start(c, 1);
  if (result)
    goto out;
  LOG_INFO("rendezvous: rank %d of %d connected in %.2f s", cfg->rank, cfg->world,
           ctrain_mono_s() - start);
  *out = c;
  c = NULL;
out:
  if (c) {
    ((ring_t *)c->impl)->failed = result; /* no BYE on a failed setup */
    ring_destroy(c);
  }
  return result;
}

ctrain_err ring_adopt(int rank, int world, const int *fds, double peer_timeout, int heartbeat,
                      coll_t **out) {
  ctrain_err result = CTRAIN_OK;
  coll_t *c = NULL;
  *out = NULL;
  if (world < 1 || rank < 0 || rank >= world) {
    result = CTRAIN_E_INVAL;
    goto out;
  }
  c = ring_new(rank, world, NULL, peer_timeout);
  if (!c) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  ring_t *r = c->impl;
  for (int i = 0; i < world; i++) {
    if (i != rank) {
      r->peers[i].fd = fds[i]; /* taken: ring_destroy closes it */
      ring_set_nonblock(fds[i]);
    }
  }
  result = ring_start(c, heartbeat);
  if (result) {
    r->failed = result; /* no BYE */
    goto out;
  }
  *out = c;
  c = NULL;
out:
  if (c) {
    ring_destroy(c);
  } else if (!*out) {
    for (int i = 0; i < world; i++)
      if (i != rank && fds[i] >= 0)
        close(fds[i]);
  }
  return result;
}
