/* fuzz_ring_handshake.c - what the listening rank reads from a peer before
 * and after it trusts it, on arbitrary bytes: the hello check (the only
 * parsing done before the MAC) and the frame header parser. Neither crashes
 * or reads past its input; a hello is accepted only if it is exactly the
 * record the token makes for this challenge, and then its claims fit; a
 * genuine hello built from fuzzed fields is accepted exactly when its claims
 * fit, and refused with any byte flipped; no proof the client did not get
 * from a token holder verifies; a frame header is accepted only with the
 * magic and a known type. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/endian.h"
#include "worker/collective/ring.h"

static const char *const addrs[3] = {"r0:7000", "r1:7000", "r2:7000"};

/* Rank 1 of 3, as the seeds under corpus/fuzz_ring_handshake/ were made for:
 * job "fuzz-job", attempt 7, token "fuzz-token", challenge c0 c1 .. cf. */
static ring_config server_cfg(void) {
  ring_config c = {.rank = 1,
                   .world = 3,
                   .addrs = addrs,
                   .job = "fuzz-job",
                   .attempt = 7,
                   .token = "fuzz-token",
                   .rendezvous_timeout = 1,
                   .peer_timeout = 1,
                   .bind_host = NULL};
  return c;
}

static int claims_fit(const ring_config *server, uint32_t attempt, uint32_t rank, uint32_t world) {
  return attempt == server->attempt && world == (uint32_t)server->world &&
         rank > (uint32_t)server->rank && rank < world;
}

static void raw_hello(const ring_config *server, const uint8_t *ns, const uint8_t *data,
                      size_t size) {
  ring_hs_hello hi;
  char why[256] = "";
  ctrain_err rc = ring_hs_hello_check(server, ns, data, size, &hi, why, sizeof(why));
  if (rc == CTRAIN_OK) {
    /* Only the token's own record for this challenge gets here. */
    uint8_t again[RING_HS_HELLO_LEN];
    ring_config client = *server;
    client.attempt = hi.attempt;
    client.rank = (int)hi.rank;
    client.world = (int)hi.world;
    if (size != RING_HS_HELLO_LEN || !claims_fit(server, hi.attempt, hi.rank, hi.world) ||
        ring_hs_hello_encode(&client, server->rank, ns, hi.nonce, again) ||
        memcmp(again, data, size))
      abort();
  } else if (rc != CTRAIN_E_AUTH || !why[0]) {
    abort();
  }
}

static void built_hello(const ring_config *server, const uint8_t *ns, const uint8_t *data,
                        size_t size) {
  /* attempt u32, rank u32, world u32, nonce_c[16], flip at u8, flip mask u8 */
  if (size < 12 + RING_HS_NONCE_LEN + 2)
    return;
  ring_config client = *server;
  uint8_t hello[RING_HS_HELLO_LEN];
  ring_hs_hello hi;
  char why[256];
  client.attempt = ctrain_get_be32(data);
  client.rank = (int)ctrain_get_be32(data + 4);
  client.world = (int)ctrain_get_be32(data + 8);
  if (ring_hs_hello_encode(&client, server->rank, ns, data + 12, hello))
    abort();
  ctrain_err rc = ring_hs_hello_check(server, ns, hello, sizeof(hello), &hi, why, sizeof(why));
  int fit = claims_fit(server, client.attempt, (uint32_t)client.rank, (uint32_t)client.world);
  if ((rc == CTRAIN_OK) != fit)
    abort();
  if (fit && (hi.rank != (uint32_t)client.rank || memcmp(hi.nonce, data + 12, RING_HS_NONCE_LEN)))
    abort();
  /* A proof made of whatever followed is not one. */
  if (ring_hs_proof_check(&client, server->rank, ns, hello, data, size) != CTRAIN_E_AUTH)
    abort();
  const uint8_t *flip = data + 12 + RING_HS_NONCE_LEN;
  hello[flip[0] % RING_HS_HELLO_LEN] ^= (uint8_t)(flip[1] | 1);
  if (ring_hs_hello_check(server, ns, hello, sizeof(hello), &hi, why, sizeof(why)) == CTRAIN_OK)
    abort();
}

static void frame_header(const uint8_t *data, size_t size) {
  uint32_t type = 99;
  uint64_t len = 99;
  char why[128] = "";
  ctrain_err rc = ring_frame_header_parse(data, size, &type, &len, why, sizeof(why));
  if (rc == CTRAIN_OK) {
    if (size != RING_FRAME_HDR_LEN || ctrain_get_be32(data) != RING_FRAME_MAGIC ||
        type < RING_FRAME_DATA || type > RING_FRAME_ABORT ||
        ((type == RING_FRAME_HEARTBEAT || type == RING_FRAME_BYE) && len))
      abort();
  } else if (rc != CTRAIN_E_PARSE || !why[0] || type || len) {
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ring_config server = server_cfg();
  uint8_t ns[RING_HS_NONCE_LEN];
  for (int i = 0; i < RING_HS_NONCE_LEN; i++)
    ns[i] = (uint8_t)(0xc0 + i);
  raw_hello(&server, ns, data, size);
  built_hello(&server, ns, data, size);
  frame_header(data, size);
  if (size >= RING_FRAME_HDR_LEN)
    frame_header(data, RING_FRAME_HDR_LEN);
  return 0;
}
