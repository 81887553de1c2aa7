/* fuzz_ring_frames.c - the ring's receive path after the handshake (the
 * progress engine's frame reader, ring_transport.c) on arbitrary bytes from
 * a peer. Rank 0 of a world of two is adopted over a socketpair; the input
 * names up to four collectives for rank 0 to run and, after them, the bytes
 * rank 1 "sent" (then its end is shut, so the reader sees EOF, never waits).
 *
 * An independent model of the frame format (ring.h) decides which operation
 * must fail first (F): a bad header, an unknown type, a control frame with a
 * payload, ABORT, BYE while data is still expected, a DATA frame of the
 * wrong size, or a stream cut short. The engine must: never crash, read past
 * a buffer or hang; return only CTRAIN_OK or CTRAIN_E_PEER with a message;
 * give every operation before its first failure G exactly the bytes the
 * model says; stay failed after G; and fail at F at the latest, or one
 * frame-consuming operation early (the reader may look ahead past a
 * completed frame, through heartbeats, to the next header: a pass that
 * finds the next frame already there reads on, so EOF or garbage right
 * after an operation's last frame may fail that operation).
 *
 * Input: byte 0: operations - 1 (low 2 bits); then one byte per operation:
 * kind (low 2 bits: broadcast from rank 1, byte all-gather, float all-reduce
 * (these sizes take its latency path), barrier) and size (high 6 bits:
 * bytes, or floats for the all-reduce); then
 * the peer's stream. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ctrain/log.h"
#include "worker/collective/ring_internal.h"

#define MAXOPS     4
#define MAXFRAMES  2
#define STREAM_MAX (64 << 10) /* fits a socketpair's buffer: the write never blocks */

enum { OP_BCAST, OP_GATHER, OP_REDUCE, OP_BARRIER };

typedef struct {
  int kind;
  size_t size;                   /* bytes, or floats for OP_REDUCE */
  int nframes;                   /* DATA frames rank 0 receives */
  size_t want[MAXFRAMES];        /* their payload sizes */
  const uint8_t *got[MAXFRAMES]; /* the model's payloads, into the stream */
} op_t;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz_ring_frames: " __VA_ARGS__);                                           \
      fputc('\n', stderr);                                                                         \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

static uint32_t be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t be64(const uint8_t *p) {
  return ((uint64_t)be32(p) << 32) | be32(p + 4);
}

/* The frames rank 0 of 2 receives for each operation (ring.c's schedule). */
static void plan(op_t *op) {
  op->nframes = 0;
  switch (op->kind) {
  case OP_BCAST:
  case OP_GATHER:
    op->want[op->nframes++] = op->size;
    break;
  case OP_REDUCE:
    if (op->size && op->size * sizeof(float) <= ring_latency_max_bytes(2)) {
      op->want[op->nframes++] = op->size * sizeof(float); /* rank 1's whole vector */
    } else if (op->size) { /* ring, chunks of one segment: reduce-scatter gets chunk 1,
                              all-gather chunk 0 (unreachable with 6-bit sizes) */
      op->want[op->nframes++] = op->size / 2 * sizeof(float);
      op->want[op->nframes++] = (op->size - op->size / 2) * sizeof(float);
    }
    break;
  default:
    op->want[op->nframes++] = 4;
  }
}

/* The model: walks the stream as ring.h specifies and returns the index of
 * the first operation that cannot complete (nops if all can), filling each
 * completed operation's payloads. */
static int model(op_t *ops, int nops, const uint8_t *s, size_t len) {
  size_t pos = 0;
  for (int i = 0; i < nops; i++) {
    for (int f = 0; f < ops[i].nframes; f++) {
      for (;;) {
        if (len - pos < RING_FRAME_HDR_LEN)
          return i; /* cut short: EOF */
        uint32_t type = be32(s + pos + 4);
        uint64_t flen = be64(s + pos + 8);
        if (be32(s + pos) != RING_FRAME_MAGIC)
          return i;
        pos += RING_FRAME_HDR_LEN;
        if (type == RING_FRAME_HEARTBEAT && flen == 0)
          continue;
        if (type != RING_FRAME_DATA)
          return i; /* BYE (closed while data is wanted), ABORT, unknown, bad control */
        if (flen != ops[i].want[f] || len - pos < flen)
          return i;
        ops[i].got[f] = s + pos;
        pos += (size_t)flen;
        break;
      }
    }
  }
  return nops;
}

static float mine_f(size_t i) {
  return (float)i * 0.75f - 3.0f;
}

static int same_float(float a, float b) {
  return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof(a)) == 0;
}

/* Runs op on c; on success checks the result against the model's payloads. */
static ctrain_err run_op(coll_t *c, const op_t *op, int must_match) {
  ctrain_err rc = CTRAIN_OK;
  size_t n = op->size;
  uint8_t *b = malloc(n ? n * 2 : 1);
  float *f = malloc(n ? n * sizeof(float) : 1);
  CHECK(b && f, "out of memory");
  for (size_t i = 0; i < n; i++) {
    b[i] = (uint8_t)(0xa0 + i);
    f[i] = mine_f(i);
  }
  switch (op->kind) {
  case OP_BCAST:
    rc = coll_broadcast(c, b, n, 1);
    if (!rc && must_match)
      CHECK(!n || !memcmp(b, op->got[0], n), "broadcast of %zu bytes: wrong bytes", n);
    break;
  case OP_GATHER:
    rc = coll_allgather_bytes(c, b, n, b);
    if (!rc && must_match)
      for (size_t i = 0; i < n; i++)
        CHECK(b[i] == (uint8_t)(0xa0 + i) && b[n + i] == op->got[0][i],
              "all-gather of %zu bytes: wrong byte %zu", n, i);
    break;
  case OP_REDUCE: {
    rc = coll_allreduce_sum(c, f, n);
    /* Latency path: mine + rank 1's, in rank order. Ring: chunk 0 [0, h)
     * from rank 1, chunk 1 [h, n) summed here. */
    int small = op->nframes == 1;
    size_t h = n - n / 2;
    for (size_t i = 0; !rc && must_match && i < n; i++) {
      float want, got;
      if (small) {
        memcpy(&got, op->got[0] + i * sizeof(float), sizeof(float));
        want = mine_f(i) + got;
      } else if (i < h) {
        memcpy(&want, op->got[1] + i * sizeof(float), sizeof(float));
      } else {
        memcpy(&got, op->got[0] + (i - h) * sizeof(float), sizeof(float));
        want = got + mine_f(i);
      }
      CHECK(same_float(f[i], want), "all-reduce of %zu floats: [%zu] = %a, want %a", n, i,
            (double)f[i], (double)want);
    }
    break;
  }
  default:
    rc = coll_barrier(c);
  }
  free(b);
  free(f);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int init;
  op_t ops[MAXOPS];
  int sv[2], fds[2];
  coll_t *c = NULL;
  if (!init) {
    ctrain_log_init("fuzz", CTRAIN_LOG_ERROR, CTRAIN_LOG_TEXT);
    init = 1;
  }
  if (size < 1)
    return 0;
  int nops = (data[0] & 3) + 1;
  if (size < 1 + (size_t)nops)
    return 0;
  for (int i = 0; i < nops; i++) {
    ops[i].kind = data[1 + i] & 3;
    ops[i].size = data[1 + i] >> 2;
    plan(&ops[i]);
  }
  const uint8_t *stream = data + 1 + nops;
  size_t slen = size - 1 - (size_t)nops;
  if (slen > STREAM_MAX)
    slen = STREAM_MAX;
  int F = model(ops, nops, stream, slen);

  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  CHECK(slen == 0 || write(sv[1], stream, slen) == (ssize_t)slen, "write");
  shutdown(sv[1], SHUT_WR);
  fds[0] = -1;
  fds[1] = sv[0];
  CHECK(ring_adopt(0, 2, fds, 30.0, 0, &c) == CTRAIN_OK, "ring_adopt");

  int G = nops;
  for (int i = 0; i < nops; i++) {
    ctrain_err rc = run_op(c, &ops[i], G == nops);
    CHECK(rc == CTRAIN_OK || rc == CTRAIN_E_PEER, "op %d: %s", i, ctrain_strerror(rc));
    if (rc) {
      CHECK(coll_errmsg(c)[0], "op %d failed without a message", i);
      if (G == nops)
        G = i;
    } else {
      CHECK(G == nops, "op %d succeeded after op %d failed", i, G);
    }
  }
  /* The latest frame-consuming operation before F may fail by looking ahead. */
  int lo = F;
  for (int i = F - 1; i >= 0; i--)
    if (ops[i].nframes) {
      lo = i;
      break;
    }
  CHECK(G >= lo && G <= F, "first failure at op %d, the model says %d (or %d): %s", G, F, lo,
        coll_errmsg(c));
  coll_free(c);
  close(sv[1]);
  return 0;
}
