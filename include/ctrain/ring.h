/* ctrain/ring.h - the TCP collective backend: rendezvous, authenticated
 * full-mesh connections, ring all-reduce, heartbeats.
 *
 * Rendezvous: every rank listens on the port of its own address; rank i
 * connects to every rank j < i (resolving and retrying until the rendezvous
 * timeout, since DNS may lag pod start) and accepts every rank j > i.
 *
 * Handshake (all integers big-endian), on every connection:
 *   client -> "CTRH" version attempt rank world nonce_c[16] joblen job
 *   server -> "CTRS" status rank nonce_s[16] mac_s[32]
 *   client -> "CTRC" mac_c[32]
 *   server -> "CTRK" status
 * mac_x = HMAC-SHA256(CTRAIN_JOB_TOKEN, "ctrain-server"|"ctrain-client",
 *                     job, attempt, client rank, server rank, nonce_c, nonce_s).
 * Both sides prove the token with the other's fresh nonce; a peer with a
 * wrong job, attempt, rank or token is refused and logged, and the server
 * keeps accepting.
 *
 * Frames after the handshake: "CTRF" type u32, length u64, payload. Types are
 * DATA, HEARTBEAT and BYE (orderly close). Every rank sends a heartbeat to
 * every peer it has sent nothing to for peer_timeout/5 (from inside a
 * collective, and from a background thread between collectives); a peer that
 * closes without BYE, errors, or sends nothing for peer_timeout is lost, and
 * the operation fails with CTRAIN_E_PEER naming its rank and address. */
#ifndef CTRAIN_RING_H
#define CTRAIN_RING_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/coll.h"

typedef struct {
  int rank;
  int world;
  const char *const *addrs;  /* (world) "host:port" per rank, borrowed for ring_create only */
  const char *job;           /* job name both sides must agree on */
  uint32_t attempt;          /* attempt both sides must agree on */
  const char *token;         /* shared secret (CTRAIN_JOB_TOKEN), non-empty */
  double rendezvous_timeout; /* seconds to reach every peer */
  double peer_timeout;       /* seconds of silence before a peer is lost */
  const char *bind_host;     /* NULL: listen on every address */
} ring_config;

/* Connects the world. *out is owned by the caller (coll_free). Errors:
 * CTRAIN_E_TIMEOUT (a peer not reached in time, named), CTRAIN_E_AUTH (a peer
 * refused us), CTRAIN_E_NET (listen failed), message in errbuf. */
ctrain_err ring_create(const ring_config *cfg, coll_t **out, char *errbuf, size_t errlen);

#endif
