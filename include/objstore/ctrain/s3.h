/* ctrain/s3.h - a small S3 client for backups in object storage
 * (s3://bucket/prefix on AWS or any S3-compatible store, gs://bucket/prefix
 * through GCS's XML API with HMAC keys).
 *
 * Objects are named relative to the location's prefix (a location without
 * one, "s3://bucket" or "s3://bucket/", names whole keys). Bodies stream from
 * and to file descriptors (pread/write in pieces, never a whole object in
 * memory); s3_get_range reads one bounded range (at most S3_RANGE_MAX) into
 * the caller's memory. An upload is visible only when complete: up to the
 * multipart threshold one PUT, above it a multipart upload (create, parts,
 * complete) that is aborted on any failure, so no partial object is ever
 * visible.
 * Every body carries its SHA-256: for s3:// (unless switched off) as
 * x-amz-checksum-sha256, a signed header (or, for a body from an s3_source,
 * the trailer of an aws-chunked body) the store checks the body against,
 * stores and checks again on GET, with the body itself sent
 * UNSIGNED-PAYLOAD as the AWS SDKs do (the store hashes it once); for gs://
 * (and with checksums off) as the signed x-amz-content-sha256. Downloads report the SHA-256 of what
 * was written.
 *
 * 5xx, 429, SlowDown and other throttling, timeouts and connection errors
 * are retried with exponential backoff and jitter (Retry-After honoured up
 * to backoff_max_ms, 20 s by default, never longer);
 * permanent refusals (403 AccessDenied/InvalidAccessKeyId/
 * SignatureDoesNotMatch, NoSuchBucket, wrong region) return CTRAIN_E_CONFIG
 * at once, so ctrain_exit_for_err gives 78. Every error message names the
 * operation, s3://bucket/key, the HTTP status and the server's error Code
 * and Message; credentials never appear in a message or a log line.
 *
 * Credentials come from the environment: AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN (optional); the region from
 * s3_options.region, else AWS_REGION / AWS_DEFAULT_REGION, else the scheme's
 * default; the endpoint from s3_options.endpoint, else AWS_ENDPOINT_URL_S3 /
 * AWS_ENDPOINT_URL.
 *
 * A hostile or broken server cannot hold a request forever or make it grow
 * without bound: an attempt that has moved fewer than
 * rolling_min_bytes_per_s x rolling_window_s bytes (sent and received
 * together) over its last rolling_window_s seconds ends ("too slow", naming
 * the host and the rate measured), whatever size the server declares (a
 * dripped body ends within about one window); each attempt also has an
 * outer deadline of stall_timeout_s plus its bytes at min_rate_bytes_per_s;
 * an answer is capped (a GET at the object's listed size or Content-Length,
 * a ranged GET at its range, an XML answer at 16 MiB, headers at 64 KiB:
 * "answer too large"), a listing at list_max_pages pages and list_max_bytes
 * of memory, with no continuation repeated and at most 8 truncated pages in
 * a row without an entry. Each of these is a retryable failure
 * (s3_client_last_retryable; the worker exits 75) whose message names the
 * operation, the bucket and the cause. Text the server chose (<Code>,
 * <Message>, keys, header values) is escaped (s3_escape: control bytes as
 * \xNN) before it reaches a message.
 *
 * A client holds one reused curl handle: one thread at a time.
 * curl_global_init() must have been called (once, in main). */
#ifndef CTRAIN_S3_H
#define CTRAIN_S3_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "ctrain/s3_proto.h"

#define S3_MIN_PART_SIZE ((size_t)5 << 20) /* S3's smallest part but the last */
#define S3_MAX_PARTS     10000

typedef struct s3_options {
  const char *uri;              /* "s3://bucket/prefix" or "gs://bucket/prefix" (required) */
  const char *endpoint;         /* NULL: env, else the scheme's default; set: path-style */
  const char *region;           /* NULL: env, else "us-east-1" (gs: "auto") */
  size_t multipart_threshold;   /* 0: 64 MiB; larger objects go multipart */
  size_t part_size;             /* 0: 16 MiB; raised to S3_MIN_PART_SIZE and to fit 10000 parts */
  int max_attempts;             /* 0: 6 attempts per request, the first included */
  long backoff_base_ms;         /* 0: 200 */
  long backoff_max_ms;          /* 0: 20000 */
  long connect_timeout_s;       /* 0: 10 */
  long stall_timeout_s;         /* 0: 60: a transfer under 1 KiB/s this long is a timeout */
  int64_t max_send_bytes_per_s; /* 0: unlimited (keeps a backup from starving the collective) */
  int64_t min_rate_bytes_per_s; /* 0: 256 KiB/s (halved max_send_bytes_per_s, if lower): an
                                   attempt moving N bytes ends within stall_timeout_s +
                                   N / this seconds (an outer bound: N may be what the
                                   server declares) */
  int64_t rolling_min_bytes_per_s; /* 0: 64 KiB/s (for an upload halved max_send_bytes_per_s,
                                      if lower): an attempt whose bytes sent and received over
                                      its last rolling_window_s fall under this average ends
                                      (retryable), checked once the first window has passed;
                                      not for CopyObject and CompleteMultipartUpload, where
                                      the server works in silence (their deadline holds) */
  long rolling_window_s;           /* 0: 30: the window rolling_min_bytes_per_s is averaged over */
  size_t list_max_bytes;           /* 0: 64 MiB: memory one s3_list/s3_list_uploads may hold */
  int list_max_pages;              /* 0: 10000: pages one listing may take */
  int checksum;        /* x-amz-checksum-sha256: 0 default (on for s3://, off for gs://, whose XML
                         API has its own x-goog-hash), 1 on, -1 off (stores that refuse them) */
  const char *ca_file; /* NULL: the system's CA bundle */
} s3_options;

typedef struct s3_client s3_client;

/* One object as listed or headed. */
typedef struct s3_object {
  char name[1025];        /* relative to the location's prefix */
  int64_t size;           /* bytes */
  char etag[80];          /* as the server sent it, quotes included */
  char last_modified[40]; /* ISO 8601 (list) or RFC 1123 (head), as the server sent it */
} s3_object;

typedef struct s3_object_list {
  s3_object *items; /* owned; s3_object_list_free */
  size_t n, alloc;
} s3_object_list;

/* Creates a client for opt (copied; strings may be freed after). *out owned
 * by the caller (s3_client_free). CTRAIN_E_CONFIG for a bad uri/endpoint/
 * region or missing credentials, CTRAIN_E_NOMEM. No request is sent. */
CTRAIN_NODISCARD ctrain_err s3_client_new(const s3_options *opt, s3_client **out, char *errbuf,
                                          size_t errlen);

/* Frees c (NULL accepted); the secret is wiped from memory first. */
void s3_client_free(s3_client *c);

/* The parsed location (borrowed, valid while c lives). */
const s3_location *s3_client_location(const s3_client *c);

/* Uploads the whole regular file open as fd (read with pread from offset 0;
 * the file position is not used) to `name`. Single PUT up to the threshold,
 * multipart above it, aborted on failure. sha256_hex (optional, 65 bytes)
 * receives the SHA-256 of what was sent. */
CTRAIN_NODISCARD ctrain_err s3_put_fd(s3_client *c, const char *name, int fd, char *sha256_hex,
                                      char *errbuf, size_t errlen);

/* s3_put_fd for a file whose SHA-256 the caller computed as it wrote it
 * (sha256: 32 bytes, borrowed; NULL: as s3_put_fd): a single PUT then
 * reads the file once, to send it. The caller vouches that the file has not
 * changed since (a private staging file); a wrong digest is refused by the
 * store (BadDigest), never stored. */
CTRAIN_NODISCARD ctrain_err s3_put_fd_hashed(s3_client *c, const char *name, int fd,
                                             const unsigned char *sha256, char *sha256_hex,
                                             char *errbuf, size_t errlen);

/* A body produced on demand rather than read from a file (a backup image
 * straight from memory, ckpt.h's ckpt_image): `size` bytes; `pread` copies
 * [off, off+len) into buf (*got < len only at the end) and may be called
 * again from offset 0 (a retry); `sha256` gives the SHA-256 of all `size`
 * bytes, and may wait for it (computed beside the send). */
typedef struct s3_source {
  int64_t size;
  ctrain_err (*pread)(void *arg, int64_t off, void *buf, size_t len, size_t *got);
  ctrain_err (*sha256)(void *arg, unsigned char out[32]);
  void *arg; /* borrowed */
} s3_source;

/* Uploads src (borrowed) to `name` in one PUT (src->size at most the
 * multipart threshold; CTRAIN_E_INVAL otherwise), reading it once per
 * attempt. With checksums (s3://) the body goes aws-chunked
 * (STREAMING-UNSIGNED-PAYLOAD-TRAILER) with x-amz-checksum-sha256 in its
 * trailer, so it is sent while its hash is computed and the store checks
 * and keeps that hash as with the header; without (gs://, checksum -1) the
 * hash is taken first and signed as x-amz-content-sha256. sha256_hex
 * (optional, 65 bytes) receives it. */
CTRAIN_NODISCARD ctrain_err s3_put_source(s3_client *c, const char *name, const s3_source *src,
                                          char *sha256_hex, char *errbuf, size_t errlen);

/* Downloads `name` into fd, written from its current offset, which must be
 * seekable: a retry truncates back to it and starts again. `size` is the
 * object's size as listed (s3_list), -1 when unknown: the answer must then
 * carry a Content-Length. Never more than that many bytes are written (an
 * endless answer is cut, "answer too large"), and fewer (an answer that ends
 * early, close-delimited or not) or a Content-Length that disagrees with
 * `size` is a failed attempt, retried: CTRAIN_E_NET (or CTRAIN_E_TOOBIG,
 * CTRAIN_E_TIMEOUT) with s3_client_last_retryable set once retries run
 * out, never CTRAIN_E_CORRUPT. info (optional) receives the size;
 * sha256_hex (optional) the SHA-256 of the bytes written.
 * CTRAIN_E_NOTFOUND when there is no such object; CTRAIN_E_CORRUPT only when
 * every attempt brought the whole object and the store's
 * x-amz-checksum-sha256 disagrees with its bytes. */
CTRAIN_NODISCARD ctrain_err s3_get_fd(s3_client *c, const char *name, int fd, int64_t size,
                                      s3_object *info, char *sha256_hex, char *errbuf,
                                      size_t errlen);

#define S3_RANGE_MAX ((size_t)64 << 20) /* the most bytes one s3_get_range reads */

/* Reads bytes [off, off + len) of `name` into buf (len at most 64 MiB):
 * *got = len, or fewer only when the object ends first (a range past its
 * end: *got = what exists; off at or past the end: *got = 0, CTRAIN_OK).
 * etag (optional, as listed, quotes included) is sent as If-Match, so an
 * object replaced while a reader walks it fails (412: CTRAIN_E_DATA,
 * "changed while being read") instead of mixing versions. Retried as
 * s3_get_fd is (a short or cut body, a reset, 5xx, throttling: the whole
 * range again, with the client's backoff); never more than len bytes are
 * kept (a server sending more is cut, a failed attempt). A Content-Range
 * that is not the one asked for is a failed attempt. CTRAIN_E_NOTFOUND when
 * absent; after the last attempt the client's retryable failure
 * (s3_client_last_retryable set; CTRAIN_E_NET / _TIMEOUT / _TOOBIG), the
 * message naming s3://bucket/key and the byte offset.
 *
 * Details: buf (borrowed) holds len bytes; what a failed attempt left in it
 * is undefined. len 0 reads nothing (no request). A 200 that ignores the
 * Range is taken only when it is exactly the range asked for (off 0, the
 * whole object within len); any other 200 is a failed attempt, ended at its
 * first body byte (never a download of the object to find the slice). An
 * answer carrying an ETag other than `etag` fails as a 412 does (a store
 * that ignores If-Match). An etag with control bytes is CTRAIN_E_INVAL. A
 * 5xx or throttling that outlasts the attempts is CTRAIN_E_HTTP, with
 * s3_client_last_retryable set as for the others. No checksum is checked
 * (a range has none; the caller checks its records). */
CTRAIN_NODISCARD ctrain_err s3_get_range(s3_client *c, const char *name, int64_t off, size_t len,
                                         const char *etag, void *buf, size_t *got, char *errbuf,
                                         size_t errlen);

/* Size, ETag and Last-Modified of `name`. CTRAIN_E_NOTFOUND when absent. */
CTRAIN_NODISCARD ctrain_err s3_head(s3_client *c, const char *name, s3_object *info, char *errbuf,
                                    size_t errlen);

/* Appends to list every object whose name starts with name_prefix ("" for
 * all under the location), in key order, following continuation tokens. */
CTRAIN_NODISCARD ctrain_err s3_list(s3_client *c, const char *name_prefix, s3_object_list *list,
                                    char *errbuf, size_t errlen);

void s3_object_list_free(s3_object_list *list);

/* Copies `name` to `to` (both under the location's prefix) inside the
 * store (CopyObject: S3 copies up to 5 GiB in one request; a larger object
 * fails with the server's error), then checks with a HEAD that the copy
 * holds `size` bytes (-1: not checked). `name` is left as it was. */
CTRAIN_NODISCARD ctrain_err s3_copy(s3_client *c, const char *name, const char *to, int64_t size,
                                    char *errbuf, size_t errlen);

/* Deletes `name` (absent is not an error, as in S3). */
CTRAIN_NODISCARD ctrain_err s3_delete(s3_client *c, const char *name, char *errbuf, size_t errlen);

/* An unfinished multipart upload (its parts cost storage, never visible). */
typedef struct s3_upload {
  char name[1025];     /* relative to the location's prefix */
  char upload_id[512]; /* as the server gave it */
  char initiated[40];  /* ISO 8601, as the server sent it */
} s3_upload;

typedef struct s3_upload_list {
  s3_upload *items; /* owned; s3_upload_list_free */
  size_t n, alloc;
} s3_upload_list;

/* Appends every unfinished multipart upload whose name starts with
 * name_prefix (ListMultipartUploads, paginated). A worker killed mid-upload
 * (or whose abort could not reach the store) leaves one: the chief lists and
 * aborts its prefix's leftovers before it writes. */
CTRAIN_NODISCARD ctrain_err s3_list_uploads(s3_client *c, const char *name_prefix,
                                            s3_upload_list *list, char *errbuf, size_t errlen);

void s3_upload_list_free(s3_upload_list *list);

/* Aborts one unfinished upload, freeing its parts (NoSuchUpload: already gone, not an error). */
CTRAIN_NODISCARD ctrain_err s3_abort_upload(s3_client *c, const char *name, const char *upload_id,
                                            char *errbuf, size_t errlen);

/* Requests sent by the last request of the last operation, retries
 * included (tests, logs). */
int s3_client_last_attempts(const s3_client *c);

/* 1 when the last operation failed on a transient error (5xx, throttling,
 * timeout, connection) after every attempt: the worker exits 75 (retryable)
 * then, whatever the ctrain_err; 0 after a success or a permanent error. */
int s3_client_last_retryable(const s3_client *c);

#endif
