/* worker/collective/ring.h - the TCP collective backend: rendezvous, authenticated
 * full-mesh connections, ring all-reduce, heartbeats.
 *
 * Rendezvous: every rank listens on the port of its own address; rank i
 * connects to every rank j < i (resolving and retrying until the rendezvous
 * timeout, since DNS may lag pod start) and accepts every rank j > i.
 *
 * Handshake (all integers big-endian), on every connection:
 *   server -> challenge "CTRN" version nonce_s[16]                       24 bytes
 *   client -> hello     "CTRH" version attempt rank world nonce_c[16]
 *                       mac_c[32]                                        68 bytes
 *   server -> proof     "CTRS" mac_s[32]                                 36 bytes
 * mac_c = HMAC-SHA256(CTRAIN_JOB_TOKEN, "ctrain-client" | u32 len(job) | job |
 *                     u32 server rank | nonce_s | hello[0, 36))
 * mac_s = the same with "ctrain-server".
 * hello[0, 36) is everything before mac_c (magic .. nonce_c). The client
 * proves the token over the server's fresh nonce_s, the server over the
 * client's nonce_c, so neither message can be replayed. The job name never
 * crosses the wire: both sides already know it.
 *
 * The listening rank reads nothing beyond the fixed-size hello before it has
 * checked mac_c, and tells a client that fails (wrong token, job, attempt,
 * rank, version, or garbage) nothing: it closes the connection; the reason
 * goes to its own log only. It handshakes every pending connection at once
 * (one poll, non-blocking), gives each RING_HS_TIMEOUT_S from accept to a
 * complete hello, and holds at most RING_HS_PENDING_MAX unauthenticated ones:
 * a newcomer sheds the oldest (once that one has had a few tens of ms to
 * answer; newcomers wait in a deep accept queue meanwhile). A connection
 * shed or out of time gets "CTRB" (busy: nothing about the job) before the
 * close. So idle, dribbling or many connections without the token cannot
 * keep the real peers out.
 *
 * A client retries with a new connection (until the rendezvous timeout)
 * after "CTRB", a reset, or no challenge in time; a plain close after its
 * hello is a refusal and final (CTRAIN_E_AUTH), as is a server whose proof
 * does not verify.
 *
 * Frames after the handshake: "CTRF" type u32, length u64, payload. Types are
 * DATA, HEARTBEAT, BYE (orderly close) and ABORT (why the sender gave up). Every rank sends a
 * heartbeat to every peer it has sent nothing to for peer_timeout/5 (from inside a collective, and
 * from a background thread between collectives); a peer that closes without BYE, errors, or sends
 * nothing for peer_timeout is lost, and the operation fails with CTRAIN_E_PEER naming its rank and
 * address. */
#ifndef CTRAIN_RING_H
#define CTRAIN_RING_H

#include <stddef.h>
#include <stdint.h>

#include "worker/collective/coll.h"

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
CTRAIN_NODISCARD ctrain_err ring_create(const ring_config *cfg, coll_t **out, char *errbuf,
                                        size_t errlen);

/* ---------------------------------------------------------------------------
 * Wire format, exposed for tests and fuzz targets. ring_create is the API.
 * ------------------------------------------------------------------------- */

#define RING_HS_VERSION       2u
#define RING_HS_NONCE_LEN     16
#define RING_HS_MAC_LEN       32
#define RING_HS_CHALLENGE_LEN 24
#define RING_HS_HELLO_LEN     68
#define RING_HS_PROOF_LEN     36
#define RING_HS_TIMEOUT_S     2.0 /* per connection, from accept to a complete hello */
#define RING_HS_PENDING_MAX   64  /* unauthenticated connections held at once */
#define RING_JOB_MAX          253 /* bytes of a job name (a DNS name) */

#define RING_FRAME_MAGIC     0x43545246u /* "CTRF" */
#define RING_FRAME_HDR_LEN   16
#define RING_FRAME_DATA      1u
#define RING_FRAME_HEARTBEAT 2u
#define RING_FRAME_BYE       3u
#define RING_FRAME_ABORT     4u /* payload: why the sender gave up (its error message) */

typedef struct {
  uint32_t version, attempt, rank, world;
  uint8_t nonce[RING_HS_NONCE_LEN]; /* the client's */
} ring_hs_hello;

/* The client's hello to `server_rank`, answering the challenge nonce_s with
 * our fresh nonce_c, into out. cfg (rank, world, job, attempt, token) and the
 * nonces are borrowed. CTRAIN_E_INVAL on a config ring_create refuses. */
CTRAIN_NODISCARD ctrain_err ring_hs_hello_encode(const ring_config *cfg, int server_rank,
                                                 const uint8_t nonce_s[RING_HS_NONCE_LEN],
                                                 const uint8_t nonce_c[RING_HS_NONCE_LEN],
                                                 uint8_t out[RING_HS_HELLO_LEN]);

/* The listening rank's check of `len` received bytes as the hello answering
 * its challenge nonce_s: the size, magic and version, then mac_c under cfg's
 * job, token and rank (the claimed fields as sent), and only then the claims:
 * cfg's attempt and world, a rank above cfg->rank. CTRAIN_OK with *out
 * filled; else CTRAIN_E_AUTH (CTRAIN_E_INVAL for a bad cfg) with the reason
 * in `why`, which is for the server's log and never goes to the client. */
CTRAIN_NODISCARD ctrain_err ring_hs_hello_check(const ring_config *cfg,
                                                const uint8_t nonce_s[RING_HS_NONCE_LEN],
                                                const uint8_t *buf, size_t len, ring_hs_hello *out,
                                                char *why, size_t whylen);

/* The client's check of the server's answer `buf` (len bytes) to our `hello`
 * sent to `server_rank`: CTRAIN_OK when it is a proof that verifies, else
 * CTRAIN_E_AUTH (CTRAIN_E_INVAL for a bad cfg). */
CTRAIN_NODISCARD ctrain_err ring_hs_proof_check(const ring_config *cfg, int server_rank,
                                                const uint8_t nonce_s[RING_HS_NONCE_LEN],
                                                const uint8_t hello[RING_HS_HELLO_LEN],
                                                const uint8_t *buf, size_t len);

/* A frame header ("CTRF" type u32 length u64) of `len` bytes: CTRAIN_OK with
 * *type one of RING_FRAME_* and *length its payload (0 for HEARTBEAT and
 * BYE), else CTRAIN_E_PARSE with the reason in `why`. */
CTRAIN_NODISCARD ctrain_err ring_frame_header_parse(const uint8_t *hdr, size_t len, uint32_t *type,
                                                    uint64_t *length, char *why, size_t whylen);

#endif
