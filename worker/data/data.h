/* worker/data/data.h - training data: IDX and raw record readers, sharding, and
 * the seeded per-epoch order.
 *
 * IDX (MNIST format, gzip or plain; zlib reads both): `path` is either the
 * images file ("...-images-idx3-ubyte.gz", labels found by replacing
 * "images-idx3" with "labels-idx1") or a prefix P naming
 * "P-images-idx3-ubyte.gz" and "P-labels-idx1-ubyte.gz". Pixels (ubyte) are
 * scaled to [0, 1].
 *
 * Raw records (--format raw), one or more files separated by commas, each
 * (integers little-endian):
 *   magic   8 bytes  "CTRAINR1"
 *   n       u64      number of records
 *   dtype   u32      0: u8 features scaled by 1/255, 1: float32 features as is
 *   rank    u32      1..3, then rank x u32 per-sample dims
 *   n records: label i32, then prod(dims) features of dtype
 *
 * TFRecord (--data-format tfrecord, or auto with names *.tfrecord[s][.gz|.zlib]):
 * worker/data/tfrecord.h; each record a tf.train.Example whose image
 * feature (--feature-image) is one bytes_list value of raw uint8 (scaled to
 * [0, 1], shape from --image-shape) or a float_list (as is), and whose label
 * (--feature-label) is one int64.
 *
 * NumPy (--data-format numpy, or auto with names *.npy / *.npz):
 * worker/data/numpy.h; .npz archives of an images and a labels array, or
 * .npy images files beside their labels files.
 *
 * For every format but IDX, each comma-separated entry of the spec is a
 * file, a directory (its regular files, sorted by name, dot files skipped)
 * or a glob(7) pattern (its matches, sorted); the resulting list is what
 * sharding counts.
 *
 * Sharding (--shard), as tf.data defines the policies: FILE gives worker r
 * the files i with i % workers == r (an error with fewer files than
 * workers); DATA gives it the elements i % workers == r; AUTO is FILE when
 * there are at least as many files as workers, else DATA (so it never fails
 * for lack of files); OFF gives every worker everything. Unlike tf.data,
 * DATA shards the globally shuffled order (same seed on every worker), so
 * the union of the workers' batches at a step is exactly the batch one
 * worker with the global batch size would take.
 *
 * Limits, checked in 64-bit arithmetic that cannot wrap: each per-sample
 * dimension at most 65536, at most 2^24 features per sample, at most 4 GiB of
 * payload per file, at most 2^32 - 1 samples in all (the epoch order is
 * uint32_t). Memory grows as bytes arrive, so a header that claims more
 * than its file holds is a truncation error, not a huge allocation.
 *
 * Every error is CTRAIN_E_DATA (exit 65) naming the file and the field,
 * except a FILE policy with too few files (CTRAIN_E_CONFIG) and an
 * allocation that fails (CTRAIN_E_NOMEM). */
#ifndef CTRAIN_DATA_H
#define CTRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"

/* The data layer's own values; the worker's flags (worker/options.c) map
 * --data-format, --compression and --shard onto them. The format's and the
 * policy's are part of the backup config hash: append, never renumber. */
typedef enum {
  DATA_FMT_IDX = 0,
  DATA_FMT_RAW,
  DATA_FMT_TFRECORD,
  DATA_FMT_AUTO,
  DATA_FMT_NUMPY
} data_file_format;
typedef enum {
  DATA_COMP_AUTO = 0,
  DATA_COMP_NONE,
  DATA_COMP_GZIP,
  DATA_COMP_ZLIB
} data_compression;
typedef enum {
  DATA_SHARD_AUTO = 0,
  DATA_SHARD_FILE,
  DATA_SHARD_DATA,
  DATA_SHARD_OFF
} data_shard_policy;

/* How to read the files: the format and, for TFRecord, the features. */
typedef struct {
  data_file_format format; /* DATA_FMT_AUTO: TFRecord or NumPy by the first file's name, else IDX */
  data_compression compression;
  const char *feature_image; /* NULL: "image" (.npz/.npy: "x") */
  const char *feature_label; /* NULL: "label" (.npz/.npy: "y") */
  int image_rank;            /* 0: a float_list's length is the shape */
  int image_shape[3];
} data_format;

typedef struct {
  size_t n;     /* samples held */
  int dim;      /* features per sample */
  int rank;     /* per-sample shape rank */
  int shape[3]; /* per-sample shape */
  float *x;     /* (n, dim) */
  int32_t *y;   /* (n) labels */
  int32_t max_label;
  data_file_format format;     /* the format read (AUTO resolved) */
  data_shard_policy policy;    /* effective policy (AUTO resolved) */
  int shard_rank, shard_world; /* DATA: take positions p % world == rank of each order */
} data_set;

/* Loads the files of `spec` this worker reads under `policy` for worker
 * `rank` of `world` (world 1: everything). `ds` owns its arrays
 * (data_free). */
CTRAIN_NODISCARD ctrain_err data_load(const char *spec, const data_format *fmt,
                                      data_shard_policy policy, int rank, int world, data_set *ds,
                                      char *errbuf, size_t errlen);

void data_free(data_set *ds);

/* For the readers in worker/data/: grows ds->x and ds->y to hold `n`
 * samples of `dim` features (ds->n unchanged); `file` names the data in
 * the message. CTRAIN_E_DATA past the caps, CTRAIN_E_NOMEM. */
CTRAIN_NODISCARD ctrain_err data_grow(data_set *ds, uint64_t n, uint64_t dim, const char *file,
                                      char *errbuf, size_t errlen);

/* Samples this worker draws per epoch. */
size_t data_local_count(const data_set *ds);

/* The epoch's order of this worker's samples: a Fisher-Yates shuffle of all
 * ds->n indices seeded by (seed, epoch), then this worker's DATA shard of
 * it. `order` must hold ds->n entries; returns data_local_count(ds).
 * shuffle 0: natural order (evaluation). */
size_t data_epoch_order(const data_set *ds, uint64_t seed, int epoch, int shuffle, uint32_t *order);

/* Copies samples order[0..B) into x (B, dim) and y (B). */
void data_gather(const data_set *ds, const uint32_t *order, int B, float *x, int32_t *y);

/* Writes a raw record file (u8 dtype if every feature is k/255, else f32)
 * of samples [from, to) of ds; used by tests and tools. */
CTRAIN_NODISCARD ctrain_err data_write_raw(const char *path, const data_set *ds, size_t from,
                                           size_t to, char *errbuf, size_t errlen);

#endif
