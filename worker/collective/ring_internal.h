/* worker/collective/ring_internal.h - what the pieces of the TCP ring share;
 * private to worker/collective/ring*.c (and the ring's tests and fuzz
 * targets). ring.h has the API and the wire format.
 *
 *   ring_handshake.c  the v2 authenticated hello (ring.h) and the rendezvous:
 *                     listen, connect to lower ranks, accept higher ones
 *   ring_transport.c  frames on the non-blocking sockets: the progress engine
 *                     (framed send/recv, heartbeats, peer-lost detection),
 *                     blocking I/O with a deadline, the goodbyes
 *   ring_allreduce.c  the all-reduce algorithms (direct exchange for small
 *                     vectors, the segment-pipelined ring for large ones)
 *   ring.c            the other collectives over ring_exchange, create/destroy */
#ifndef CTRAIN_RING_INTERNAL_H
#define CTRAIN_RING_INTERNAL_H

#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ctrain/endian.h"
#include "ctrain/tfconfig.h"
#include "worker/collective/ring.h"

#define RING_ABORT_MAX 512 /* bytes of an ABORT frame's reason we send or read */
/* Frames of at most this many bytes are "small": the progress loop spins
 * before it blocks on them (ring_progress), and all-reduces this small take
 * the latency path in any world (ring_latency_max_bytes). */
#define RING_SMALL_BYTES (16u << 10)
/* The latency path (ring_allreduce.c: recursive doubling or the direct
 * exchange, whole vectors) is taken up to ring_latency_max_bytes(world): as
 * long as a rank sends at most RING_LATENCY_SEND_BYTES in it, never for
 * vectors over RING_LATENCY_MAX_BYTES, always up to RING_SMALL_BYTES. */
#define RING_LATENCY_SEND_BYTES (128u << 10)
#define RING_LATENCY_MAX_BYTES  (64u << 10)
/* Two ranks: the latency path (one exchange of the whole vector) sends the
 * same bytes as the ring (two dependent exchanges of half of it) and gives
 * the same bits (a + b == b + a), so it is taken up to this size. */
#define RING_LATENCY_MAX_BYTES_2 (512u << 10)

typedef struct ring_peer {
  int fd;
  int rank;
  char addr[TFCONFIG_ADDR_MAX + 1];
  int closed; /* BYE received: an orderly end */
  double last_rx, last_tx;
  /* receive side: a frame header, then the payload into `dst` when wanted */
  uint8_t rxhdr[RING_FRAME_HDR_LEN];
  size_t rxhdr_got;
  int rx_pending; /* header of a DATA frame parsed, payload not read */
  uint64_t rx_len;
  uint8_t *dst; /* where the wanted DATA payload goes */
  size_t dst_len, dst_got;
  int want, got_frame;
  /* send side: one frame at a time */
  uint8_t txhdr[RING_FRAME_HDR_LEN];
  const uint8_t *txbuf;
  size_t txlen, txoff; /* txoff counts header + payload */
  int tx_active, tx_data, sent_frame;
  const uint8_t *send_buf; /* data queued by the current operation */
  size_t send_len;
  int send_queued;
} ring_peer;

typedef struct ring_t {
  int world, rank;
  ring_peer *peers; /* (world), peers[rank] unused */
  double peer_timeout, hb_interval;
  pthread_mutex_t mu;
  pthread_t hb_thread;
  int hb_started, stop;
  ctrain_err failed;
  struct pollfd *pfd; /* (world) the progress engine's poll set */
  int *pidx;          /* (world) peer index of each pfd entry */
  float *tmp;         /* (tmp_cap) reduce-scatter receive buffer */
  size_t tmp_cap;
  /* The bounded adaptive spin of small exchanges (ring_transport.c) */
  double spin_max_s; /* 0: never spin (tests set it) */
  double spin_s;     /* the budget now, 0 .. spin_max_s */
  int spin_probe;    /* small exchanges left before a budget of 0 is tried again */
} ring_t;

/* ---------------------------------------------------------------------------
 * ring_transport.c
 * ------------------------------------------------------------------------- */

void ring_set_nonblock(int fd);
/* TCP_NODELAY, 4 MiB socket buffers, non-blocking: a data connection. */
void ring_tune_socket(int fd);

/* Moves len bytes on a blocking-or-not fd, polling until `deadline`
 * (ctrain_mono_s). CTRAIN_OK when all moved; CTRAIN_E_TIMEOUT; CTRAIN_E_PEER
 * when the peer closed its end (reading); CTRAIN_E_NET on a socket error (a
 * reset). *done (may be NULL) says how many bytes moved either way. */
CTRAIN_NODISCARD ctrain_err ring_io_xfer(int fd, void *buf, size_t len, double deadline,
                                         int writing, size_t *done);
CTRAIN_NODISCARD ctrain_err ring_io_full(int fd, void *buf, size_t len, double deadline,
                                         int writing);

/* Sets r's spin budget (ring_progress) to its start, RING_SPIN_MAX_US. */
#define RING_SPIN_MAX_US 100
void ring_spin_init(ring_t *r);

/* Marks the ring failed with CTRAIN_E_PEER, naming p and `what` in c->err. */
CTRAIN_NODISCARD ctrain_err ring_lost(coll_t *c, ring_peer *p, const char *what);

/* One exchange under r->mu: send `sbuf` (slen bytes, borrowed) to rank `to`
 * (or -1) and receive exactly rlen bytes into `rbuf` from rank `from` (or
 * -1), concurrently; heartbeats and peer-lost detection meanwhile. */
CTRAIN_NODISCARD ctrain_err ring_exchange(coll_t *c, int to, const void *sbuf, size_t slen,
                                          int from, void *rbuf, size_t rlen);

/* An exchange with several peers at once, under r->mu: ring_post_begin
 * clears the last one; ring_post_send queues `sbuf` (slen bytes, borrowed
 * until ring_progress returns) for rank `to`, ring_post_recv wants exactly
 * rlen bytes into `rbuf` from rank `from` (one of each per peer);
 * ring_progress(c, 0) then moves them all concurrently. ring_post_recv fails
 * (CTRAIN_E_PEER) when a frame of another size is already waiting. */
void ring_post_begin(coll_t *c);
void ring_post_send(coll_t *c, int to, const void *sbuf, size_t slen);
CTRAIN_NODISCARD ctrain_err ring_post_recv(coll_t *c, int from, void *rbuf, size_t rlen);

/* Runs until every queued send is sent and every wanted frame received.
 * once: a single non-blocking pass (the heartbeat thread). Under r->mu.
 * When every frame is at most RING_SMALL_BYTES it first spins (non-blocking
 * passes, each followed by sched_yield) for up to r->spin_s before it
 * blocks in poll: a wake-up costs more than such an exchange's round trip.
 * The budget doubles (up to r->spin_max_s) after a spin that ended the
 * wait, halves after one that did not, and once below 1 us is off for 64
 * small exchanges, then probed again with 4 us: a rank whose peers are
 * slow soon stops burning its CPU. A yield that kept the rank off its CPU
 * for over 1 ms (other work had it for a scheduler slice) turns the spin
 * off the same way. Peer loss is detected as without it (the
 * spin is bounded; EOF and resets show in its recvs). */
CTRAIN_NODISCARD ctrain_err ring_progress(coll_t *c, int once);

/* The heartbeat thread (arg: the coll_t): a progress pass every half
 * heartbeat interval between operations (skipped when r->mu is held: an
 * operation's progress loop heartbeats itself), until r->stop. */
void *ring_hb_main(void *arg);

/* Best effort, short deadlines: BYE to every peer when the ring has not
 * failed (an orderly end), else ABORT with c->err (why we give up). */
void ring_say_goodbye(coll_t *c);

/* ---------------------------------------------------------------------------
 * ring_handshake.c
 * ------------------------------------------------------------------------- */

/* Whether cfg has what the handshake needs: a job name of at most
 * RING_JOB_MAX bytes and a non-empty token. */
int ring_hs_cfg_ok(const ring_config *cfg);

/* Connects r's peers (r->peers[j].fd for every j != cfg->rank, tuned) by
 * `deadline`: listens (unless the highest rank), connects to every lower
 * rank, accepts every higher one. Errors as ring_create's, message in
 * errbuf; on error the fds connected so far stay in r->peers for the
 * caller to close. */
CTRAIN_NODISCARD ctrain_err ring_rendezvous(const ring_config *cfg, ring_t *r, double start,
                                            double deadline, char *errbuf, size_t errlen);

/* ---------------------------------------------------------------------------
 * ring_allreduce.c
 * ------------------------------------------------------------------------- */

/* coll_ops.allreduce_sum of the ring: buf (n) in place, bitwise identical on
 * every rank; takes r->mu. */
CTRAIN_NODISCARD ctrain_err ring_allreduce_sum(coll_t *c, float *buf, size_t n);
/* coll_ops.allreduce_parts / allreduce_part: a vector that takes the ring
 * (ring_latency_max_bytes) may be all-reduced a part at a time, each part
 * summed in the whole vector's order (its chunks cut to the part). */
int ring_allreduce_parts(coll_t *c, size_t n);
CTRAIN_NODISCARD ctrain_err ring_allreduce_part(coll_t *c, float *buf, size_t n, size_t lo,
                                                size_t hi);

typedef enum {
  RING_AR_AUTO,     /* by size, as ring_allreduce_sum */
  RING_AR_DIRECT,   /* whole vectors to every peer, summed in rank order */
  RING_AR_RING,     /* segment-pipelined reduce-scatter + all-gather */
  RING_AR_DOUBLING, /* recursive doubling, world a power of two (else CTRAIN_E_INVAL) */
} ring_ar_algo;

/* The largest all-reduce (bytes) that ring_allreduce_sum sends by the
 * latency path in a world of `world` ranks; above it, the ring. */
size_t ring_latency_max_bytes(int world);

/* ring_allreduce_sum with the algorithm named (tests compare them); every
 * rank must name the same one. */
CTRAIN_NODISCARD ctrain_err ring_allreduce_with(coll_t *c, float *buf, size_t n, ring_ar_algo algo);

/* d[i] = a[i] + b[i] for i < n; d may be a or b (exactly), no other overlap. */
void ring_add(float *d, const float *a, const float *b, size_t n);

/* ---------------------------------------------------------------------------
 * ring.c
 * ------------------------------------------------------------------------- */

/* A ring over already-connected stream sockets, for tests and fuzz targets:
 * fds (world) has a socket per peer (fds[rank] unused); they are taken
 * (closed by coll_free, or here on failure). heartbeat: start the
 * background heartbeat thread, as ring_create does. *out is owned by the
 * caller (coll_free). */
CTRAIN_NODISCARD ctrain_err ring_adopt(int rank, int world, const int *fds, double peer_timeout,
                                       int heartbeat, coll_t **out);

#endif
