/* coll_nccl.c - NCCL behind coll.h: unique id over the authenticated ring,
 * non-blocking init and operations polled under the peer timeout, abort on
 * failure (see coll_nccl.h). */
#include "ctrain/clock.h"
#include "worker/collective/coll_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  coll_t *boot;
  ncclComm_t comm;
  cudaStream_t stream;
  int device;
  double timeout;
  void *scratch; /* device staging for host buffers */
  size_t scratch_bytes;
  int aborted;
} nccl_impl;

/* After a failure: abort the communicator (unblocks every pending NCCL
 * call), then let the ring say which peer is gone. */
static ctrain_err nccl_fail(coll_t *c, ctrain_err code, const char *what) {
  nccl_impl *n = c->impl;
  char msg[256];
  snprintf(msg, sizeof(msg), "%s", what);
  if (n->comm && !n->aborted) {
    ncclCommAbort(n->comm);
    n->aborted = 1;
    n->comm = NULL;
  }
  if (n->boot && n->boot->world > 1 && coll_barrier(n->boot) != CTRAIN_OK) {
    snprintf(c->err, sizeof(c->err), "NCCL rank %d: %s; aborted; the ring reports: %s", c->rank,
             msg, coll_errmsg(n->boot));
    return CTRAIN_E_PEER;
  }
  snprintf(c->err, sizeof(c->err),
           "NCCL rank %d: %s; aborted (peer unknown: the ring sees every "
           "peer alive)",
           c->rank, msg);
  return code;
}

/* Polls the communicator (and, when `stream_too`, the stream) until neither
 * is in progress, an error shows, or the timeout passes. */
static ctrain_err nccl_wait(coll_t *c, const char *op, int stream_too) {
  nccl_impl *n = c->impl;
  char what[200];
  double deadline = ctrain_mono_s() + n->timeout;
  for (;;) {
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(n->comm, &st);
    if (r != ncclSuccess)
      st = r;
    if (st != ncclSuccess && st != ncclInProgress) {
      snprintf(what, sizeof(what), "%s: %s (%s)", op, ncclGetErrorString(st),
               ncclGetLastError(n->comm));
      return nccl_fail(c, st == ncclRemoteError ? CTRAIN_E_PEER : CTRAIN_E_NCCL, what);
    }
    if (st == ncclSuccess) {
      if (!stream_too)
        return CTRAIN_OK;
      cudaError_t e = cudaStreamQuery(n->stream);
      if (e == cudaSuccess)
        return CTRAIN_OK;
      if (e != cudaErrorNotReady) {
        snprintf(what, sizeof(what), "%s: cudaStreamQuery: %s", op, cudaGetErrorString(e));
        return nccl_fail(c, CTRAIN_E_NCCL, what);
      }
    }
    if (ctrain_mono_s() > deadline) {
      snprintf(what, sizeof(what), "%s did not complete within the peer timeout (%.1f s)", op,
               n->timeout);
      return nccl_fail(c, CTRAIN_E_PEER, what);
    }
    sched_yield();
  }
}

/* A device pointer for buf: buf itself, or the scratch buffer filled from it. */
static ctrain_err nccl_dev(coll_t *c, void *buf, size_t bytes, int fill, void **dev, int *staged) {
  nccl_impl *n = c->impl;
  struct cudaPointerAttributes at;
  *staged = 0;
  if (cudaPointerGetAttributes(&at, buf) == cudaSuccess &&
      (at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged)) {
    *dev = buf;
    return CTRAIN_OK;
  }
  cudaGetLastError(); /* a host pointer may leave an error behind */
  if (bytes > n->scratch_bytes) {
    size_t want = bytes < 4096 ? 4096 : bytes;
    void *p = NULL;
    if (cudaMalloc(&p, want) != cudaSuccess) {
      snprintf(c->err, sizeof(c->err), "NCCL rank %d: cudaMalloc(%zu) for staging failed", c->rank,
               want);
      return CTRAIN_E_NOMEM;
    }
    cudaFree(n->scratch);
    n->scratch = p;
    n->scratch_bytes = want;
  }
  if (fill && bytes &&
      cudaMemcpyAsync(n->scratch, buf, bytes, cudaMemcpyHostToDevice, n->stream) != cudaSuccess) {
    snprintf(c->err, sizeof(c->err), "NCCL rank %d: cudaMemcpyAsync(H2D) failed", c->rank);
    return CTRAIN_E_NCCL;
  }
  *dev = n->scratch;
  *staged = 1;
  return CTRAIN_OK;
}

static ctrain_err nccl_back(coll_t *c, void *buf, size_t bytes, int staged) {
  nccl_impl *n = c->impl;
  if (!staged || !bytes)
    return CTRAIN_OK;
  if (cudaMemcpyAsync(buf, n->scratch, bytes, cudaMemcpyDeviceToHost, n->stream) != cudaSuccess ||
      cudaStreamSynchronize(n->stream) != cudaSuccess) {
    snprintf(c->err, sizeof(c->err), "NCCL rank %d: cudaMemcpy(D2H) of the result failed", c->rank);
    return CTRAIN_E_NCCL;
  }
  return CTRAIN_OK;
}

static ctrain_err nccl_check_live(coll_t *c) {
  nccl_impl *n = c->impl;
  if (n->aborted || !n->comm) {
    if (!c->err[0])
      snprintf(c->err, sizeof(c->err), "NCCL rank %d: communicator aborted", c->rank);
    return CTRAIN_E_PEER;
  }
  cudaSetDevice(n->device);
  return CTRAIN_OK;
}

#define ISSUE(call, op)                                                                            \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess && r_ != ncclInProgress) {                                               \
      char w_[200];                                                                                \
      snprintf(w_, sizeof(w_), "%s: %s", op, ncclGetErrorString(r_));                              \
      return nccl_fail(c, CTRAIN_E_NCCL, w_);                                                      \
    }                                                                                              \
  } while (0)

static ctrain_err nccl_allreduce(coll_t *c, float *buf, size_t n_el) {
  nccl_impl *n = c->impl;
  void *dev = NULL;
  int staged = 0;
  ctrain_err result = nccl_check_live(c);
  if (result || n_el == 0)
    return result;
  result = nccl_dev(c, buf, n_el * sizeof(float), 1, &dev, &staged);
  if (result)
    return result;
  ISSUE(ncclAllReduce(dev, dev, n_el, ncclFloat32, ncclSum, n->comm, n->stream), "ncclAllReduce");
  result = nccl_wait(c, "ncclAllReduce", 1);
  if (result)
    return result;
  return nccl_back(c, buf, n_el * sizeof(float), staged);
}

static ctrain_err nccl_broadcast(coll_t *c, void *buf, size_t bytes, int root) {
  nccl_impl *n = c->impl;
  void *dev = NULL;
  int staged = 0;
  ctrain_err result = nccl_check_live(c);
  if (result || bytes == 0)
    return result;
  result = nccl_dev(c, buf, bytes, c->rank == root, &dev, &staged);
  if (result)
    return result;
  ISSUE(ncclBroadcast(dev, dev, bytes, ncclChar, root, n->comm, n->stream), "ncclBroadcast");
  result = nccl_wait(c, "ncclBroadcast", 1);
  if (result)
    return result;
  return nccl_back(c, buf, bytes, staged);
}

static ctrain_err nccl_barrier(coll_t *c) {
  float one = 1;
  return nccl_allreduce(c, &one, 1);
}

/* out may be device memory (gathered in place) or host memory (gathered in
 * the scratch buffer, then copied back); in may be either, and is first
 * copied into this rank's slot unless it already is that slot. */
static ctrain_err nccl_allgather_bytes(coll_t *c, const void *in, size_t bytes, void *out) {
  nccl_impl *n = c->impl;
  void *dev = NULL;
  int staged = 0;
  size_t total = bytes * (size_t)c->world; /* coll_allgather_bytes checked the product */
  ctrain_err result = nccl_check_live(c);
  if (result || bytes == 0)
    return result;
  result = nccl_dev(c, out, total, 0, &dev, &staged);
  if (result)
    return result;
  uint8_t *slot = (uint8_t *)dev + (size_t)c->rank * bytes;
  if ((staged || (const void *)slot != in) &&
      cudaMemcpyAsync(slot, in, bytes, cudaMemcpyDefault, n->stream) != cudaSuccess) {
    snprintf(c->err, sizeof(c->err), "NCCL rank %d: cudaMemcpyAsync of the all-gather input failed",
             c->rank);
    return CTRAIN_E_NCCL;
  }
  ISSUE(ncclAllGather(slot, dev, bytes, ncclUint8, n->comm, n->stream), "ncclAllGather");
  result = nccl_wait(c, "ncclAllGather", 1);
  if (result)
    return result;
  return nccl_back(c, out, total, staged);
}

static void nccl_destroy(coll_t *c) {
  nccl_impl *n = c->impl;
  if (n) {
    cudaSetDevice(n->device);
    if (n->comm) {
      /* Non-blocking finalize: poll a little, abort if a peer is gone. */
      double deadline = ctrain_mono_s() + (n->timeout < 5 ? n->timeout : 5);
      ncclResult_t st = ncclCommFinalize(n->comm);
      while (st == ncclInProgress && ctrain_mono_s() < deadline) {
        if (ncclCommGetAsyncError(n->comm, &st) != ncclSuccess)
          st = ncclInternalError;
        else
          sched_yield();
      }
      if (st == ncclSuccess)
        ncclCommDestroy(n->comm);
      else
        ncclCommAbort(n->comm);
    }
    if (n->stream)
      cudaStreamDestroy(n->stream);
    cudaFree(n->scratch);
    coll_free(n->boot);
    free(n);
  }
  free(c);
}

static const coll_ops nccl_ops = {
    .name = "nccl",
    .allreduce_sum = nccl_allreduce,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .allgather_bytes = nccl_allgather_bytes,
    .destroy = nccl_destroy,
};

ctrain_err coll_nccl_create(const coll_nccl_config *cfg, coll_t **out, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  coll_t *c = NULL;
  nccl_impl *n = NULL;
  coll_t *boot = cfg->bootstrap;
  ncclUniqueId id;
  cudaError_t e;
  ncclResult_t r;
  *out = NULL;
  c = calloc(1, sizeof(*c));
  n = calloc(1, sizeof(*n));
  if (!c || !n) {
    free(c);
    free(n);
    coll_free(boot);
    snprintf(errbuf, errlen, "NCCL: out of memory");
    return CTRAIN_E_NOMEM;
  }
  c->ops = &nccl_ops;
  c->rank = boot->rank;
  c->world = boot->world;
  c->impl = n;
  n->boot = boot;
  n->device = cfg->device;
  n->timeout = cfg->peer_timeout > 0 ? cfg->peer_timeout : 30;
  if ((e = cudaSetDevice(cfg->device)) != cudaSuccess ||
      (e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking)) != cudaSuccess) {
    snprintf(errbuf, errlen, "NCCL rank %d: CUDA device %d: %s", c->rank, cfg->device,
             cudaGetErrorString(e));
    result = CTRAIN_E_CUDA;
    goto out;
  }
  /* The id travels only over the authenticated ring. */
  memset(&id, 0, sizeof(id));
  if (c->rank == 0 && (r = ncclGetUniqueId(&id)) != ncclSuccess) {
    snprintf(errbuf, errlen, "NCCL: ncclGetUniqueId: %s", ncclGetErrorString(r));
    result = CTRAIN_E_NCCL;
    goto out;
  }
  result = coll_broadcast(boot, &id, sizeof(id), 0);
  if (result) {
    snprintf(errbuf, errlen, "NCCL: sending the unique id over the ring: %s", coll_errmsg(boot));
    goto out;
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  r = ncclCommInitRankConfig(&n->comm, c->world, id, c->rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    snprintf(errbuf, errlen, "NCCL rank %d: ncclCommInitRankConfig: %s", c->rank,
             ncclGetErrorString(r));
    result = CTRAIN_E_NCCL;
    goto out;
  }
  result = nccl_wait(c, "ncclCommInitRankConfig", 0);
  if (result) {
    snprintf(errbuf, errlen, "%s", c->err);
    goto out;
  }
  *out = c;
  c = NULL;
out:
  if (c)
    nccl_destroy(c); /* frees the bootstrap too */
  return result;
}
