/* numpy.c - .npy and .npz (stored or deflated) into a data_set. */
#include "worker/data/numpy.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "ctrain/buf.h"

#define NPY_MAX_FILE     ((uint64_t)UINT32_MAX) /* zlib counts in uInt */
#define NPY_MAX_FEATURES (1u << 24)             /* as data.c */
#define NPY_MAX_HEADER   65536
#define NPY_CHUNK        ((size_t)1 << 16) /* first buffer, then doubling */

typedef struct {
  char kind; /* 'u', 'i', 'f', 'b' */
  int size;  /* bytes per element */
  int big;   /* big-endian elements */
  int rank;  /* 1..4 */
  uint64_t shape[4];
  uint64_t count; /* elements */
  const uint8_t *data;
} npy_array;

static int ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n >= k && !memcmp(s + n - k, suf, k);
}

int npy_name_matches(const char *path) {
  return ends_with(path, ".npy") || ends_with(path, ".npz");
}

static const char *image_name(const data_format *fmt) {
  return fmt->feature_image ? fmt->feature_image : "x";
}

static const char *label_name(const data_format *fmt) {
  return fmt->feature_label ? fmt->feature_label : "y";
}

/* The whole file into *buf (owned), growing as bytes arrive. */
static ctrain_err read_all(const char *path, uint8_t **buf, size_t *len, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  FILE *f = fopen(path, "rb");
  size_t cap = 0, n = 0;
  *buf = NULL;
  if (!f)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: cannot open: %s", path, strerror(errno));
  for (;;) {
    if (n == cap && ctrain_grow(buf, &cap, n + 1, 1, NPY_CHUNK, (size_t)NPY_MAX_FILE))
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: larger than %llu bytes or out of memory", path,
                  (unsigned long long)NPY_MAX_FILE);
    size_t got = fread(*buf + n, 1, cap - n, f);
    n += got;
    if (got == 0)
      break;
  }
  if (ferror(f))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: read: %s", path, strerror(errno));
  *len = n;
out:
  if (f)
    fclose(f);
  if (result) {
    free(*buf);
    *buf = NULL;
  }
  return result;
}

/* The value of `key` in the header dict: a pointer just past "'key':". */
static const char *dict_value(const char *hdr, const char *key) {
  char k[32];
  snprintf(k, sizeof(k), "'%s':", key);
  const char *p = strstr(hdr, k);
  if (!p)
    return NULL;
  p += strlen(k);
  while (*p == ' ')
    p++;
  return p;
}

/* descr ('<f4', '|u1', ...) into a. */
static int parse_descr(const char *v, npy_array *a) {
  if (!v || *v != '\'' || !strchr("<>|=", v[1]) || !strchr("uifb", v[2]))
    return -1;
  a->big = v[1] == '>';
  a->kind = v[2];
  char *end = NULL;
  long size = strtol(v + 3, &end, 10);
  if (end == v + 3 || *end != '\'' || (size != 1 && size != 2 && size != 4 && size != 8))
    return -1;
  a->size = (int)size;
  return a->kind == 'f' && size < 4 ? -1 : 0;
}

/* shape (a, b, ...) into a; the element count capped by NPY_MAX_FILE. */
static int parse_shape(const char *v, npy_array *a) {
  if (!v || *v != '(')
    return -1;
  v++;
  a->rank = 0;
  a->count = 1;
  while (*v == ' ')
    v++;
  while (*v != ')') {
    char *end = NULL;
    if (a->rank == 4 || *v < '0' || *v > '9')
      return -1;
    errno = 0;
    unsigned long long d = strtoull(v, &end, 10);
    if (errno || d > NPY_MAX_FILE || __builtin_mul_overflow(a->count, d, &a->count) ||
        a->count > NPY_MAX_FILE)
      return -1;
    a->shape[a->rank++] = d;
    v = end;
    while (*v == ' ' || *v == ',')
      v++;
  }
  return a->rank ? 0 : -1;
}

/* A .npy image in buf[0..len) into a (a borrows buf); `what` names it. */
static ctrain_err npy_parse(const uint8_t *buf, size_t len, const char *what, npy_array *a,
                            char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char hdr[NPY_MAX_HEADER + 1];
  memset(a, 0, sizeof(*a));
  if (len < 10 || memcmp(buf, "\x93NUMPY", 6) || buf[6] < 1 || buf[6] > 3)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: not a .npy array (bad magic or version)", what);
  size_t off = buf[6] == 1 ? 10 : 12;
  size_t hl = buf[6] == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                          : (len < 12 ? 0
                                      : (size_t)buf[8] | (size_t)buf[9] << 8 |
                                            (size_t)buf[10] << 16 | (size_t)buf[11] << 24);
  if (len < off || hl > NPY_MAX_HEADER || hl > len - off)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: .npy header of %zu bytes past the end or over %d", what, hl,
                NPY_MAX_HEADER);
  memcpy(hdr, buf + off, hl);
  hdr[hl] = '\0';
  if (parse_descr(dict_value(hdr, "descr"), a))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: unsupported or bad 'descr' (integers, bool, float32/64)", what);
  const char *fo = dict_value(hdr, "fortran_order");
  if (!fo || strncmp(fo, "False", 5))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: 'fortran_order' is not False (save a C-order array)", what);
  if (parse_shape(dict_value(hdr, "shape"), a))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: bad 'shape' (1 to 4 dimensions, at most 4 GiB)", what);
  uint64_t bytes = a->count * (uint64_t)a->size; /* count <= 4 Gi, size <= 8 */
  if (bytes != len - off - hl)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %s: the array needs %llu bytes, the file has %zu", what,
                bytes > len - off - hl ? "truncated" : "trailing bytes", (unsigned long long)bytes,
                len - off - hl);
  a->data = buf + off + hl;
out:
  return result;
}

static uint64_t elem_bits(const npy_array *a, uint64_t i) {
  const uint8_t *p = a->data + i * (uint64_t)a->size;
  uint64_t v = 0;
  for (int k = 0; k < a->size; k++)
    v |= (uint64_t)p[a->big ? a->size - 1 - k : k] << (8 * k);
  return v;
}

/* Element i as an integer; 0 when it is not one (floats). */
static int elem_int(const npy_array *a, uint64_t i, int64_t *out) {
  uint64_t v = elem_bits(a, i);
  if (a->kind == 'f')
    return 0;
  if (a->kind == 'i' && a->size < 8 && (v >> (8 * a->size - 1)) & 1)
    v |= ~(uint64_t)0 << (8 * a->size); /* sign-extend */
  *out = (int64_t)v;
  return !(a->kind == 'u' && a->size == 8 && v > INT64_MAX);
}

static float elem_float(const npy_array *a, uint64_t i) {
  uint64_t v = elem_bits(a, i);
  if (a->size == 4) {
    uint32_t u = (uint32_t)v;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  double d;
  memcpy(&d, &v, 8);
  return (float)d;
}

/* ZIP: little-endian fields. */
static uint32_t rd(const uint8_t *p, int n) {
  uint32_t v = 0;
  for (int k = 0; k < n; k++)
    v |= (uint32_t)p[k] << (8 * k);
  return v;
}

static uint64_t rd64(const uint8_t *p) {
  return (uint64_t)rd(p, 4) | (uint64_t)rd(p + 4, 4) << 32;
}

typedef struct {
  int method;
  uint32_t crc;
  uint64_t csize, usize, local;
} zip_entry;

/* ZIP64 sizes and offset from a central entry's extra field (id 1). */
static void zip64_extra(const uint8_t *x, size_t n, zip_entry *e) {
  while (n >= 4) {
    size_t id = rd(x, 2), sz = rd(x + 2, 2);
    if (sz > n - 4)
      return;
    if (id == 1) {
      const uint8_t *p = x + 4, *end = x + 4 + sz;
      uint64_t *f[] = {&e->usize, &e->csize, &e->local};
      for (int k = 0; k < 3; k++)
        if (*f[k] == 0xffffffffu && end - p >= 8) {
          *f[k] = rd64(p);
          p += 8;
        }
      return;
    }
    x += 4 + sz;
    n -= 4 + sz;
  }
}

/* The central directory entry named `name` of the archive buf[0..len). */
static ctrain_err zip_lookup(const uint8_t *buf, size_t len, const char *path, const char *name,
                             zip_entry *e, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t eocd = len >= 22 ? len - 22 : 0, stop = eocd > 65557 ? eocd - 65557 : 0,
         nlen = strlen(name);
  while (len >= 22 && eocd > stop && rd(buf + eocd, 4) != 0x06054b50)
    eocd--;
  if (len < 22 || rd(buf + eocd, 4) != 0x06054b50)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: not a .npz (no ZIP end of central directory)", path);
  size_t n = rd(buf + eocd + 10, 2), cd = rd(buf + eocd + 16, 4);
  for (size_t i = 0; i < n; i++) {
    if (cd > len || len - cd < 46 || rd(buf + cd, 4) != 0x02014b50)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: bad ZIP central directory entry %zu", path, i);
    size_t fl = rd(buf + cd + 28, 2), xl = rd(buf + cd + 30, 2), cl = rd(buf + cd + 32, 2);
    if (len - cd - 46 < fl + xl + cl)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: ZIP central directory entry %zu past the end", path, i);
    if (fl == nlen && !memcmp(buf + cd + 46, name, nlen)) {
      e->method = (int)rd(buf + cd + 10, 2);
      e->crc = rd(buf + cd + 16, 4);
      e->csize = rd(buf + cd + 20, 4);
      e->usize = rd(buf + cd + 24, 4);
      e->local = rd(buf + cd + 42, 4);
      zip64_extra(buf + cd + 46 + fl, xl, e);
      goto out;
    }
    cd += 46 + fl + xl + cl;
  }
  CTRAIN_FAIL(CTRAIN_E_DATA, "%s: no array '%.*s' in the archive (--feature-image/-label)", path,
              (int)(nlen > 4 ? nlen - 4 : nlen), name);
out:
  return result;
}

/* Inflates raw deflate src[0..n) into *out (owned), growing as bytes
 * arrive up to `usize`. */
static ctrain_err inflate_member(const uint8_t *src, size_t n, uint64_t usize, const char *what,
                                 uint8_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  z_stream zs;
  size_t cap = 0;
  int rc = Z_OK;
  memset(&zs, 0, sizeof(zs));
  *out = NULL;
  if (inflateInit2(&zs, -15) != Z_OK)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: inflateInit2 failed", what);
  zs.next_in = (Bytef *)src;
  zs.avail_in = (uInt)n;
  while (rc != Z_STREAM_END) {
    if (zs.total_out == cap) {
      if (cap == usize)
        CTRAIN_FAIL(CTRAIN_E_DATA, "%s: inflates past its declared %llu bytes", what,
                    (unsigned long long)usize);
      size_t want = cap ? 2 * cap : NPY_CHUNK;
      uint8_t *g = realloc(*out, want < usize ? want : (size_t)usize);
      if (!g)
        CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", what);
      *out = g;
      cap = want < usize ? want : (size_t)usize;
    }
    zs.next_out = *out + zs.total_out;
    zs.avail_out = (uInt)(cap - zs.total_out);
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: deflate stream: %s", what,
                  rc == Z_BUF_ERROR ? "truncated"
                  : zs.msg          ? zs.msg
                                    : "inflate failed");
  }
  if (zs.total_out != usize)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: inflated to %lu bytes, declared %llu", what, zs.total_out,
                (unsigned long long)usize);
out:
  inflateEnd(&zs);
  if (result) {
    free(*out);
    *out = NULL;
  }
  return result;
}

/* Member `key`.npy of the archive: *mem borrows buf (stored) or is
 * *owned (deflated). */
static ctrain_err zip_member(const uint8_t *buf, size_t len, const char *path, const char *key,
                             const uint8_t **mem, size_t *mlen, uint8_t **owned, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char name[256], what[4400];
  zip_entry e = {0};
  snprintf(name, sizeof(name), "%s.npy", key);
  snprintf(what, sizeof(what), "%s: member %s", path, name);
  result = zip_lookup(buf, len, path, name, &e, errbuf, errlen);
  if (result)
    goto out;
  if (e.local > len || len - e.local < 30 || rd(buf + e.local, 4) != 0x04034b50)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: bad local header", what);
  uint64_t at = e.local + 30 + rd(buf + e.local + 26, 2) + rd(buf + e.local + 28, 2);
  if (at > len || e.csize > len - at || e.usize > NPY_MAX_FILE)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %llu bytes past the end of the archive", what,
                (unsigned long long)e.csize);
  if (e.method == 0 && e.csize == e.usize) {
    *mem = buf + at;
  } else if (e.method == 8) {
    result = inflate_member(buf + at, (size_t)e.csize, e.usize, what, owned, errbuf, errlen);
    if (result)
      goto out;
    *mem = *owned;
  } else {
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: compression method %d (only stored and deflated)", what,
                e.method);
  }
  *mlen = (size_t)e.usize;
  if ((uint32_t)crc32_z(0, *mem ? *mem : (const uint8_t *)"", *mlen) != e.crc)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: CRC-32 mismatch (corrupted member)", what);
out:
  return result;
}

/* The images' per-sample features and shape, checked against --image-shape
 * and the data already in ds. */
static ctrain_err sample_shape(const npy_array *x, const data_format *fmt, data_set *ds,
                               const char *what, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int shape[3] = {0}, rank = x->rank - 1;
  uint64_t dim = 1;
  if (x->rank < 2 || (x->kind != 'u' && x->kind != 'f') || (x->kind == 'u' && x->size != 1))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: images must be (n, d1[, d2[, d3]]) of uint8 or float", what);
  for (int i = 1; i < x->rank; i++) {
    if (x->shape[i] > 65536)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: dimension %d of %llu, more than 65536", what, i,
                  (unsigned long long)x->shape[i]);
    dim *= x->shape[i];
    shape[i - 1] = (int)x->shape[i];
  }
  if (dim < 1 || dim > NPY_MAX_FEATURES)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %llu features per sample (1..%u allowed)", what,
                (unsigned long long)dim, NPY_MAX_FEATURES);
  if (fmt->image_rank) {
    uint64_t want = 1;
    for (int i = 0; i < fmt->image_rank; i++)
      want *= (uint64_t)fmt->image_shape[i];
    if (want != dim)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %llu features per sample, --image-shape has %llu", what,
                  (unsigned long long)dim, (unsigned long long)want);
    rank = fmt->image_rank;
    memcpy(shape, fmt->image_shape, sizeof(shape));
  }
  if (ds->n && ds->dim != (int)dim)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %llu features per sample, earlier files have %d", what,
                (unsigned long long)dim, ds->dim);
  ds->dim = (int)dim;
  ds->rank = rank;
  memcpy(ds->shape, shape, sizeof(shape));
out:
  return result;
}

/* Appends images x and labels y (already parsed) to ds. */
static ctrain_err append(const npy_array *x, const npy_array *y, const data_format *fmt,
                         data_set *ds, const char *what, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint64_t n = x->shape[0];
  if (y->rank > 2 || (y->rank == 2 && y->shape[1] != 1) || y->shape[0] != n || y->kind == 'f')
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: labels must be integers of shape (%llu) or (%llu, 1)", what,
                (unsigned long long)n, (unsigned long long)n);
  result = sample_shape(x, fmt, ds, what, errbuf, errlen);
  if (!result)
    result = data_grow(ds, ds->n + n, (uint64_t)ds->dim, what, errbuf, errlen);
  if (result)
    goto out;
  for (uint64_t i = 0; i < n; i++) {
    int64_t v = -1;
    if (!elem_int(y, i, &v) || v < 0 || v > INT32_MAX)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: label %llu (%lld) outside 0..%d", what, (unsigned long long)i,
                  (long long)v, INT32_MAX);
    ds->y[ds->n + i] = (int32_t)v;
    if (v > ds->max_label)
      ds->max_label = (int32_t)v;
  }
  float *dst = ds->x + ds->n * (size_t)ds->dim;
  for (uint64_t k = 0; k < n * (uint64_t)ds->dim; k++) {
    dst[k] = x->kind == 'u' ? (float)x->data[k] * (1.0f / 255.0f) : elem_float(x, k);
    if (!isfinite(dst[k]))
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: sample %llu: feature %llu is not finite", what,
                  (unsigned long long)(k / (uint64_t)ds->dim),
                  (unsigned long long)(k % (uint64_t)ds->dim));
  }
  ds->n += n;
out:
  return result;
}

/* The labels file of a .npy images file (see numpy.h). */
static ctrain_err partner(const char *path, const data_format *fmt, char *out, size_t n,
                          char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const char *in = image_name(fmt), *base = strrchr(path, '/'), *hit = NULL;
  base = base ? base + 1 : path;
  for (const char *p = strstr(base, in); p; p = strstr(p + 1, in))
    hit = p;
  if (!hit || !*in)
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "%s: its name does not contain '%s' (--feature-image), so no "
                "labels file can be named from it",
                path, in);
  if (snprintf(out, n, "%.*s%s%s", (int)(hit - path), path, label_name(fmt), hit + strlen(in)) >=
      (int)n)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: path too long", path);
out:
  return result;
}

void npy_drop_partners(char **names, int *n, const data_format *fmt) {
  char lab[4096];
  int k = 0;
  uint8_t *drop = calloc((size_t)*n, 1);
  if (!drop)
    return; /* every file is then read as data: the partner fails as images */
  for (int i = 0; i < *n; i++) {
    if (!ends_with(names[i], ".npy") || partner(names[i], fmt, lab, sizeof(lab), NULL, 0))
      continue;
    for (int j = 0; j < *n; j++)
      drop[j] |= j != i && !strcmp(names[j], lab);
  }
  for (int i = 0; i < *n; i++) {
    if (drop[i])
      free(names[i]);
    else
      names[k++] = names[i];
  }
  *n = k;
  free(drop);
}

ctrain_err npy_load(const char *path, const data_format *fmt, data_set *ds, char *errbuf,
                    size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t *a = NULL, *b = NULL, *xo = NULL, *yo = NULL;
  const uint8_t *xm = NULL, *ym = NULL;
  size_t alen = 0, blen = 0, xl = 0, yl = 0;
  char lab[4096], xw[4400], yw[4400];
  npy_array x, y;
  result = read_all(path, &a, &alen, errbuf, errlen);
  if (result)
    goto out;
  if (ends_with(path, ".npz")) {
    result = zip_member(a, alen, path, image_name(fmt), &xm, &xl, &xo, errbuf, errlen);
    if (!result)
      result = zip_member(a, alen, path, label_name(fmt), &ym, &yl, &yo, errbuf, errlen);
    snprintf(xw, sizeof(xw), "%s: %s.npy", path, image_name(fmt));
    snprintf(yw, sizeof(yw), "%s: %s.npy", path, label_name(fmt));
  } else {
    result = partner(path, fmt, lab, sizeof(lab), errbuf, errlen);
    if (!result)
      result = read_all(lab, &b, &blen, errbuf, errlen);
    xm = a, xl = alen, ym = b, yl = blen;
    snprintf(xw, sizeof(xw), "%s", path);
    snprintf(yw, sizeof(yw), "%s", lab);
  }
  if (result)
    goto out;
  result = npy_parse(xm, xl, xw, &x, errbuf, errlen);
  if (!result)
    result = npy_parse(ym, yl, yw, &y, errbuf, errlen);
  if (!result)
    result = append(&x, &y, fmt, ds, xw, errbuf, errlen);
out:
  free(a);
  free(b);
  free(xo);
  free(yo);
  return result;
}
