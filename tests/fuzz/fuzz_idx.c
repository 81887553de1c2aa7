/* fuzz_idx.c - the data readers (data_load) on arbitrary files: never
 * crash; an error is CTRAIN_E_DATA (or NOMEM) with a message and an empty
 * set; a set they accept is consistent (dim = product of the shape,
 * features finite, IDX pixels in [0, 1], labels in [0, max_label]).
 *
 * Input: byte 0 selects the reader (bit 0 clear: an IDX pair, set: a raw
 * record file); bytes 1..4 (little-endian) are the length of the first file,
 * clamped to what is left; the first file is the IDX images (or the raw
 * file), the rest the IDX labels. The files are written plain; zlib reads
 * gzip too, so an input may carry either. */
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
  char prefix[128], img[160], lab[160];
  if (!dir[0]) {
    snprintf(dir, sizeof(dir), "/tmp/ctrain-fuzz-idx-XXXXXX");
    if (!mkdtemp(dir))
      abort();
    atexit(remove_dir);
  }
  if (size < 5)
    return 0;
  int raw = data[0] & 1;
  size_t first =
      (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
  data += 5;
  size -= 5;
  if (first > size)
    first = size;
  snprintf(prefix, sizeof(prefix), "%s/f", dir);
  snprintf(img, sizeof(img), "%s-images-idx3-ubyte", prefix);
  snprintf(lab, sizeof(lab), "%s-labels-idx1-ubyte", prefix);
  if (put(img, data, first) || (!raw && put(lab, data + first, size - first)))
    abort();
  data_set ds;
  char err[512] = "";
  ctrain_err rc =
      data_load(raw ? img : prefix, &(data_format){.format = raw ? DATA_FMT_RAW : DATA_FMT_IDX},
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
      if (!isfinite(ds.x[k]) || (!raw && (ds.x[k] < 0 || ds.x[k] > 1)))
        abort();
  } else if ((rc != CTRAIN_E_DATA && rc != CTRAIN_E_NOMEM) || !err[0] || ds.x || ds.y || ds.n) {
    abort();
  }
  data_free(&ds);
  unlink(img);
  unlink(lab);
  return 0;
}
