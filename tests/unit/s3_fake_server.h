/* s3_fake_server.h - a scripted, hostile S3 server on loopback for the
 * unit tests: the library ctrain_test_s3 (s3_fake_server.c).
 *
 * It holds one bucket (FAKE_BUCKET) whose objects live under the prefix
 * FAKE_PREFIX, each with its own ETag, and answers path-style requests one
 * connection at a time ("Connection: close"): ListObjectsV2 (list_mode),
 * GET (whole, or a range "Range: bytes=a-b": 206 with Content-Range;
 * "If-Match" other than the object's ETag: 412), HEAD, PUT (put_mode),
 * CopyObject, DELETE and ListMultipartUploads. Anything else is 501.
 *
 * The GETs of `victim` misbehave as get_mode says, all of them or only
 * some: the first fault_after of them are served correctly, then
 * fault_times of them (0: every one after those) misbehave, and the rest
 * are served correctly again. So "the 2nd GET answers 503, then it is
 * served" is fault_after 1, fault_times 1; "retries run out" is
 * fault_times 0. Counters tell the test what was asked and sent. */
#ifndef CTRAIN_S3_FAKE_SERVER_H
#define CTRAIN_S3_FAKE_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "ctrain/s3.h"

#define FAKE_BUCKET "bkt"
#define FAKE_PREFIX "p"
#define FAKE_MAXOBJ 32

typedef struct fake_obj {
  char name[96]; /* relative to the prefix FAKE_PREFIX */
  unsigned char *data;
  size_t len;
  char etag[40];     /* quotes included; fake_put_object sets it */
  _Atomic int n_get; /* GETs of this object */
} fake_obj;

enum fake_get_mode {
  GET_OK,
  GET_TRUNCATE,     /* close-delimited, no Content-Length, no checksum: half the bytes */
  GET_DRIP,         /* the right Content-Length, bytes at about 1500 B/s */
  GET_ENDLESS,      /* close-delimited, never ends (a range: 206, its Content-Range) */
  GET_BAD_SUM,      /* whole, with an x-amz-checksum-sha256 that is not its own */
  GET_FLIPPED,      /* whole, one byte flipped, no checksum: our own SHA-256 catches it */
  GET_RETRY_503,    /* 503 SlowDown with Retry-After: retry_after */
  GET_BIG_HEADER,   /* 300 KB of response headers */
  GET_FORGED_MSG,   /* 500 with a <Message> holding &#10; and a raw ESC */
  GET_DRIP_HUGE,    /* Content-Length: 1 GB, bytes at about 1500 B/s until the client leaves */
  GET_PACED,        /* whole, with its checksum, at about 200 KB/s */
  GET_503,          /* 503 ServiceUnavailable, no Retry-After */
  GET_SHORT,        /* the full Content-Length declared, half the bytes sent, then closed */
  GET_RESET,        /* the full Content-Length declared, half the bytes sent, then a reset (RST) */
  GET_REDIRECT_301, /* 301 PermanentRedirect, Location: this very URL */
  GET_REDIRECT_307, /* 307 TemporaryRedirect, Location: this very URL */
  GET_REPLACE,      /* the object is replaced (new bytes, new ETag), then the GET is served */
};
enum fake_put_mode {
  PUT_NONE, /* 501, as for any request the tests do not expect */
  PUT_OK,   /* the whole body read, then 200 */
  PUT_DRIP, /* the body read at about 1500 B/s until the client leaves */
};
enum fake_list_mode {
  LIST_OK,
  LIST_LOOP,      /* IsTruncated true, no keys, the same token every time */
  LIST_NEW_TOKEN, /* IsTruncated true, no keys, a new token every time */
  LIST_HUGE,      /* a 40 MiB answer */
  LIST_MANY,      /* pages of 1000 long keys, forever */
};

typedef struct fake {
  int lfd, port;
  pthread_t thread;
  pthread_mutex_t mu;
  fake_obj objs[FAKE_MAXOBJ];
  int nobj;
  int get_mode, list_mode;      /* get_mode applies to `victim` only */
  int fault_after, fault_times; /* which of victim's GETs get_mode applies to (above) */
  int put_mode;
  char victim[96];
  const char *retry_after;
  int uploads_paged;        /* ListMultipartUploads: two pages, markers on the first */
  char uploads_query[1024]; /* the last ListMultipartUploads query */
  int n_replaced;           /* GET_REPLACE: replacements made (a new ETag each) */
  _Atomic int n_get, n_list, n_uploads, n_delete, n_copy, n_head, n_other;
  _Atomic int n_range;          /* GETs with a Range header */
  _Atomic int n_412;            /* GETs refused on If-Match */
  _Atomic int n_faults;         /* GETs of victim answered by get_mode (not GET_OK) */
  _Atomic int deleted_uncopied; /* DELETEs of a backup no copy was made of */
  _Atomic long long sent;       /* body bytes sent for GETs */
  _Atomic long long received;   /* body bytes of PUTs read */
  _Atomic int n_put, stop;      /* stop: fake_stop is waiting (a drip ends) */
} fake;

/* Binds a loopback port (f->port) and starts the server thread. f's
 * objects and modes are set before (f zeroed first: memset). */
void fake_start(fake *f);
/* Stops the server (a drip or endless body ends), joins it, frees objects. */
void fake_stop(fake *f);
/* Adds (or replaces) `name` with a copy of len bytes of data, its ETag
 * derived from the bytes and a generation. Before fake_start or under mu. */
fake_obj *fake_put_object(fake *f, const char *name, const void *data, size_t len);
/* The object called name, NULL when absent. */
fake_obj *fake_find(fake *f, const char *name);
/* "http://127.0.0.1:<port>" into endpoint. */
void fake_endpoint(const fake *f, char *endpoint, size_t len);
/* Test credentials in the environment; no endpoint from it. */
void fake_env_keys(void);

#endif
