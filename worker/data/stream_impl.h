/* worker/data/stream_impl.h - the parts of the data stream (stream.h):
 * stream.c (open, the index pass, identity, end/free), stream_epoch.c
 * (begin, next, load), stream_spec.c (the spec into files), stream_fetch.c
 * (sources, the fetcher thread), stream_cache.c (the objects' cache),
 * stream_decode.c (a file's index pass, the decoder thread), stream_npy.c
 * (NumPy shards) and stream_shuffle.c (the file order and the shuffle
 * buffer's index replay).
 *
 * Positions: the epoch's stream is this worker's records in the epoch's
 * file order (DATA: only the records it keeps); position p is the p-th of
 * them. The shuffle buffer's slots hold positions; a draw depends on the
 * counts and the seed alone. One mutex and one condition variable guard
 * the byte queue (fetcher -> decoder) and the sample ring (decoder ->
 * data_stream_next); every change broadcasts. */
#ifndef CTRAIN_DATA_STREAM_IMPL_H
#define CTRAIN_DATA_STREAM_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ctrain/rng.h"
#include "ctrain/s3.h"
#include "worker/data/stream.h"

#define STREAM_MSG 1024

typedef struct {
  char *name;       /* a local path or the object's URI (messages, the cache) */
  char *key;        /* the object's whole key; NULL: a local file */
  char *bucket_uri; /* "s3://bucket" or "gs://bucket"; NULL: a local file */
  int64_t size;
  char etag[80];    /* an object's ETag; a local file: its mtime "sec.nsec" */
  uint64_t records; /* records in it (the index pass) */
  uint64_t base;    /* global index of its first record, the spec's natural order */
  uint64_t kept;    /* of them this worker's */
  char *cache_path; /* a verified cache entry to read instead; NULL: none */
} stream_file;

/* The client of one thread, made for the bucket it reads last. */
typedef struct {
  s3_client *c;
  char bucket_uri[300];
} stream_client;

/* Bytes of a file in the byte queue; eof: the file's end; err: a failure
 * (msg) the decoder reports in order. */
typedef struct stream_chunk {
  struct stream_chunk *next;
  size_t len;
  int eof;
  ctrain_err err;
  char msg[STREAM_MSG];
  uint8_t data[];
} stream_chunk;

/* A position of the buffer to refill while catching up (begin). */
typedef struct {
  uint64_t pos;
  size_t slot;
} stream_want;

struct data_stream {
  data_stream_options o; /* strings below are owned copies */
  s3_options s3;
  data_format fmt;
  data_file_format format;  /* TFRECORD or NUMPY */
  data_shard_policy policy; /* resolved */
  stream_file *files;       /* the spec's, natural order */
  int nfiles;
  int *mine; /* indices in files of this worker's */
  int nmine;
  data_set shape; /* dim, rank, shape, max_label */
  uint64_t count; /* records per epoch */
  size_t chunk, prefetch, max_record, max_shard, qcap, sbuf;
  /* The epoch. */
  int running, epoch;
  int *order;          /* (nmine) indices in files, the epoch's order */
  uint64_t *first_pos; /* (nmine) position of each one's first record */
  int start;           /* the order index the threads read from */
  rng_t rng;
  size_t size;         /* live slots */
  uint64_t next_in;    /* position refilling the next slot */
  uint64_t drawn;      /* records drawn this epoch */
  uint64_t catch_end;  /* positions before it are wanted only if listed */
  stream_want *want;   /* (nwant) sorted by pos */
  size_t nwant, iwant; /* iwant: received by next (decoder: its own) */
  uint64_t *slot_pos;  /* (sbuf) */
  float *slot_x;       /* (sbuf, dim) */
  int32_t *slot_y;
  /* Threads and queues. */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t fetcher, decoder;
  int have_fetcher, have_decoder, stop, dec_done, fetch_done;
  stream_chunk *qhead, *qtail, *cur; /* cur: the decoder's */
  size_t cur_off;
  size_t held, peak_held; /* bytes queued or being decoded */
  float *rx;              /* (qcap, dim) the decoded ring */
  int32_t *ry;
  uint64_t *rpos;
  size_t rhead, rn;
  ctrain_err rerr;
  char rmsg[STREAM_MSG];
};

/* stream_spec.c: the spec into s->files (names, sizes, ETags). */
CTRAIN_NODISCARD ctrain_err stream_expand(data_stream *s, char *errbuf, size_t errlen);
void stream_files_free(data_stream *s);

/* stream_fetch.c: one file's bytes, from its cache entry, the store or
 * the disk, in order. */
typedef struct {
  data_stream *s;
  stream_file *f;
  int fd;
  s3_client *cli;
  int64_t off;
  void *fill; /* a cache entry being written (stream_cache_fill), or NULL */
} stream_src;

CTRAIN_NODISCARD ctrain_err stream_src_open(data_stream *s, stream_file *f, stream_client *cl,
                                            int fill, stream_src *src, char *errbuf, size_t errlen);
/* Up to n bytes (at most s->chunk for an object); *got < n only at the end. */
CTRAIN_NODISCARD ctrain_err stream_src_read(stream_src *src, void *buf, size_t n, size_t *got,
                                            char *errbuf, size_t errlen);
/* Closes src; complete (every byte read): its cache entry committed. */
CTRAIN_NODISCARD ctrain_err stream_src_close(stream_src *src, int complete, char *errbuf,
                                             size_t errlen);
void stream_client_free(stream_client *cl);
void *stream_fetch_main(void *arg);

/* The cache (stream.h): the entry of `uri` in dir, used when its sidecar
 * says size and etag and (first use in this process) the SHA-256 of its
 * bytes agrees; *path (owned) NULL when there is none usable (a bad one is
 * removed). */
CTRAIN_NODISCARD ctrain_err stream_cache_lookup(const char *dir, const char *uri, int64_t size,
                                                const char *etag, char **path, char *errbuf,
                                                size_t errlen);
typedef struct stream_cache_fill stream_cache_fill;
CTRAIN_NODISCARD ctrain_err stream_cache_begin(const char *dir, const char *uri,
                                               stream_cache_fill **out, char *errbuf,
                                               size_t errlen);
CTRAIN_NODISCARD ctrain_err stream_cache_write(stream_cache_fill *cf, const void *buf, size_t n,
                                               char *errbuf, size_t errlen);
/* Writes the sidecar and renames both into place (commit 1), or removes
 * the temporary files (commit 0); frees cf. */
CTRAIN_NODISCARD ctrain_err stream_cache_end(stream_cache_fill *cf, int commit, int64_t size,
                                             const char *etag, char *errbuf, size_t errlen);

/* stream_decode.c: the index pass over file f (records, shape, max_label,
 * the largest record), filling the cache; the decoder thread. */
CTRAIN_NODISCARD ctrain_err stream_index_file(data_stream *s, stream_file *f, stream_client *cl,
                                              char *errbuf, size_t errlen);
void *stream_decode_main(void *arg);
/* stream_npy.c: a NumPy shard whole into ds (owned by the caller). */
CTRAIN_NODISCARD ctrain_err stream_npy_read(data_stream *s, stream_file *f, stream_client *cl,
                                            data_set *ds, char *errbuf, size_t errlen);
/* Whether file f's record k is this worker's. */
int stream_keeps(const data_stream *s, const stream_file *f, uint64_t k);

/* stream_shuffle.c: the epoch's file order, positions and the buffer's
 * state after `skip` draws (slot positions, the positions to catch up). */
CTRAIN_NODISCARD ctrain_err stream_plan(data_stream *s, int epoch, uint64_t skip, char *errbuf,
                                        size_t errlen);
/* The shuffle buffer's generator of (seed, epoch, rank): uniform slots
 * drawn with rng_below(live slots), one a draw. */
void stream_buffer_rng(rng_t *r, uint64_t seed, int epoch, int rank);
/* One draw's slot (size > 0), and the buffer's index update. */
size_t stream_draw(data_stream *s, int *refill);

#endif
