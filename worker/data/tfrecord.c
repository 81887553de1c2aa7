/* tfrecord.c - TFRecord framing (CRC32C, GZIP/ZLIB) and Examples into a data_set. */
#include "worker/data/tfrecord.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ctrain/buf.h"
#include "ctrain/endian.h"
#include "worker/data/example.h"

#define TFR_MAX_RECORD    ((uint64_t)256 << 20)
#define TFR_MAX_FEATURES  (1u << 24) /* as data.c: features per sample fit an int */
#define TFR_READ_CHUNK    ((size_t)1 << 16)
#define TFR_FIRST_SAMPLES 4096 /* then doubling */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1; /* Castagnoli, reflected */
    crc_table[i] = c;
  }
}

uint32_t tfr_crc32c(uint32_t crc, const void *p, size_t n) {
  const uint8_t *b = p;
  pthread_once(&crc_once, crc_init);
  crc = ~crc;
  for (size_t i = 0; i < n; i++)
    crc = crc_table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t tfr_masked_crc(const void *p, size_t n) {
  uint32_t c = tfr_crc32c(0, p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static int ends_with(const char *s, size_t n, const char *suf) {
  size_t k = strlen(suf);
  return n >= k && !memcmp(s + n - k, suf, k);
}

int tfr_name_matches(const char *path) {
  size_t n = strlen(path);
  if (ends_with(path, n, ".gz"))
    n -= 3;
  else if (ends_with(path, n, ".zlib"))
    n -= 5;
  else if (ends_with(path, n, ".zz"))
    n -= 3;
  return ends_with(path, n, ".tfrecord") || ends_with(path, n, ".tfrecords");
}

/* A file read as its records' bytes, inflated when compressed. */
typedef struct {
  FILE *f;
  const char *path;
  data_compression comp;
  z_stream zs;
  int zinit;
  int zend;      /* a compressed member ended and no input followed yet */
  int in_member; /* input went into the current member */
  uint64_t pos;  /* record bytes read (uncompressed) */
  uint8_t in[1 << 16];
} tfr_stream;

static const char *comp_name(data_compression c) {
  return c == DATA_COMP_GZIP ? "GZIP" : c == DATA_COMP_ZLIB ? "ZLIB" : "uncompressed";
}

/* Opens s on path; AUTO resolved by the gzip magic, then the name. */
static ctrain_err stream_open(tfr_stream *s, const char *path, data_compression comp, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t magic[2] = {0, 0};
  s->path = path;
  s->f = fopen(path, "rb");
  if (!s->f)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: cannot open: %s", path, strerror(errno));
  if (comp == DATA_COMP_AUTO) {
    size_t n = fread(magic, 1, 2, s->f);
    size_t len = strlen(path);
    comp = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b                 ? DATA_COMP_GZIP
           : ends_with(path, len, ".zlib") || ends_with(path, len, ".zz") ? DATA_COMP_ZLIB
                                                                          : DATA_COMP_NONE;
    rewind(s->f);
  }
  s->comp = comp;
  if (comp != DATA_COMP_NONE) {
    /* windowBits 15 (+16: a gzip wrapper), as TF's ZlibCompressionOptions. */
    if (inflateInit2(&s->zs, comp == DATA_COMP_GZIP ? 15 + 16 : 15) != Z_OK)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: inflateInit2 failed", path);
    s->zinit = 1;
  }
out:
  return result;
}

static void stream_close(tfr_stream *s) {
  if (s->zinit)
    inflateEnd(&s->zs);
  if (s->f)
    fclose(s->f);
}

/* Refills the inflater's input; 0 bytes at the end of the file. */
static ctrain_err refill(tfr_stream *s, size_t *n, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  *n = fread(s->in, 1, sizeof(s->in), s->f);
  if (!*n && ferror(s->f))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: read: %s", s->path, strerror(errno));
  s->zs.next_in = s->in;
  s->zs.avail_in = (uInt)*n;
out:
  return result;
}

/* Inflates up to n bytes into buf; *got < n only at the end of the data.
 * Concatenated gzip members are read as one stream, as gzip does. */
static ctrain_err inflate_some(tfr_stream *s, uint8_t *buf, size_t n, size_t *got, char *errbuf,
                               size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s->zs.next_out = buf;
  s->zs.avail_out = (uInt)n;
  while (s->zs.avail_out) {
    size_t r = 1;
    if (!s->zs.avail_in && (result = refill(s, &r, errbuf, errlen)))
      goto out;
    if (!r) {
      if (s->in_member)
        CTRAIN_FAIL(CTRAIN_E_DATA, "%s: truncated %s stream after %llu bytes of records", s->path,
                    comp_name(s->comp), (unsigned long long)(s->pos + n - s->zs.avail_out));
      break;
    }
    if (s->zend) {
      if (s->comp == DATA_COMP_ZLIB)
        CTRAIN_FAIL(CTRAIN_E_DATA, "%s: trailing bytes after the ZLIB stream", s->path);
      inflateReset(&s->zs);
      s->zend = 0;
    }
    s->in_member = 1;
    int rc = inflate(&s->zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) {
      s->zend = 1;
      s->in_member = 0;
    } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %s stream: %s (after %llu bytes of records)", s->path,
                  comp_name(s->comp), s->zs.msg ? s->zs.msg : "inflate failed",
                  (unsigned long long)(s->pos + n - s->zs.avail_out));
    }
  }
out:
  *got = n - s->zs.avail_out;
  return result;
}

/* Reads up to n (< 4 GiB) record bytes into buf; *got < n only at the end. */
static ctrain_err stream_read(tfr_stream *s, void *buf, size_t n, size_t *got, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  *got = 0;
  if (s->comp == DATA_COMP_NONE) {
    *got = fread(buf, 1, n, s->f);
    if (*got < n && ferror(s->f))
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: read: %s", s->path, strerror(errno));
  } else {
    result = inflate_some(s, buf, n, got, errbuf, errlen);
  }
out:
  s->pos += *got;
  return result;
}

/* Reads `len` bytes into *buf (grown as they arrive, doubling from 64 KiB,
 * so a lying length costs no more than the file holds). */
static ctrain_err read_grow(tfr_stream *s, uint8_t **buf, size_t *cap, size_t len, int *short_read,
                            char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t have = 0, got = 0;
  *short_read = 0;
  while (have < len) {
    if (have == *cap) {
      size_t want = *cap ? 2 * *cap : TFR_READ_CHUNK;
      if (ctrain_grow(buf, cap, want < len ? want : len, 1, TFR_READ_CHUNK, 0))
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory for a record of %zu bytes", s->path, len);
    }
    size_t step = (*cap < len ? *cap : len) - have;
    result = stream_read(s, *buf + have, step, &got, errbuf, errlen);
    if (result)
      goto out;
    have += got;
    if (got < step) {
      *short_read = 1;
      break;
    }
  }
out:
  return result;
}

/* Where a record is, for messages: "PATH: record K at offset O". */
static int where(char *w, size_t n, const tfr_stream *s, uint64_t k, uint64_t off) {
  return snprintf(w, n, "%s: record %llu at offset %llu%s%s%s", s->path, (unsigned long long)k,
                  (unsigned long long)off, s->comp == DATA_COMP_NONE ? "" : " of the ",
                  s->comp == DATA_COMP_NONE ? "" : comp_name(s->comp),
                  s->comp == DATA_COMP_NONE ? "" : " stream");
}

static const char *kind_name(example_kind k) {
  static const char *const names[] = {"absent", "a bytes_list", "a float_list", "an int64_list"};
  return names[k];
}

/* The image's features per sample and shape: from --image-shape, else from
 * the first float_list (rank 1); later records must agree. */
static ctrain_err image_dim(data_set *ds, const data_format *fmt, const example_feature *img,
                            const char *w, const char *name, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (img->kind != EXAMPLE_BYTES && img->kind != EXAMPLE_FLOAT)
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "%s: feature '%s' (--feature-image) is %s, expected a bytes_list "
                "of raw uint8 or a float_list",
                w, name, kind_name(img->kind));
  if (ds->dim)
    goto out;
  if (fmt->image_rank) {
    uint64_t d = 1;
    for (int i = 0; i < fmt->image_rank; i++)
      d *= (uint64_t)fmt->image_shape[i];
    if (d > TFR_MAX_FEATURES)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: --image-shape has %llu features, more than %u", w,
                  (unsigned long long)d, TFR_MAX_FEATURES);
    ds->dim = (int)d;
    ds->rank = fmt->image_rank;
    memcpy(ds->shape, fmt->image_shape, sizeof(ds->shape));
  } else if (img->kind == EXAMPLE_BYTES) {
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "%s: feature '%s' is a bytes_list: give its shape (--image-shape "
                "H,W[,C])",
                w, name);
  } else {
    if (img->count < 1 || img->count > TFR_MAX_FEATURES)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: feature '%s' has %zu floats (1..%u allowed)", w, name,
                  img->count, TFR_MAX_FEATURES);
    ds->dim = (int)img->count;
    ds->rank = 1;
    ds->shape[0] = ds->dim;
  }
out:
  return result;
}

/* Copies the image into row x (dim features). */
static ctrain_err image_copy(const example_feature *img, int dim, float *x, const char *w,
                             const char *name, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (img->kind == EXAMPLE_BYTES) {
    if (img->count != 1 || img->bytes_len != (size_t)dim)
      CTRAIN_FAIL(CTRAIN_E_DATA,
                  "%s: feature '%s': %zu bytes value(s), the last of %zu bytes; "
                  "expected one of %d (the image shape)",
                  w, name, img->count, img->bytes_len, dim);
    for (int j = 0; j < dim; j++)
      x[j] = (float)img->bytes[j] * (1.0f / 255.0f);
    goto out;
  }
  if (img->count != (size_t)dim)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: feature '%s' has %zu floats, expected %d", w, name, img->count,
                dim);
  example_floats(img, x);
  for (int j = 0; j < dim; j++)
    if (!isfinite(x[j]))
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: feature '%s': value %d is not finite", w, name, j);
out:
  return result;
}

/* The label: one int64 in [0, 2^31). */
static ctrain_err label_of(const uint8_t *rec, size_t len, const char *name, int32_t *y,
                           const char *w, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  example_feature lab;
  char why[256];
  int64_t v = 0;
  if (example_find(rec, len, name, &lab, why, sizeof(why)))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %s", w, why);
  if (lab.kind != EXAMPLE_INT64 || lab.count != 1)
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "%s: feature '%s' (--feature-label) is %s of %zu value(s), "
                "expected an int64_list of one",
                w, name, kind_name(lab.kind), lab.count);
  example_int64s(&lab, &v);
  if (v < 0 || v > INT32_MAX)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: feature '%s': label %lld outside 0..%d", w, name, (long long)v,
                INT32_MAX);
  *y = (int32_t)v;
out:
  return result;
}

/* Decodes one Example record and appends it as sample ds->n; *have is the
 * capacity of ds's arrays in samples. */
static ctrain_err append_example(data_set *ds, size_t *have, const data_format *fmt,
                                 const uint8_t *rec, size_t len, const char *w, char *errbuf,
                                 size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const char *iname = fmt->feature_image ? fmt->feature_image : "image";
  const char *lname = fmt->feature_label ? fmt->feature_label : "label";
  example_feature img;
  char why[256];
  int32_t y = 0;
  if (example_find(rec, len, iname, &img, why, sizeof(why)))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %s", w, why);
  result = image_dim(ds, fmt, &img, w, iname, errbuf, errlen);
  if (!result)
    result = label_of(rec, len, lname, &y, w, errbuf, errlen);
  if (result)
    goto out;
  if (ds->n == *have) {
    size_t more = *have > TFR_FIRST_SAMPLES ? *have : TFR_FIRST_SAMPLES;
    result = data_grow(ds, (uint64_t)*have + more, (uint64_t)ds->dim, w, errbuf, errlen);
    if (result)
      goto out;
    *have += more;
  }
  result = image_copy(&img, ds->dim, ds->x + ds->n * (size_t)ds->dim, w, iname, errbuf, errlen);
  if (result)
    goto out;
  ds->y[ds->n++] = y;
  if (y > ds->max_label)
    ds->max_label = y;
out:
  return result;
}

/* Reads one record's frame and data into *rec: 0 with *len set, or 1 at a
 * clean end of file. */
static ctrain_err next_record(tfr_stream *s, uint64_t k, uint8_t **rec, size_t *cap, size_t *len,
                              int *end, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t hdr[12], foot[4];
  uint64_t off = s->pos;
  size_t got = 0;
  int short_read = 0;
  char w[4200];
  *end = 0;
  result = stream_read(s, hdr, sizeof(hdr), &got, errbuf, errlen);
  if (result)
    goto out;
  where(w, sizeof(w), s, k, off);
  if (!got) {
    *end = 1;
    goto out;
  }
  if (got < sizeof(hdr))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: truncated record header (%zu of 12 bytes)", w, got);
  uint64_t n = ctrain_get_le64(hdr);
  if (tfr_masked_crc(hdr, 8) != ctrain_get_le32(hdr + 8))
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "%s: corrupted record: length CRC32C mismatch (stored %08x, "
                "computed %08x)",
                w, ctrain_get_le32(hdr + 8), tfr_masked_crc(hdr, 8));
  if (n > TFR_MAX_RECORD)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: record of %llu bytes, more than %llu", w, (unsigned long long)n,
                (unsigned long long)TFR_MAX_RECORD);
  result = read_grow(s, rec, cap, (size_t)n, &short_read, errbuf, errlen);
  if (!result && !short_read)
    result = stream_read(s, foot, 4, &got, errbuf, errlen);
  if (result)
    goto out;
  if (short_read || got < 4)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: truncated record: %llu data bytes and a CRC expected", w,
                (unsigned long long)n);
  if (tfr_masked_crc(*rec, (size_t)n) != ctrain_get_le32(foot))
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "%s: corrupted record: data CRC32C mismatch (stored %08x, "
                "computed %08x)",
                w, ctrain_get_le32(foot), tfr_masked_crc(*rec, (size_t)n));
  *len = (size_t)n;
out:
  return result;
}

ctrain_err tfr_load(const char *path, const data_format *fmt, data_set *ds, char *errbuf,
                    size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  tfr_stream *s = calloc(1, sizeof(*s));
  uint8_t *rec = NULL;
  size_t cap = 0, len = 0, have = ds->n;
  int end = 0;
  char w[4200];
  if (!s)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", path);
  result = stream_open(s, path, fmt->compression, errbuf, errlen);
  if (result)
    goto out;
  for (uint64_t k = 0;; k++) {
    uint64_t off = s->pos;
    result = next_record(s, k, &rec, &cap, &len, &end, errbuf, errlen);
    if (result || end)
      goto out;
    where(w, sizeof(w), s, k, off);
    result =
        append_example(ds, &have, fmt, rec ? rec : (const uint8_t *)"", len, w, errbuf, errlen);
    if (result)
      goto out;
  }
out:
  if (s)
    stream_close(s);
  free(s);
  free(rec);
  return result;
}
