/* fuzz_stream_reader.c - the TFRecord framer (tfr_reader, the one the
 * stream's decoder and tfr_load share: worker/data/tfrecord.h) reading from
 * a byte source that hands its bytes over in pieces of arbitrary sizes, as
 * the stream's byte queue does: the records, the error and its message must
 * be the same whatever the pieces. Never a crash.
 *
 * Input: byte 0 is the mode. Bits 0-1: the compression the reader is told
 * (auto, none, gzip, zlib); bit 2: the rest is a list of records (each a
 * 2-byte little-endian length, clamped, then its bytes) that the harness
 * frames with correct CRCs, so the framer reaches its records' ends; clear:
 * the rest is the file as is; bit 3: the harness gzips the file (bit 4: as
 * two gzip members, split in the middle), so inflation meets the pieces'
 * boundaries. Bytes 1-8: the pieces' sizes, cycled (b: b bytes, 0: 64 KiB).
 * The file is decoded once in one piece per read, once in those pieces. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "worker/data/tfrecord.h"

#define NPIECES     8
#define MAX_RECORDS ((size_t)64 << 20) /* record bytes kept to compare, at most */

/* The file handed over: whole (sizes NULL) or in pieces. */
typedef struct {
  const uint8_t *d;
  size_t len, pos;
  const uint8_t *sizes;
  size_t k;
} source;

static ctrain_err src_read(void *arg, void *buf, size_t n, size_t *got, char *errbuf,
                           size_t errlen) {
  source *s = arg;
  size_t left = s->len - s->pos, want = n;
  (void)errbuf;
  (void)errlen;
  if (s->sizes) {
    size_t piece = s->sizes[s->k++ % NPIECES];
    if (!piece)
      piece = 65536;
    if (want > piece)
      want = piece;
  }
  if (want > left)
    want = left;
  memcpy(buf, s->d + s->pos, want);
  s->pos += want;
  *got = want;
  return CTRAIN_OK;
}

/* What one decode gave: the records (concatenated, lengths beside), the
 * outcome and its message. */
typedef struct {
  uint8_t *data;
  size_t len, cap;
  size_t *lens;
  size_t n, ncap;
  ctrain_err err;
  char msg[1024];
  int capped; /* MAX_RECORDS reached: the rest not compared */
} outcome;

static void keep(outcome *o, const uint8_t *rec, size_t len) {
  if (o->len + len > MAX_RECORDS) {
    o->capped = 1;
    return;
  }
  if (!o->data || o->len + len > o->cap) {
    o->cap = (o->len + len) * 2 + 64;
    o->data = realloc(o->data, o->cap);
  }
  if (o->n == o->ncap) {
    o->ncap = o->ncap * 2 + 16;
    o->lens = realloc(o->lens, o->ncap * sizeof(size_t));
  }
  if (!o->data || !o->lens)
    abort();
  if (len)
    memcpy(o->data + o->len, rec, len);
  o->len += len;
  o->lens[o->n++] = len;
}

static void decode(const uint8_t *d, size_t len, const uint8_t *sizes, data_compression comp,
                   outcome *o) {
  source s = {.d = d, .len = len, .sizes = sizes};
  tfr_reader *r = NULL;
  memset(o, 0, sizeof(*o));
  o->err = tfr_reader_open("fuzz", comp, src_read, &s, &r, o->msg, sizeof(o->msg));
  while (!o->err && !o->capped) {
    const uint8_t *rec = NULL;
    size_t n = 0;
    int end = 0;
    o->err = tfr_reader_next(r, &rec, &n, &end, o->msg, sizeof(o->msg));
    if (o->err || end)
      break;
    keep(o, rec, n);
  }
  if (o->err && !o->msg[0])
    abort(); /* every error says what it is */
  tfr_reader_close(r);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* The records of d framed as TFRecord, with correct CRCs. */
static uint8_t *frame(const uint8_t *d, size_t size, size_t *out_len) {
  uint8_t *out = malloc(size / 2 * 16 + size + 16);
  size_t len = 0;
  if (!out)
    abort();
  while (size >= 2) {
    size_t n = (size_t)d[0] | (size_t)d[1] << 8;
    d += 2;
    size -= 2;
    if (n > size)
      n = size;
    put_le(out + len, n, 8);
    put_le(out + len + 8, tfr_masked_crc(out + len, 8), 4);
    memcpy(out + len + 12, d, n);
    put_le(out + len + 12 + n, tfr_masked_crc(d, n), 4);
    len += 16 + n;
    d += n;
    size -= n;
  }
  *out_len = len;
  return out;
}

/* Appends the gzip member of d[0..len) to out at *olen. */
static void gzip_member(const uint8_t *d, size_t len, uint8_t *out, size_t cap, size_t *olen) {
  z_stream z;
  memset(&z, 0, sizeof(z));
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    abort();
  z.next_in = (uint8_t *)(uintptr_t)d;
  z.avail_in = (uInt)len;
  z.next_out = out + *olen;
  z.avail_out = (uInt)(cap - *olen);
  if (deflate(&z, Z_FINISH) != Z_STREAM_END)
    abort();
  *olen += z.total_out;
  deflateEnd(&z);
}

static uint8_t *gzip(const uint8_t *d, size_t len, int two, size_t *out_len) {
  size_t cap = 2 * (compressBound((uLong)len) + 64), olen = 0, half = two ? len / 2 : len;
  uint8_t *out = malloc(cap);
  if (!out)
    abort();
  gzip_member(d, half, out, cap, &olen);
  if (two)
    gzip_member(d + half, len - half, out, cap, &olen);
  *out_len = olen;
  return out;
}

static void same(const outcome *a, const outcome *b) {
  if (a->err != b->err || strcmp(a->msg, b->msg) || a->capped != b->capped)
    abort();
  if (a->n != b->n || a->len != b->len)
    abort();
  if (a->n && (memcmp(a->lens, b->lens, a->n * sizeof(size_t)) ||
               (a->len && memcmp(a->data, b->data, a->len))))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 + NPIECES)
    return 0;
  int mode = data[0];
  const uint8_t *sizes = data + 1, *body = data + 1 + NPIECES;
  size_t len = size - 1 - NPIECES;
  uint8_t *framed = NULL, *zipped = NULL;
  if (mode & 4) {
    framed = frame(body, len, &len);
    body = framed;
  }
  if (mode & 8) {
    zipped = gzip(body, len, mode & 16, &len);
    body = zipped;
  }
  data_compression comp = (data_compression)(mode & 3);
  outcome whole, pieces;
  decode(body, len, NULL, comp, &whole);
  decode(body, len, sizes, comp, &pieces);
  same(&whole, &pieces);
  free(whole.data);
  free(whole.lens);
  free(pieces.data);
  free(pieces.lens);
  free(framed);
  free(zipped);
  return 0;
}
