/* ctrain/s3_proto.h - the S3 wire protocol without the wire:
 * checkpoint URIs (s3://, gs://) and endpoints, request URLs, the few XML
 * elements S3 answers with, and what an error response means.
 *
 * Pure functions, no I/O, so unit tests cover every case; the transport in
 * s3.c uses them. */
#ifndef CTRAIN_S3_PROTO_H
#define CTRAIN_S3_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/buf.h"
#include "ctrain/err.h"

#define S3_GCS_ENDPOINT "https://storage.googleapis.com"

/* Where backups live: the bucket, the key prefix inside it, and how to reach it. */
typedef struct s3_location {
  char scheme[3];     /* "s3" or "gs" */
  char bucket[256];   /* validated by ctrain_backup_uri_parse (ctrain/backup_uri.h) */
  char prefix[1024];  /* key prefix without leading or trailing '/'; "" for the bucket root */
  char endpoint[512]; /* "https://host[:port]" or "http://..." without a trailing '/' */
  char host[512];     /* the Host header: the endpoint's authority (virtual-hosted: bucket.) */
  char region[64];    /* signing region */
  int path_style;     /* 1: https://host/bucket/key; 0: https://bucket.host/key */
} s3_location;

/* Parses `uri` ("s3://bucket[/prefix]" or "gs://bucket[/prefix]", the
 * grammar of ctrain/backup_uri.h, which the CRD and the controller check
 * too: what they admit, this admits, and nothing more). endpoint
 * (NULL or "": the scheme's default) overrides the server, as
 * "http(s)://host[:port]", and is then addressed path-style, as
 * S3-compatible stores expect. region NULL or "": "us-east-1" for s3://,
 * "auto" for gs:// (GCS's XML API with HMAC keys). The default s3://
 * endpoint is https://s3.<region>.amazonaws.com, virtual-hosted unless the
 * bucket name holds a '.' (TLS wildcard). CTRAIN_E_CONFIG naming what is
 * wrong (scheme, bucket name, prefix, endpoint) in errbuf. */
CTRAIN_NODISCARD ctrain_err s3_location_parse(const char *uri, const char *endpoint,
                                              const char *region, s3_location *loc, char *errbuf,
                                              size_t errlen);

/* The full key of `name` under the location's prefix ("prefix/name", or
 * "name" at the bucket root), appended to out (raw, not encoded). */
CTRAIN_NODISCARD ctrain_err s3_location_key(const s3_location *loc, const char *name,
                                            ctrain_buf *out);

/* Appends the encoded request path for `key` (raw; NULL or "" for the bucket
 * itself) to out: "/bucket/key" path-style, "/key" virtual-hosted. */
CTRAIN_NODISCARD ctrain_err s3_location_path(const s3_location *loc, const char *key,
                                             ctrain_buf *out);

/* Finds the first <tag>...</tag> in xml[0..len) at or after *pos, and copies
 * its text, XML entities decoded, into out (outlen bytes, NUL-terminated).
 * Returns 1 and moves *pos past the element when found, 0 when there is none,
 * -1 when the text does not fit or is malformed. pos may be NULL (search
 * from the start). Enough for S3's flat responses; not a general parser. */
int s3_xml_text(const char *xml, size_t len, const char *tag, size_t *pos, char *out,
                size_t outlen);

/* The span of the next <tag>...</tag> element (its inner text, undecoded) at
 * or after *pos: 1 found (*inner, *inner_len set, *pos past it), 0 none. */
int s3_xml_element(const char *xml, size_t len, const char *tag, size_t *pos, const char **inner,
                   size_t *inner_len);

/* Foreign text (an error <Message>, a key, a header value) made safe to
 * log: printable ASCII is kept, every other byte (control bytes such as
 * ESC or a newline decoded from "&#10;", backslash, bytes >= 0x7f) becomes
 * \xNN, so a server cannot forge log lines or terminal escapes. Writes at
 * most outlen bytes with the NUL; a text that does not fit is cut at a whole
 * escape and ends in "...". Returns out. */
char *s3_escape(const char *in, size_t n, char *out, size_t outlen);

/* What one response header line sets (the status line resets it all). */
typedef struct s3_headers {
  long http;         /* status of the last status line (after a 100 Continue) */
  char etag[80];     /* values as sent (cut to fit) */
  char checksum[64]; /* x-amz-checksum-sha256 */
  char last_modified[40];
  int64_t content_length; /* -1: absent or not a number */
  long retry_after_s;     /* Retry-After in seconds, clamped to [0, S3_RETRY_AFTER_MAX_S]; an
                             HTTP-date or garbage counts as 0 */
} s3_headers;

#define S3_RETRY_AFTER_MAX_S 3600L

/* Applies one header line (as curl hands it: "Name: value\r\n", or a status
 * line "HTTP/1.1 200 OK") to h. Never overflows on hostile numbers. */
void s3_header_line(const char *line, size_t len, s3_headers *h);

/* What an S3 answer means for the caller. */
typedef struct s3_verdict {
  ctrain_err err; /* CTRAIN_OK for 2xx */
  int retryable;  /* 1: worth another attempt after a backoff */
} s3_verdict;

/* Classifies a response by its HTTP status and the <Code> of its error body
 * ("" when there is none, as for HEAD).
 *   2xx                                            OK
 *   5xx, 429, SlowDown, Throttling*, RequestTimeout,
 *   InternalError, ServiceUnavailable               CTRAIN_E_HTTP, retryable
 *   401/403 (AccessDenied, InvalidAccessKeyId,
 *   SignatureDoesNotMatch, ExpiredToken,
 *   RequestTimeTooSkewed, ...),
 *   NoSuchBucket, InvalidBucketName, PermanentRedirect and other 301s,
 *   AuthorizationHeaderMalformed (wrong region)    CTRAIN_E_CONFIG: permanent, the worker
 *                                                  exits 78 (docs/design.md exit codes)
 *   other 404s with a Code (XAdminUserNotFound)    CTRAIN_E_CONFIG too
 *   404 NoSuchKey, NoSuchUpload, or without a body CTRAIN_E_NOTFOUND
 *   BadDigest, XAmzContentSHA256Mismatch,
 *   InvalidDigest                                  CTRAIN_E_CORRUPT, retryable (the bytes
 *                                                  are re-read from the file)
 *   409, 412                                       CTRAIN_E_CONFLICT
 *   anything else                                  CTRAIN_E_HTTP, not retryable */
s3_verdict s3_classify(long http_code, const char *code);

/* The same for a transport failure (a CURLcode as int, so this header needs
 * no curl): timeouts CTRAIN_E_TIMEOUT and connection errors CTRAIN_E_NET are
 * retryable; certificate failures CTRAIN_E_TLS and a malformed URL
 * CTRAIN_E_CONFIG are not; a local read/write failure is CTRAIN_E_IO. */
s3_verdict s3_classify_transport(int curl_code);

/* Backoff before retry number `attempt` (1 = the first retry): uniform in
 * [c/2, c] for c = min(max_ms, base_ms * 2^(attempt-1)) ("equal jitter"),
 * and at least retry_after_ms (a server's Retry-After). `rnd` is any 32-bit
 * random value. */
long s3_backoff_ms(int attempt, long base_ms, long max_ms, long retry_after_ms, unsigned rnd);

#endif
