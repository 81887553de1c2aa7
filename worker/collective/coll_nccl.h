/* worker/collective/coll_nccl.h - the NCCL collective backend behind coll.h.
 *
 * Bootstrap: the chief (rank 0) creates the ncclUniqueId and broadcasts it
 * over `bootstrap`, the already-authenticated TCP ring (ring.h; the local
 * single-rank coll for a world of one), so only peers that passed the HMAC
 * handshake learn it. Communicators are created with the non-blocking
 * ncclCommInitRankConfig (config.blocking = 0) and polled with
 * ncclCommGetAsyncError under peer_timeout; every operation is polled the
 * same way. A timeout or an NCCL error calls ncclCommAbort, then asks the
 * ring (coll_barrier, which detects lost peers by heartbeat) which peer is
 * gone, so the message names it when it can; the result is CTRAIN_E_PEER (or
 * CTRAIN_E_NCCL), i.e. exit 75.
 *
 * Buffers may be device memory (the gradients: no copy) or host memory (the
 * train loop's scalars and headers: staged through a device scratch buffer);
 * cudaPointerGetAttributes tells which. Device buffers must be ready (their
 * producing stream synchronized) before the call. Operations run on the
 * backend's own stream and return when complete, as coll.h requires.
 *
 * Several GPUs per worker (not built yet): one communicator per local device
 * with rank = worker_rank * local_devices + i, created in one
 * ncclGroupStart/End, world = workers x local devices. */
#ifndef CTRAIN_COLL_NCCL_H
#define CTRAIN_COLL_NCCL_H

#include <stddef.h>
#include <stdio.h>

#include "worker/collective/coll.h"

typedef struct {
  coll_t *bootstrap;   /* taken: freed with the NCCL coll (or on failure) */
  int device;          /* CUDA ordinal this rank uses */
  double peer_timeout; /* seconds an init or operation may take */
} coll_nccl_config;

#ifdef CTRAIN_HAVE_CUDA
/* Joins the NCCL world of cfg->bootstrap's ranks. *out is owned by the
 * caller (coll_free). Errors name the failing call in errbuf. */
CTRAIN_NODISCARD ctrain_err coll_nccl_create(const coll_nccl_config *cfg, coll_t **out,
                                             char *errbuf, size_t errlen);
#else
CTRAIN_NODISCARD static inline ctrain_err
coll_nccl_create(const coll_nccl_config *cfg, coll_t **out, char *errbuf, size_t errlen) {
  coll_free(cfg->bootstrap);
  *out = NULL;
  snprintf(errbuf, errlen, "NCCL: built without the CUDA path (configure with -DCTRAIN_CUDA=ON)");
  return CTRAIN_E_UNSUPPORTED;
}
#endif

#endif
