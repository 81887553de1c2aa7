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

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* SSE4.2's crc32 instruction computes CRC32C (the Castagnoli polynomial,
 * reflected, as the table does): 8 bytes an instruction, where the table
 * takes one; every x86-64 CPU of the last decade has it. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *b,
                                                               size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, b += 8) {
    uint64_t v;
    memcpy(&v, b, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  crc = (uint32_t)c;
  for (; n; n--, b++)
    crc = __builtin_ia32_crc32qi(crc, *b);
  return crc;
}

static int have_sse42;

static void crc_probe(void) {
  crc_init();
  __builtin_cpu_init();
  have_sse42 = __builtin_cpu_supports("sse4.2");
}
#else
static const int have_sse42 = 0;
static void crc_probe(void) {
  crc_init();
}
#define crc32c_sse42(crc, b, n) (crc)
#endif

uint32_t tfr_crc32c(uint32_t crc, const void *p, size_t n) {
  const uint8_t *b = p;
  pthread_once(&crc_once, crc_probe);
  crc = ~crc;
  if (have_sse42)
    return ~crc32c_sse42(crc, b, n);
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

/* A file read as its records' bytes, inflated when compressed; its bytes
 * come from a callback (a FILE for tfr_load, the stream's byte queue). */
struct tfr_reader {
  tfr_read_fn read;
  void *arg;
  const char *path;
  data_compression comp;
  z_stream zs;
  int zinit;
  int zend;      /* a compressed member ended and no input followed yet */
  int in_member; /* input went into the current member */
  uint64_t pos;  /* record bytes read (uncompressed) */
  uint64_t k;    /* index of the next record */
  uint64_t off;  /* offset of the last record read */
  size_t in_pos; /* uncompressed: unread bytes in[in_pos..in_len) */
  size_t in_len;
  uint8_t *rec; /* the last record's data */
  size_t cap;
  uint8_t in[1 << 16];
};

static const char *comp_name(data_compression c) {
  return c == DATA_COMP_GZIP ? "GZIP" : c == DATA_COMP_ZLIB ? "ZLIB" : "uncompressed";
}

/* Reads up to n bytes from the source; *got < n only at its end. */
static ctrain_err source_read(tfr_reader *s, uint8_t *buf, size_t n, size_t *got, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t r = 0;
  *got = 0;
  while (*got < n) {
    result = s->read(s->arg, buf + *got, n - *got, &r, errbuf, errlen);
    if (result || !r)
      break;
    *got += r;
  }
  return result;
}

/* Opens s on its source; AUTO resolved by the gzip magic, then the name.
 * The first bytes read stay in s->in, the input of what follows. */
static ctrain_err reader_start(tfr_reader *s, data_compression comp, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t n = 0, len = strlen(s->path);
  result = source_read(s, s->in, 2, &n, errbuf, errlen);
  if (result)
    goto out;
  s->in_len = n;
  if (comp == DATA_COMP_AUTO)
    comp = n == 2 && s->in[0] == 0x1f && s->in[1] == 0x8b                       ? DATA_COMP_GZIP
           : ends_with(s->path, len, ".zlib") || ends_with(s->path, len, ".zz") ? DATA_COMP_ZLIB
                                                                                : DATA_COMP_NONE;
  s->comp = comp;
  if (comp != DATA_COMP_NONE) {
    /* windowBits 15 (+16: a gzip wrapper), as TF's ZlibCompressionOptions. */
    if (inflateInit2(&s->zs, comp == DATA_COMP_GZIP ? 15 + 16 : 15) != Z_OK)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: inflateInit2 failed", s->path);
    s->zinit = 1;
    s->zs.next_in = s->in;
    s->zs.avail_in = (uInt)n;
  }
out:
  return result;
}

ctrain_err tfr_reader_open(const char *name, data_compression comp, tfr_read_fn read, void *arg,
                           tfr_reader **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  tfr_reader *s = calloc(1, sizeof(*s));
  *out = NULL;
  if (!s)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", name);
  s->read = read;
  s->arg = arg;
  s->path = name;
  result = reader_start(s, comp, errbuf, errlen);
  if (result)
    goto out;
  *out = s;
  s = NULL;
out:
  tfr_reader_close(s);
  return result;
}

void tfr_reader_close(tfr_reader *s) {
  if (!s)
    return;
  if (s->zinit)
    inflateEnd(&s->zs);
  free(s->rec);
  free(s);
}

/* Refills the inflater's input; 0 bytes at the end of the file. */
static ctrain_err refill(tfr_reader *s, size_t *n, char *errbuf, size_t errlen) {
  ctrain_err result = source_read(s, s->in, sizeof(s->in), n, errbuf, errlen);
  s->zs.next_in = s->in;
  s->zs.avail_in = (uInt)*n;
  return result;
}

/* Inflates up to n bytes into buf; *got < n only at the end of the data.
 * Concatenated gzip members are read as one stream, as gzip does. */
static ctrain_err inflate_some(tfr_reader *s, uint8_t *buf, size_t n, size_t *got, char *errbuf,
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

/* Uncompressed: the bytes kept in s->in first, then the source. */
static ctrain_err plain_read(tfr_reader *s, uint8_t *buf, size_t n, size_t *got, char *errbuf,
                             size_t errlen) {
  size_t k = s->in_len - s->in_pos < n ? s->in_len - s->in_pos : n, more = 0;
  memcpy(buf, s->in + s->in_pos, k);
  s->in_pos += k;
  ctrain_err result = source_read(s, buf + k, n - k, &more, errbuf, errlen);
  *got = k + more;
  return result;
}

/* Reads up to n (< 4 GiB) record bytes into buf; *got < n only at the end. */
static ctrain_err stream_read(tfr_reader *s, void *buf, size_t n, size_t *got, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  *got = 0;
  if (s->comp == DATA_COMP_NONE)
    result = plain_read(s, buf, n, got, errbuf, errlen);
  else
    result = inflate_some(s, buf, n, got, errbuf, errlen);
  s->pos += *got;
  return result;
}

/* Reads `len` bytes into *buf (grown as they arrive, doubling from 64 KiB,
 * so a lying length costs no more than the file holds). */
static ctrain_err read_grow(tfr_reader *s, uint8_t **buf, size_t *cap, size_t len, int *short_read,
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
static int where(char *w, size_t n, const tfr_reader *s, uint64_t k, uint64_t off) {
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
                            const char *name, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (img->kind != EXAMPLE_BYTES && img->kind != EXAMPLE_FLOAT)
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "feature '%s' (--feature-image) is %s, expected a bytes_list "
                "of raw uint8 or a float_list",
                name, kind_name(img->kind));
  if (ds->dim)
    goto out;
  if (fmt->image_rank) {
    uint64_t d = 1;
    for (int i = 0; i < fmt->image_rank; i++)
      d *= (uint64_t)fmt->image_shape[i];
    if (d > TFR_MAX_FEATURES)
      CTRAIN_FAIL(CTRAIN_E_DATA, "--image-shape has %llu features, more than %u",
                  (unsigned long long)d, TFR_MAX_FEATURES);
    ds->dim = (int)d;
    ds->rank = fmt->image_rank;
    memcpy(ds->shape, fmt->image_shape, sizeof(ds->shape));
  } else if (img->kind == EXAMPLE_BYTES) {
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "feature '%s' is a bytes_list: give its shape (--image-shape "
                "H,W[,C])",
                name);
  } else {
    if (img->count < 1 || img->count > TFR_MAX_FEATURES)
      CTRAIN_FAIL(CTRAIN_E_DATA, "feature '%s' has %zu floats (1..%u allowed)", name, img->count,
                  TFR_MAX_FEATURES);
    ds->dim = (int)img->count;
    ds->rank = 1;
    ds->shape[0] = ds->dim;
  }
out:
  return result;
}

/* Copies the image into row x (dim features). */
static ctrain_err image_copy(const example_feature *img, int dim, float *x, const char *name,
                             char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (img->kind == EXAMPLE_BYTES) {
    if (img->count != 1 || img->bytes_len != (size_t)dim)
      CTRAIN_FAIL(CTRAIN_E_DATA,
                  "feature '%s': %zu bytes value(s), the last of %zu bytes; "
                  "expected one of %d (the image shape)",
                  name, img->count, img->bytes_len, dim);
    for (int j = 0; j < dim; j++)
      x[j] = (float)img->bytes[j] * (1.0f / 255.0f);
    goto out;
  }
  if (img->count != (size_t)dim)
    CTRAIN_FAIL(CTRAIN_E_DATA, "feature '%s' has %zu floats, expected %d", name, img->count, dim);
  example_floats(img, x);
  for (int j = 0; j < dim; j++)
    if (!isfinite(x[j]))
      CTRAIN_FAIL(CTRAIN_E_DATA, "feature '%s': value %d is not finite", name, j);
out:
  return result;
}

/* The label: one int64 in [0, 2^31). */
static ctrain_err label_of(const uint8_t *rec, size_t len, const char *name, int32_t *y,
                           char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  example_feature lab;
  char why[256];
  int64_t v = 0;
  if (example_find(rec, len, name, &lab, why, sizeof(why)))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s", why);
  if (lab.kind != EXAMPLE_INT64 || lab.count != 1)
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "feature '%s' (--feature-label) is %s of %zu value(s), "
                "expected an int64_list of one",
                name, kind_name(lab.kind), lab.count);
  example_int64s(&lab, &v);
  if (v < 0 || v > INT32_MAX)
    CTRAIN_FAIL(CTRAIN_E_DATA, "feature '%s': label %lld outside 0..%d", name, (long long)v,
                INT32_MAX);
  *y = (int32_t)v;
out:
  return result;
}

ctrain_err tfr_decode(const data_format *fmt, const uint8_t *rec, size_t len, data_set *shape,
                      tfr_row_fn row, void *arg, int32_t *y, const tfr_reader *at, char *errbuf,
                      size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const char *iname = fmt->feature_image ? fmt->feature_image : "image";
  const char *lname = fmt->feature_label ? fmt->feature_label : "label";
  example_feature img;
  char why[1024], w[4200];
  float *x = NULL;
  result = example_find(rec, len, iname, &img, why, sizeof(why)) ? CTRAIN_E_DATA : CTRAIN_OK;
  if (!result)
    result = image_dim(shape, fmt, &img, iname, why, sizeof(why));
  if (!result)
    result = label_of(rec, len, lname, y, why, sizeof(why));
  if (!result)
    result = row(arg, shape->dim, &x, at->path, why, sizeof(why));
  if (!result)
    result = image_copy(&img, shape->dim, x, iname, why, sizeof(why));
  if (result) { /* where the record is, formatted only for a message */
    tfr_reader_where(at, w, sizeof(w));
    snprintf(errbuf, errlen, "%s: %s", w, why);
  }
  return result;
}

/* tfr_load's rows: sample ds->n, the arrays grown as needed; *have is
 * their capacity in samples. */
typedef struct {
  data_set *ds;
  size_t have;
} load_rows;

static ctrain_err load_row(void *arg, int dim, float **x, const char *w, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  load_rows *lr = arg;
  data_set *ds = lr->ds;
  if (ds->n == lr->have) {
    size_t more = lr->have > TFR_FIRST_SAMPLES ? lr->have : TFR_FIRST_SAMPLES;
    result = data_grow(ds, (uint64_t)lr->have + more, (uint64_t)dim, w, errbuf, errlen);
    if (result)
      goto out;
    lr->have += more;
  }
  *x = ds->x + ds->n * (size_t)dim;
out:
  return result;
}

/* Reads one record's frame and data into *rec: 0 with *len set, or 1 at a
 * clean end of file. */
/* The error path of next_record: where the record is, formatted only now. */
#define TFR_FAIL_AT(...)                                                                           \
  do {                                                                                             \
    where(w, sizeof(w), s, k, off);                                                                \
    CTRAIN_FAIL(CTRAIN_E_DATA, __VA_ARGS__);                                                       \
  } while (0)

static ctrain_err next_record(tfr_reader *s, uint64_t k, uint8_t **rec, size_t *cap, size_t *len,
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
  if (!got) {
    *end = 1;
    goto out;
  }
  if (got < sizeof(hdr))
    TFR_FAIL_AT("%s: truncated record header (%zu of 12 bytes)", w, got);
  uint64_t n = ctrain_get_le64(hdr);
  if (tfr_masked_crc(hdr, 8) != ctrain_get_le32(hdr + 8))
    TFR_FAIL_AT("%s: corrupted record: length CRC32C mismatch (stored %08x, "
                "computed %08x)",
                w, ctrain_get_le32(hdr + 8), tfr_masked_crc(hdr, 8));
  if (n > TFR_MAX_RECORD)
    TFR_FAIL_AT("%s: record of %llu bytes, more than %llu", w, (unsigned long long)n,
                (unsigned long long)TFR_MAX_RECORD);
  result = read_grow(s, rec, cap, (size_t)n, &short_read, errbuf, errlen);
  if (!result && !short_read)
    result = stream_read(s, foot, 4, &got, errbuf, errlen);
  if (result)
    goto out;
  if (short_read || got < 4)
    TFR_FAIL_AT("%s: truncated record: %llu data bytes and a CRC expected", w,
                (unsigned long long)n);
  if (tfr_masked_crc(*rec, (size_t)n) != ctrain_get_le32(foot))
    TFR_FAIL_AT("%s: corrupted record: data CRC32C mismatch (stored %08x, "
                "computed %08x)",
                w, ctrain_get_le32(foot), tfr_masked_crc(*rec, (size_t)n));
  *len = (size_t)n;
out:
  return result;
}
#undef TFR_FAIL_AT

ctrain_err tfr_reader_next(tfr_reader *s, const uint8_t **rec, size_t *len, int *end, char *errbuf,
                           size_t errlen) {
  s->off = s->pos;
  ctrain_err result = next_record(s, s->k, &s->rec, &s->cap, len, end, errbuf, errlen);
  *rec = s->rec ? s->rec : (const uint8_t *)"";
  if (!result && !*end)
    s->k++;
  return result;
}

void tfr_reader_where(const tfr_reader *s, char *w, size_t n) {
  where(w, n, s, s->k ? s->k - 1 : 0, s->off);
}

/* tfr_load's source: a FILE. */
typedef struct {
  FILE *f;
  const char *path;
} load_file;

static ctrain_err file_read(void *arg, void *buf, size_t n, size_t *got, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  load_file *lf = arg;
  *got = fread(buf, 1, n, lf->f);
  if (*got < n && ferror(lf->f))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: read: %s", lf->path, strerror(errno));
out:
  return result;
}

ctrain_err tfr_load(const char *path, const data_format *fmt, data_set *ds, char *errbuf,
                    size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  load_file lf = {fopen(path, "rb"), path};
  load_rows lr = {ds, ds->n};
  tfr_reader *s = NULL;
  const uint8_t *rec = NULL;
  size_t len = 0;
  int end = 0;
  if (!lf.f)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: cannot open: %s", path, strerror(errno));
  result = tfr_reader_open(path, fmt->compression, file_read, &lf, &s, errbuf, errlen);
  while (!result) {
    int32_t y = 0;
    result = tfr_reader_next(s, &rec, &len, &end, errbuf, errlen);
    if (result || end)
      break;
    result = tfr_decode(fmt, rec, len, ds, load_row, &lr, &y, s, errbuf, errlen);
    if (result)
      break;
    ds->y[ds->n++] = y;
    if (y > ds->max_label)
      ds->max_label = y;
  }
out:
  tfr_reader_close(s);
  if (lf.f)
    fclose(lf.f);
  return result;
}
