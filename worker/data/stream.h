/* worker/data/stream.h - training data read as a stream, local files and
 * objects in S3-compatible storage alike, in bounded memory, with a
 * tf.data-style shuffle buffer and an exact resume.
 *
 * The spec (--data, --test-data) is a comma-separated list whose entries are
 * local paths (a file, a directory, a glob: worker/data/files.h) or object
 * URIs: s3://bucket/prefix/ (every object under the prefix, in key order),
 * s3://bucket/key (one object) or s3://bucket/prefix/train-*.tfrecord.gz (a
 * glob(7) over the listing of the literal part before the first wildcard;
 * `*` does not cross a `/`). gs:// likewise (GCS's XML API). The objects
 * are read with the client in objstore/ (the backups' one: endpoint,
 * region, credentials and TLS from data_stream_options.s3 and the
 * environment, its retries and its bounds against a hostile server).
 *
 * Formats: TFRecord (none, GZIP, ZLIB; worker/data/tfrecord.h) is streamed
 * record by record; a NumPy shard (.npy beside its labels, .npz) is read
 * whole (its array header, or a zip's directory at its end, must be seen
 * first), so for NumPy the memory bound grows by the largest shard. A
 * NumPy object must be a .npz (a .npy's labels would be another object);
 * it is read through a file of its name in a private directory under
 * $TMPDIR (a link to its cache entry, or its bytes fetched there).
 *
 * Shards and order, as tf.data: the spec's files in the listed order; the
 * policy (data.h) as for in-memory data: FILE gives worker r the files i
 * with i % world == r, OFF all of them, DATA all of them with the records
 * of global index g % world == r. Each epoch reads this worker's files in
 * an order shuffled from (seed, epoch) (FILE: and the rank), then passes the
 * records through a shuffle buffer of `shuffle_buffer` records seeded from
 * (seed, epoch, rank): filled with the first records, each draw takes a
 * uniformly chosen slot and refills it with the next record (when the
 * stream has ended, the last slot moves into it), as tf.data's
 * Dataset.shuffle. shuffle 0: files and records in natural order.
 *
 * Threads: a fetcher reads the current and the next files' bytes ahead
 * (ranged GETs of `chunk` bytes for an object, pread for a file) into a
 * queue holding at most prefetch_bytes; a decoder inflates, checks each
 * record's CRCs, decodes the Example and queues samples; the caller's
 * data_stream_next only copies samples out of the shuffle buffer, so a step
 * waits on the network only when the read-ahead is empty. Memory: the
 * prefetch, the shuffle buffer (shuffle_buffer x dim floats) and a decoded
 * queue of a few batches; never a whole data set.
 *
 * Record counts: data_stream_open reads this worker's files once (their
 * records counted and checked; with a cache it is the pass that fills it),
 * so every worker knows its records per epoch before the first step (the
 * train loop agrees on the same number of steps everywhere).
 *
 * Exact resume: the shuffle buffer's evolution depends only on the record
 * counts and the seeds, never on the records' bytes. data_stream_begin
 * (epoch, skip) replays `skip` draws on record indices alone (O(skip) time,
 * O(shuffle_buffer) memory), then re-reads from the file holding the oldest
 * record still in the buffer up to the stream position, keeping just those
 * records: the draws that follow are exactly an unbroken run's. The backup
 * therefore needs only (epoch, step) and the data's identity
 * (data_stream_identity), which the config hash covers.
 *
 * Faults: a short read, a reset connection or a 5xx on a range is retried
 * by the client (the whole range again, with its backoff): a range's bytes
 * are queued only when complete, so nothing is skipped or read twice; an
 * object replaced while it is read (its ETag changed, If-Match) is
 * CTRAIN_E_DATA. A range that stays unreadable is the client's retryable
 * failure: CTRAIN_E_NET (exit 75) naming the object and the byte offset. A
 * corrupt record is CTRAIN_E_DATA (exit 65) naming the file or object, the
 * record's index and offset, as for local files.
 *
 * Cache (cache_dir): each object, once read whole, is kept as
 * cache_dir/<sha256 of its URI>.data with a sidecar (URI, size, ETag, the
 * SHA-256 of its bytes), written to a temporary name and renamed, so a
 * killed worker leaves no entry that looks complete. An entry is used only
 * when its size and ETag are the listing's and, the first time this process
 * opens it, its SHA-256 is the sidecar's (a mismatch: removed, read from
 * the store again). Later epochs read the cache.
 *
 * Errors name the flag (o->flag), the file or object, and the cause. */
#ifndef CTRAIN_DATA_STREAM_H
#define CTRAIN_DATA_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "ctrain/s3.h"
#include "worker/data/data.h"

#define DATA_STREAM_PREFETCH_DEFAULT ((size_t)256 << 20) /* --data-prefetch-bytes */
#define DATA_STREAM_SHUFFLE_DEFAULT  10000               /* --shuffle-buffer, records */
#define DATA_STREAM_CHUNK            ((size_t)8 << 20)   /* a ranged GET, at most */

typedef struct data_stream data_stream;

typedef struct {
  const char *spec; /* comma-separated local paths / object URIs */
  const char *flag; /* "--data" or "--test-data", for messages */
  data_format fmt;  /* TFRecord or NumPy (AUTO: NumPy when the first name ends in
                       .npy/.npz, else TFRecord) */
  data_shard_policy policy;
  int rank, world;
  uint64_t seed;
  int shuffle;           /* 1: shuffled file order and shuffle buffer; 0: natural order */
  size_t shuffle_buffer; /* records; 0: no buffer (the file order only) */
  size_t prefetch_bytes; /* 0: DATA_STREAM_PREFETCH_DEFAULT; at least 2 x chunk */
  const char *cache_dir; /* NULL: no cache */
  const s3_options *s3;  /* endpoint, region, CA (its uri is ignored); NULL: defaults */
} data_stream_options;

/* True when some entry of spec is an object URI (s3:// or gs://). */
int data_spec_has_uri(const char *spec);

/* Expands the spec (listing buckets), applies the policy and reads this
 * worker's files once to count and check their records. *out owned by the
 * caller (data_stream_free). Errors as above; CTRAIN_E_CONFIG for a bad URI
 * or a store refusing access (exit 78), CTRAIN_E_DATA for a spec that
 * matches nothing or too few files for FILE. */
CTRAIN_NODISCARD ctrain_err data_stream_open(const data_stream_options *o, data_stream **out,
                                             char *errbuf, size_t errlen);

/* Records this worker draws per epoch (the same every epoch). */
uint64_t data_stream_count(const data_stream *s);

/* The samples' shape as the files gave it: ds's n (data_stream_count),
 * dim, rank, shape, max_label, format and policy (AUTO resolved) are set;
 * x and y stay NULL. */
void data_stream_describe(const data_stream *s, data_set *ds);

/* SHA-256 over what identifies the data: every file's name, size and ETag
 * (a local file: its size and mtime), its record count, the policy, the
 * shuffle buffer size. */
void data_stream_identity(const data_stream *s, uint8_t out[32]);

/* Starts epoch `epoch` (threads started), positioned after `skip` records
 * drawn (0: its beginning; a resume: the shuffle buffer rebuilt exactly).
 * skip <= data_stream_count. Ends the epoch before it, if any. */
CTRAIN_NODISCARD ctrain_err data_stream_begin(data_stream *s, int epoch, uint64_t skip,
                                              char *errbuf, size_t errlen);

/* The next n records of the epoch into x (n, dim) and y (n); CTRAIN_E_INVAL
 * past the epoch's count. A background failure (read, decode) is returned
 * here with its message. */
CTRAIN_NODISCARD ctrain_err data_stream_next(data_stream *s, size_t n, float *x, int32_t *y,
                                             char *errbuf, size_t errlen);

/* Stops the epoch's threads (nothing held but the shuffle buffer). */
void data_stream_end(data_stream *s);

void data_stream_free(data_stream *s);

/* Every record of every file of the spec, in natural order and this
 * worker's DATA shard of them (a test set), into an in-memory data_set, as
 * data_load returns it. */
CTRAIN_NODISCARD ctrain_err data_stream_load(const data_stream_options *o, data_set *ds,
                                             char *errbuf, size_t errlen);

/* What the reader holds at most, in bytes (prefetch + shuffle buffer +
 * decoded queue), for the log line beside peak RSS. */
size_t data_stream_budget_bytes(const data_stream *s);

/* The most bytes the read-ahead (queued and being decoded) held at once
 * since data_stream_open: at most the prefetch (tests, logs). */
size_t data_stream_peak_bytes(const data_stream *s);

#endif
