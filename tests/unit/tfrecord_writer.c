/* tfrecord_writer.c - the data-stream tests' TFRecord writer
 * (tfrecord_writer.h). */
#include "tfrecord_writer.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "test.h"
#include "worker/data/tfrecord.h"

/* v as a protobuf varint at p; returns its length (at most 10). */
static size_t put_varint(uint8_t *p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) {
    p[n++] = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  p[n++] = (uint8_t)v;
  return n;
}

/* A length-delimited field: tag, length, bytes. */
static size_t put_len(uint8_t *p, int field, const void *b, size_t len) {
  size_t n = put_varint(p, (uint64_t)field << 3 | 2);
  n += put_varint(p + n, len);
  memcpy(p + n, b, len);
  return n + len;
}

/* A map entry of Features at p: key -> Feature{list_field: {value: v}},
 * v being vals[0..len) (packed floats or varints, or one bytes value). */
static size_t put_feature(uint8_t *p, const char *key, int list_field, const uint8_t *vals,
                          size_t len) {
  uint8_t *list = malloc(len + 16), *feat = malloc(len + 32), *entry = malloc(len + 96);
  ASSERT(list && feat && entry);
  size_t ln = put_len(list, 1, vals, len);
  size_t fn = put_len(feat, list_field, list, ln);
  size_t en = put_len(entry, 1, key, strlen(key));
  en += put_len(entry + en, 2, feat, fn);
  size_t n = put_len(p, 1, entry, en);
  free(list);
  free(feat);
  free(entry);
  return n;
}

/* The "pad" feature at p: `pad` bytes of xorshift noise from seed. */
static size_t put_noise(uint8_t *p, size_t pad, uint32_t seed) {
  uint8_t *noise = malloc(pad);
  ASSERT_NOT_NULL(noise);
  uint32_t s = 0x9e3779b9u ^ seed;
  for (size_t i = 0; i < pad; i++) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    noise[i] = (uint8_t)s;
  }
  size_t n = put_feature(p, "pad", 1, noise, pad);
  free(noise);
  return n;
}

size_t tfw_example_bound(int dim, size_t pad) {
  return 4 * (size_t)dim + pad + 256;
}

size_t tfw_example(uint8_t *out, const float *image, int dim, int64_t label, size_t pad,
                   uint32_t noise_seed) {
  uint8_t *features = malloc(tfw_example_bound(dim, pad)), v[10];
  ASSERT_NOT_NULL(features);
  size_t n = put_feature(features, "image", 2, (const uint8_t *)image, 4 * (size_t)dim);
  n += put_feature(features + n, "label", 3, v, put_varint(v, (uint64_t)label));
  if (pad)
    n += put_noise(features + n, pad, noise_seed);
  size_t m = put_len(out, 1, features, n);
  free(features);
  return m;
}

static void put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

size_t tfw_frame(uint8_t *out, const uint8_t *rec, size_t len, int bad_crc) {
  put_le(out, len, 8);
  put_le(out + 8, tfr_masked_crc(out, 8), 4);
  memcpy(out + 12, rec, len);
  put_le(out + 12 + len, tfr_masked_crc(rec, len) ^ (bad_crc ? 0x10u : 0u), 4);
  return len + TFW_FRAME_OVERHEAD;
}

uint8_t *tfw_compress(const uint8_t *d, size_t len, tfw_format fmt, int level, size_t *out_len) {
  z_stream z;
  memset(&z, 0, sizeof(z));
  int bits = fmt == TFW_GZIP ? 15 + 16 : 15;
  ASSERT_EQ(deflateInit2(&z, level, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
  size_t cap = deflateBound(&z, (uLong)len);
  uint8_t *out = malloc(cap);
  ASSERT_NOT_NULL(out);
  z.next_in = (Bytef *)(uintptr_t)d;
  z.avail_in = (uInt)len;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  ASSERT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  *out_len = z.total_out;
  deflateEnd(&z);
  return out;
}
