/* ctrain/endian.h - fixed-width integers to and from bytes, in a stated
 * order, whatever the host's: big-endian for the worker's wire (the ring's
 * handshake and frames, worker/collective/ring.h), little-endian for its
 * files (backups, worker/checkpoint/ckpt.h; the checksum tree's head). Byte
 * by byte, so p needs no alignment. */
#ifndef CTRAIN_ENDIAN_H
#define CTRAIN_ENDIAN_H

#include <stdint.h>

static inline void ctrain_put_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static inline uint32_t ctrain_get_be32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline void ctrain_put_be64(uint8_t *p, uint64_t v) {
  ctrain_put_be32(p, (uint32_t)(v >> 32));
  ctrain_put_be32(p + 4, (uint32_t)v);
}

static inline uint64_t ctrain_get_be64(const uint8_t *p) {
  return ((uint64_t)ctrain_get_be32(p) << 32) | ctrain_get_be32(p + 4);
}

static inline void ctrain_put_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t ctrain_get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline void ctrain_put_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t ctrain_get_le64(const uint8_t *p) {
  return (uint64_t)ctrain_get_le32(p) | ((uint64_t)ctrain_get_le32(p + 4) << 32);
}

#endif
