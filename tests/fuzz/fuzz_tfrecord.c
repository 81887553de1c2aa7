/* fuzz_tfrecord.c - the TFRecord reader and the tf.train.Example decoder on
 * arbitrary bytes: never crash; an error is CTRAIN_E_DATA (or NOMEM) with a
 * message and an empty set; a set they accept is consistent (dim = product
 * of the shape, features finite, bytes images in [0, 1], labels in
 * [0, max_label]).
 *
 * Input: byte 0 is the mode. Bits 0-1: the compression (auto, none, gzip,
 * zlib); bit 2: the rest is a list of records (each a 2-byte little-endian
 * length, clamped, then its bytes) that the harness frames with correct CRCs,
 * so the decoder is reached past the CRC check, and also decodes directly
 * (example_find, then example_floats/int64s into buffers of exactly the
 * count); clear: the rest is the file as is. Bit 3: --image-shape 2,2 (else
 * none); bit 4: features "x" / "y" (else "image" / "label"). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/data/data.h"
#include "worker/data/example.h"
#include "worker/data/tfrecord.h"

static char dir[64];

static void remove_dir(void) {
  rmdir(dir);
}

static void put_le(uint8_t *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}

/* Decodes the record directly: the copies write exactly count values. */
static void decode_direct(const uint8_t *rec, size_t len, const char *name) {
  example_feature f;
  char err[256];
  if (example_find(rec, len, name, &f, err, sizeof(err)) != CTRAIN_OK) {
    if (!err[0])
      abort();
    return;
  }
  if (f.kind == EXAMPLE_FLOAT && f.count) {
    float *v = malloc(f.count * sizeof(float));
    if (!v)
      return;
    example_floats(&f, v);
    free(v);
  } else if (f.kind == EXAMPLE_INT64 && f.count) {
    int64_t *v = malloc(f.count * sizeof(int64_t));
    if (!v)
      return;
    example_int64s(&f, v);
    free(v);
  } else if (f.kind == EXAMPLE_BYTES && f.count &&
             (!f.bytes || f.bytes < rec || f.bytes + f.bytes_len > rec + len)) {
    abort();
  }
}

/* Writes the records of `data` framed as TFRecord into f. */
static void frame(FILE *f, const uint8_t *data, size_t size, const char *name) {
  while (size >= 2) {
    size_t n = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2;
    size -= 2;
    if (n > size)
      n = size;
    uint8_t hdr[12], foot[4];
    put_le(hdr, n, 8);
    put_le(hdr + 8, tfr_masked_crc(hdr, 8), 4);
    put_le(foot, tfr_masked_crc(data, n), 4);
    if (fwrite(hdr, 1, 12, f) != 12 || (n && fwrite(data, 1, n, f) != n) ||
        fwrite(foot, 1, 4, f) != 4)
      abort();
    decode_direct(data, n, name);
    data += n;
    size -= n;
  }
}

static void check_set(const data_set *ds, int bytes_image) {
  if (ds->n < 1 || ds->dim < 1 || ds->rank < 1 || ds->rank > 3 || !ds->x || !ds->y)
    abort();
  long prod = 1;
  for (int i = 0; i < ds->rank; i++)
    prod *= ds->shape[i];
  if (prod != ds->dim)
    abort();
  for (size_t k = 0; k < ds->n; k++)
    if (ds->y[k] < 0 || ds->y[k] > ds->max_label)
      abort();
  for (size_t k = 0; k < ds->n * (size_t)ds->dim; k++)
    if (!isfinite(ds->x[k]) || (bytes_image && (ds->x[k] < 0 || ds->x[k] > 1)))
      abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[128];
  if (!dir[0]) {
    snprintf(dir, sizeof(dir), "/tmp/ctrain-fuzz-tfrecord-XXXXXX");
    if (!mkdtemp(dir))
      abort();
    atexit(remove_dir);
  }
  if (size < 1)
    return 0;
  int mode = data[0], xy = mode & 16;
  data_format fmt = {.format = DATA_FMT_TFRECORD,
                     .compression = (data_compression)(mode & 3),
                     .feature_image = xy ? "x" : "image",
                     .feature_label = xy ? "y" : "label"};
  if (mode & 8) {
    fmt.image_rank = 2;
    fmt.image_shape[0] = fmt.image_shape[1] = 2;
  }
  snprintf(path, sizeof(path), "%s/f.tfrecord", dir);
  FILE *f = fopen(path, "wb");
  if (!f)
    abort();
  if (mode & 4)
    frame(f, data + 1, size - 1, fmt.feature_image);
  else if (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1)
    abort();
  if (fclose(f))
    abort();
  data_set ds;
  char err[1024] = "";
  ctrain_err rc = data_load(path, &fmt, DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err));
  if (rc == CTRAIN_OK)
    check_set(&ds, 0);
  else if ((rc != CTRAIN_E_DATA && rc != CTRAIN_E_NOMEM) || !err[0] || ds.x || ds.y || ds.n)
    abort();
  data_free(&ds);
  unlink(path);
  return 0;
}
