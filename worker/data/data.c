/* data.c - IDX (zlib) and raw record readers, the format and sharding, epoch order. */
#include "worker/data/data.h"

#include "ctrain/buf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "ctrain/endian.h"
#include "ctrain/log.h"
#include "ctrain/rng.h"
#include "worker/data/files.h"
#include "worker/data/numpy.h"
#include "worker/data/tfrecord.h"

#define DATA_MAX_BYTES    ((uint64_t)4 << 30) /* payload of one file */
#define DATA_MAX_SIDE     65536               /* one per-sample dimension */
#define DATA_MAX_FEATURES (1u << 24)          /* features per sample: fits int */
#define DATA_MAX_SAMPLES  UINT32_MAX          /* in all: the epoch order is uint32_t */
#define DATA_READ_CHUNK   ((size_t)1 << 20)   /* buffers grow as bytes arrive */

/* Every size derived from a file is computed in 64 bits with these, so a
 * hostile header cannot wrap a product around to a size under a cap: 0 on
 * overflow. */
static int mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static int add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/* n samples of dim features in float bytes, as a size_t; 0 on overflow. */
static int float_bytes(uint64_t n, uint64_t dim, size_t *out) {
  uint64_t v;
  if (!mul_u64(n, dim, &v) || !mul_u64(v, sizeof(float), &v) || v > SIZE_MAX)
    return 0;
  *out = (size_t)v;
  return 1;
}

ctrain_err data_grow(data_set *ds, uint64_t n, uint64_t dim, const char *file, char *errbuf,
                     size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t xb = 0, yb = 0;
  if (n > DATA_MAX_SAMPLES)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: more than %u samples in all", file, DATA_MAX_SAMPLES);
  if (!float_bytes(n, dim, &xb) || !float_bytes(n, 1, &yb))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %llu samples of %llu features do not fit in memory", file,
                (unsigned long long)n, (unsigned long long)dim);
  float *x = realloc(ds->x, xb);
  if (x)
    ds->x = x;
  int32_t *y = realloc(ds->y, yb);
  if (y)
    ds->y = y;
  if (!x || !y)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory for %llu samples of %llu features", file,
                (unsigned long long)n, (unsigned long long)dim);
out:
  return result;
}

void data_free(data_set *ds) {
  if (!ds)
    return;
  free(ds->x);
  free(ds->y);
  memset(ds, 0, sizeof(*ds));
}

/* Reads exactly len bytes or reports what went wrong, naming the file. */
static ctrain_err gz_exact(gzFile g, const char *path, void *buf, size_t len, const char *what,
                           char *errbuf, size_t errlen) {
  size_t got = 0;
  while (got < len) {
    unsigned chunk = len - got > (1u << 30) ? (1u << 30) : (unsigned)(len - got);
    int n = gzread(g, (uint8_t *)buf + got, chunk);
    if (n < 0) {
      int ze = 0;
      const char *msg = gzerror(g, &ze);
      snprintf(errbuf, errlen, "%s: %s: %s", path, what, msg);
      return CTRAIN_E_DATA;
    }
    if (n == 0) {
      snprintf(errbuf, errlen, "%s: truncated: %s needs %zu bytes, file has %zu", path, what, len,
               got);
      return CTRAIN_E_DATA;
    }
    got += (size_t)n;
  }
  return CTRAIN_OK;
}

/* One IDX file of ubyte: dims into dims[], payload (owned) into *data.
 * Dimensions after the first are per-sample: each at most DATA_MAX_SIDE,
 * their product at most DATA_MAX_FEATURES; the payload at most
 * DATA_MAX_BYTES. The buffer grows as bytes arrive, so a header that claims
 * more than the file holds costs no more memory than the file. */
static ctrain_err idx_read(const char *path, int want_ndims, uint32_t *dims, uint8_t **data,
                           size_t *len, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  gzFile g = NULL;
  uint8_t hdr[4], dbuf[12];
  uint64_t total = 1, features = 1;
  size_t cap = 0, got = 0;
  *data = NULL;
  g = gzopen(path, "rb");
  if (!g)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
  result = gz_exact(g, path, hdr, 4, "IDX magic", errbuf, errlen);
  if (result)
    goto out;
  if (hdr[0] || hdr[1] || hdr[2] != 0x08)
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "%s: bad IDX magic %02x %02x %02x %02x (expected 00 00 08 for unsigned bytes)",
                path, hdr[0], hdr[1], hdr[2], hdr[3]);
  if (hdr[3] != want_ndims)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: IDX file has %d dimensions, expected %d", path, hdr[3],
                want_ndims);
  result = gz_exact(g, path, dbuf, 4 * (size_t)want_ndims, "IDX dimensions", errbuf, errlen);
  if (result)
    goto out;
  for (int i = 0; i < want_ndims; i++) {
    dims[i] = ctrain_get_be32(dbuf + 4 * i);
    if (dims[i] == 0 || (i > 0 && dims[i] > DATA_MAX_SIDE))
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: bad IDX dimension %d: %u%s", path, i, dims[i],
                  i > 0 && dims[i] ? " (more than 65536)" : "");
    if (i > 0 && (!mul_u64(features, dims[i], &features) || features > DATA_MAX_FEATURES))
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: IDX dimensions 1..%d: %llu features per sample, more than %u",
                  path, i, (unsigned long long)features, DATA_MAX_FEATURES);
    if (!mul_u64(total, dims[i], &total) || total > DATA_MAX_BYTES)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: IDX dimension %d (%u): payload over %llu bytes", path, i,
                  dims[i], (unsigned long long)DATA_MAX_BYTES);
  }
  if (total > SIZE_MAX)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: IDX payload of %llu bytes does not fit in memory", path,
                (unsigned long long)total);
  while (got < (size_t)total) {
    /* Memory grows as bytes arrive (doubling, never past the declared
     * payload), so a header that lies about its size costs nothing. */
    if (got == cap && ctrain_grow(data, &cap, got + 1, 1, DATA_READ_CHUNK, (size_t)total))
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory for %zu bytes", path, cap ? 2 * cap : got);
    unsigned chunk = cap - got > (1u << 30) ? (1u << 30) : (unsigned)(cap - got);
    int n = gzread(g, *data + got, chunk);
    if (n < 0) {
      int ze = 0;
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: IDX payload: %s", path, gzerror(g, &ze));
    }
    if (n == 0)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: truncated: IDX payload needs %llu bytes, file has %zu", path,
                  (unsigned long long)total, got);
    got += (size_t)n;
  }
  uint8_t extra;
  if (gzread(g, &extra, 1) > 0)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: trailing bytes after the IDX payload of %llu bytes", path,
                (unsigned long long)total);
  *len = (size_t)total;
out:
  if (g)
    gzclose(g);
  if (result) {
    free(*data);
    *data = NULL;
  }
  return result;
}

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Appends the IDX pair named by `spec` to ds. */
static ctrain_err load_idx(const char *spec, data_set *ds, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char img[4096], lab[4096];
  uint8_t *pix = NULL, *lbl = NULL;
  uint32_t idims[3], ldims[1];
  size_t ilen = 0, llen = 0;
  const char *hit = strstr(spec, "images-idx3");
  if (file_exists(spec) && hit) {
    snprintf(img, sizeof(img), "%s", spec);
    snprintf(lab, sizeof(lab), "%.*slabels-idx1%s", (int)(hit - spec), spec,
             hit + strlen("images-idx3"));
  } else {
    snprintf(img, sizeof(img), "%s-images-idx3-ubyte.gz", spec);
    snprintf(lab, sizeof(lab), "%s-labels-idx1-ubyte.gz", spec);
    if (!file_exists(img)) {
      snprintf(img, sizeof(img), "%s-images-idx3-ubyte", spec);
      snprintf(lab, sizeof(lab), "%s-labels-idx1-ubyte", spec);
    }
    if (!file_exists(img))
      CTRAIN_FAIL(
          CTRAIN_E_DATA,
          "%s: no such IDX data (neither the images file itself nor %s-images-idx3-ubyte[.gz])",
          spec, spec);
  }
  result = idx_read(img, 3, idims, &pix, &ilen, errbuf, errlen);
  if (result)
    goto out;
  result = idx_read(lab, 1, ldims, &lbl, &llen, errbuf, errlen);
  if (result)
    goto out;
  if (ldims[0] != idims[0])
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: %u labels for %u images in %s", lab, ldims[0], idims[0], img);
  /* idx_read capped the product at DATA_MAX_FEATURES and ilen at
   * n * dim, so both fit an int and a size_t. */
  int dim = (int)((uint64_t)idims[1] * idims[2]);
  if (ds->n && (ds->dim != dim || ds->shape[0] != (int)idims[1]))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: images of %ux%u, earlier files have %d features", img, idims[1],
                idims[2], ds->dim);
  size_t n0 = ds->n, n = idims[0];
  uint64_t total_n;
  if (!add_u64(n0, n, &total_n))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: too many samples in all", img);
  result = data_grow(ds, total_n, (uint64_t)dim, img, errbuf, errlen);
  if (result)
    goto out;
  for (size_t k = 0; k < ilen; k++)
    ds->x[n0 * (size_t)dim + k] = (float)pix[k] * (1.0f / 255.0f);
  for (size_t k = 0; k < n; k++) {
    ds->y[n0 + k] = lbl[k];
    if (lbl[k] > ds->max_label)
      ds->max_label = lbl[k];
  }
  ds->n = n0 + n;
  ds->dim = dim;
  ds->rank = 2;
  ds->shape[0] = (int)idims[1];
  ds->shape[1] = (int)idims[2];
out:
  free(pix);
  free(lbl);
  return result;
}

static ctrain_err load_raw(const char *path, data_set *ds, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  gzFile g = NULL;
  uint8_t hdr[24], dbuf[12], *rec = NULL;
  g = gzopen(path, "rb");
  if (!g)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
  result = gz_exact(g, path, hdr, sizeof(hdr), "raw header", errbuf, errlen);
  if (result)
    goto out;
  if (memcmp(hdr, "CTRAINR1", 8))
    CTRAIN_FAIL(CTRAIN_E_DATA,
                "%s: bad magic (not a ctrain raw record file, expected \"CTRAINR1\")", path);
  uint64_t n = ctrain_get_le64(hdr + 8);
  uint32_t dtype = ctrain_get_le32(hdr + 16), rank = ctrain_get_le32(hdr + 20);
  if (dtype > 1)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: unknown dtype %u (0: u8, 1: float32)", path, dtype);
  if (rank < 1 || rank > 3)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: per-sample rank %u not in 1..3", path, rank);
  result = gz_exact(g, path, dbuf, 4 * rank, "raw dims", errbuf, errlen);
  if (result)
    goto out;
  uint64_t dim = 1, rlen = 0, end = 0;
  int shape[3] = {0};
  for (uint32_t i = 0; i < rank; i++) {
    uint32_t d = ctrain_get_le32(dbuf + 4 * i);
    if (d == 0 || d > DATA_MAX_SIDE)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: bad dimension %u: %u", path, i, d);
    shape[i] = (int)d;
    if (!mul_u64(dim, d, &dim) || dim > DATA_MAX_FEATURES)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: dimensions 0..%u: more than %u features per record", path, i,
                  DATA_MAX_FEATURES);
  }
  uint64_t fsz = dtype ? 4 : 1;
  if (!mul_u64(dim, fsz, &rlen) || !add_u64(rlen, 4, &rlen))
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: record size overflows", path);
  if (n == 0 || n > DATA_MAX_BYTES / rlen)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: bad record count %llu (1..%llu records of %llu bytes)", path,
                (unsigned long long)n, (unsigned long long)(DATA_MAX_BYTES / rlen),
                (unsigned long long)rlen);
  if (ds->n && ds->dim != (int)dim)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: records of %llu features, earlier files have %d", path,
                (unsigned long long)dim, ds->dim);
  size_t n0 = ds->n;
  if (!add_u64(n0, n, &end) || end > DATA_MAX_SAMPLES)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: record count %llu: more than %u samples in all", path,
                (unsigned long long)n, DATA_MAX_SAMPLES);
  rec = malloc((size_t)rlen);
  if (!rec)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", path);
  /* Grow the sample arrays as records arrive, so a header that claims more
   * records than the file holds costs no more memory than the file. */
  uint64_t have = n0, first = DATA_READ_CHUNK / (dim * sizeof(float));
  for (uint64_t k = 0; k < n; k++) {
    char what[64];
    if (n0 + k == have) { /* about 1 MiB of samples first, then doubling */
      uint64_t more = k > first ? k : first > 0 ? first : 1;
      have = end - have < more ? end : have + more;
      result = data_grow(ds, have, dim, path, errbuf, errlen);
      if (result)
        goto out;
    }
    snprintf(what, sizeof(what), "record %llu", (unsigned long long)k);
    result = gz_exact(g, path, rec, (size_t)rlen, what, errbuf, errlen);
    if (result)
      goto out;
    int32_t label = (int32_t)ctrain_get_le32(rec);
    if (label < 0)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: record %llu: negative label %d", path, (unsigned long long)k,
                  label);
    ds->y[n0 + k] = label;
    if (label > ds->max_label)
      ds->max_label = label;
    float *dst = ds->x + (n0 + k) * dim;
    for (size_t j = 0; j < dim; j++) {
      if (dtype == 0) {
        dst[j] = (float)rec[4 + j] * (1.0f / 255.0f);
      } else {
        uint32_t u = ctrain_get_le32(rec + 4 + 4 * j);
        memcpy(&dst[j], &u, 4);
        if (!isfinite(dst[j]))
          CTRAIN_FAIL(CTRAIN_E_DATA, "%s: record %llu: feature %zu is not finite", path,
                      (unsigned long long)k, j);
      }
    }
  }
  ds->n = n0 + n;
  ds->dim = (int)dim;
  ds->rank = (int)rank;
  memcpy(ds->shape, shape, sizeof(shape));
out:
  if (g)
    gzclose(g);
  free(rec);
  return result;
}

/* The policy `policy` comes to for nfiles files and `world` workers, as
 * tf.data's AutoShardPolicy: AUTO is FILE with a file per worker, else DATA
 * (a warning naming the counts: every worker reads every file). */
static ctrain_err resolve_policy(data_shard_policy *policy, int nfiles, int world, char *errbuf,
                                 size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (*policy == DATA_SHARD_AUTO && world > 1 && nfiles < world)
    LOG_WARN("--shard auto: %d data file(s) for %d workers, fewer files than workers: sharding by "
             "DATA (every worker reads every file and takes one sample in %d)",
             nfiles, world, world);
  if (*policy == DATA_SHARD_AUTO)
    *policy = (world > 1 && nfiles >= world) ? DATA_SHARD_FILE : DATA_SHARD_DATA;
  if (world == 1 && *policy != DATA_SHARD_OFF)
    *policy = DATA_SHARD_DATA;
  if (*policy == DATA_SHARD_FILE && nfiles < world)
    CTRAIN_FAIL(
        CTRAIN_E_CONFIG,
        "--shard file: %d data file(s) for %d workers; FILE sharding needs at least one file per "
        "worker (use --shard auto or data)",
        nfiles, world);
out:
  return result;
}

static ctrain_err load_one(const char *file, const data_format *fmt, data_set *ds, char *errbuf,
                           size_t errlen) {
  switch (ds->format) {
  case DATA_FMT_RAW:
    return load_raw(file, ds, errbuf, errlen);
  case DATA_FMT_TFRECORD:
    return tfr_load(file, fmt, ds, errbuf, errlen);
  case DATA_FMT_NUMPY:
    return npy_load(file, fmt, ds, errbuf, errlen);
  default:
    return load_idx(file, ds, errbuf, errlen);
  }
}

ctrain_err data_load(const char *spec, const data_format *fmt, data_shard_policy policy, int rank,
                     int world, data_set *ds, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  files_list fl = {0};
  memset(ds, 0, sizeof(*ds));
  if (!spec || !spec[0])
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--data: no training data given");
  result = files_expand(spec, fmt->format != DATA_FMT_IDX, "--data", &fl, errbuf, errlen);
  if (result)
    goto out;
  if (fl.n == 0)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--data: no training data given");
  ds->format = fmt->format;
  if (ds->format == DATA_FMT_AUTO)
    ds->format = tfr_name_matches(fl.names[0])   ? DATA_FMT_TFRECORD
                 : npy_name_matches(fl.names[0]) ? DATA_FMT_NUMPY
                                                 : DATA_FMT_IDX;
  if (ds->format == DATA_FMT_NUMPY)
    npy_drop_partners(fl.names, &fl.n, fmt);
  if (world < 1)
    world = 1;
  result = resolve_policy(&policy, fl.n, world, errbuf, errlen);
  if (result)
    goto out;
  for (int i = 0; i < fl.n; i++) {
    if (policy == DATA_SHARD_FILE && i % world != rank)
      continue;
    result = load_one(fl.names[i], fmt, ds, errbuf, errlen);
    if (result)
      goto out;
  }
  if (!ds->n)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: no samples%s", spec,
                policy == DATA_SHARD_FILE ? " in this worker's files" : "");
  ds->policy = policy;
  ds->shard_rank = policy == DATA_SHARD_DATA ? rank : 0;
  ds->shard_world = policy == DATA_SHARD_DATA ? world : 1;
out:
  files_free(&fl);
  if (result)
    data_free(ds);
  return result;
}

size_t data_local_count(const data_set *ds) {
  size_t W = (size_t)ds->shard_world, r = (size_t)ds->shard_rank;
  return ds->n > r ? (ds->n - r + W - 1) / W : 0;
}

size_t data_epoch_order(const data_set *ds, uint64_t seed, int epoch, int shuffle,
                        uint32_t *order) {
  for (size_t i = 0; i < ds->n; i++)
    order[i] = (uint32_t)i;
  if (shuffle) {
    rng_t r;
    rng_seed(&r, seed, 0x5348554600000000ull + (uint64_t)epoch);
    for (size_t i = ds->n; i > 1; i--) {
      size_t j = (size_t)rng_below(&r, i);
      uint32_t t = order[i - 1];
      order[i - 1] = order[j];
      order[j] = t;
    }
  }
  size_t W = (size_t)ds->shard_world, k = 0;
  for (size_t p = (size_t)ds->shard_rank; p < ds->n; p += W)
    order[k++] = order[p];
  return k;
}

void data_gather(const data_set *ds, const uint32_t *order, int B, float *x, int32_t *y) {
  size_t d = (size_t)ds->dim;
  for (int b = 0; b < B; b++) {
    memcpy(x + (size_t)b * d, ds->x + (size_t)order[b] * d, d * sizeof(float));
    y[b] = ds->y[order[b]];
  }
}

ctrain_err data_write_raw(const char *path, const data_set *ds, size_t from, size_t to,
                          char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  FILE *f = NULL;
  uint8_t hdr[36], *rec = NULL;
  size_t d = (size_t)ds->dim;
  int u8 = 1;
  for (size_t k = from * d; k < to * d && u8; k++) {
    float v = ds->x[k] * 255.0f;
    u8 = v >= 0 && v <= 255 && fabsf(v - roundf(v)) < 1e-3f;
  }
  rec = malloc(4 + 4 * d);
  f = fopen(path, "wb");
  if (!rec || !f)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: %s", path, strerror(errno));
  memcpy(hdr, "CTRAINR1", 8);
  ctrain_put_le32(hdr + 8, (uint32_t)(to - from));
  ctrain_put_le32(hdr + 12, (uint32_t)((uint64_t)(to - from) >> 32));
  ctrain_put_le32(hdr + 16, u8 ? 0 : 1);
  ctrain_put_le32(hdr + 20, (uint32_t)ds->rank);
  for (int i = 0; i < ds->rank; i++)
    ctrain_put_le32(hdr + 24 + 4 * i, (uint32_t)ds->shape[i]);
  if (fwrite(hdr, 1, 24 + 4 * (size_t)ds->rank, f) != 24 + 4 * (size_t)ds->rank)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: write: %s", path, strerror(errno));
  for (size_t k = from; k < to; k++) {
    ctrain_put_le32(rec, (uint32_t)ds->y[k]);
    const float *x = ds->x + k * d;
    for (size_t j = 0; j < d; j++) {
      if (u8) {
        rec[4 + j] = (uint8_t)lroundf(x[j] * 255.0f);
      } else {
        uint32_t u;
        memcpy(&u, &x[j], 4);
        ctrain_put_le32(rec + 4 + 4 * j, u);
      }
    }
    size_t rl = 4 + d * (u8 ? 1 : 4);
    if (fwrite(rec, 1, rl, f) != rl)
      CTRAIN_FAIL(CTRAIN_E_IO, "%s: write: %s", path, strerror(errno));
  }
  if (fclose(f)) {
    f = NULL;
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: close: %s", path, strerror(errno));
  }
  f = NULL;
out:
  if (f)
    fclose(f);
  free(rec);
  return result;
}
