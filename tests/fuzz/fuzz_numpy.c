/* fuzz_numpy.c - the .npy header parser and the .npz (ZIP, stored or
 * deflated) reader on arbitrary files: never crash; an error is
 * CTRAIN_E_DATA (or NOMEM) with a message and an empty set; a set they
 * accept is consistent (dim = product of the shape, features finite, labels
 * in [0, max_label]).
 *
 * Input: byte 0 bit 0 clear: the rest is a .npz; set: bytes 1..4
 * (little-endian) are the length of the images .npy (clamped), the rest its
 * labels .npy. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/data/data.h"

static char dir[64];

static void remove_dir(void) {
  rmdir(dir);
}

static int put(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return -1;
  size_t w = n ? fwrite(p, 1, n, f) : 0;
  return (fclose(f) || w != n) ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char npz[128], xs[128], ys[128];
  if (!dir[0]) {
    snprintf(dir, sizeof(dir), "/tmp/ctrain-fuzz-numpy-XXXXXX");
    if (!mkdtemp(dir))
      abort();
    atexit(remove_dir);
  }
  if (size < 5)
    return 0;
  int pair = data[0] & 1;
  size_t first =
      (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
  snprintf(npz, sizeof(npz), "%s/f.npz", dir);
  snprintf(xs, sizeof(xs), "%s/x_f.npy", dir);
  snprintf(ys, sizeof(ys), "%s/y_f.npy", dir);
  if (pair) {
    data += 5;
    size -= 5;
    if (first > size)
      first = size;
    if (put(xs, data, first) || put(ys, data + first, size - first))
      abort();
  } else if (put(npz, data + 1, size - 1)) {
    abort();
  }
  data_set ds;
  char err[1024] = "";
  ctrain_err rc = data_load(pair ? xs : npz, &(data_format){.format = DATA_FMT_NUMPY},
                            DATA_SHARD_AUTO, 0, 1, &ds, err, sizeof(err));
  if (rc == CTRAIN_OK) {
    if (ds.n < 1 || ds.dim < 1 || ds.rank < 1 || ds.rank > 3 || !ds.x || !ds.y)
      abort();
    long prod = 1;
    for (int i = 0; i < ds.rank; i++)
      prod *= ds.shape[i];
    if (prod != ds.dim)
      abort();
    for (size_t k = 0; k < ds.n; k++)
      if (ds.y[k] < 0 || ds.y[k] > ds.max_label)
        abort();
    for (size_t k = 0; k < ds.n * (size_t)ds.dim; k++)
      if (!isfinite(ds.x[k]))
        abort();
  } else if ((rc != CTRAIN_E_DATA && rc != CTRAIN_E_NOMEM) || !err[0] || ds.x || ds.y || ds.n) {
    abort();
  }
  data_free(&ds);
  unlink(npz);
  unlink(xs);
  unlink(ys);
  return 0;
}
