/* objstore/s3_internal.h - what the S3 client's files share:
 * s3_http.c (the client, the request body, signing and sending one request
 * with retries: s3_do), s3_answer.c (the answer: curl's header, body and
 * progress callbacks, their bounds, and what an attempt means), and the
 * operations built on s3_do: s3.c, s3_list.c (the listings), s3_range.c
 * (ranged GETs into memory). */
#ifndef CTRAIN_S3_INTERNAL_H
#define CTRAIN_S3_INTERNAL_H

#include <stdint.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "ctrain/buf.h"
#include "ctrain/s3.h"

#define S3_XML_CAP        ((size_t)16 << 20) /* a ListObjectsV2 page is < 1 MiB; errors are tiny */
#define S3_HEADER_CAP     ((size_t)64 << 10) /* all of one response's header lines */
#define S3_LIST_MAX       1000000            /* objects one s3_list may return */
#define S3_LIST_EMPTY_MAX 8                  /* truncated pages in a row that bring nothing new */
#define S3_IO_CHUNK       ((size_t)1 << 20)
#define S3_UPLOAD_BUFFER  ((size_t)1 << 20) /* curl's upload buffer (at most 2 MiB) */

struct s3_client {
  s3_location loc;
  size_t threshold, part_size;
  int max_attempts, no_checksum;
  long base_ms, max_ms, connect_s, stall_s;
  int64_t max_send, min_rate;
  int64_t roll_rate; /* the rolling minimum rate, bytes/s, over roll_window_s */
  long roll_window_s;
  size_t list_max_bytes;
  int list_max_pages;
  char *ca_file;
  char *access_key, *secret_key, *session_token; /* owned; wiped on free */
  CURL *curl;
  uint32_t rng;
  int last_attempts;
  int last_retryable; /* the last failure was transient; retries ran out */
};

/* The rolling minimum rate keeps this many (time, bytes) samples of an
 * attempt, one at most every window / (S3_RATE_SAMPLES / 2): the newest
 * sample at least a window old is always among them. */
#define S3_RATE_SAMPLES 64

typedef struct s3_rate_sample {
  double t;      /* monotonic s */
  int64_t bytes; /* sent + received by then */
} s3_rate_sample;

/* One request: what to send and where the response body goes. */
typedef struct s3_req {
  const char *op;     /* for messages: "PUT", "UploadPart", ... */
  const char *method; /* HTTP method */
  const char *key;    /* raw full key; NULL for the bucket */
  const char *query;  /* encoded query or NULL */
  /* body: from fd [off, off+len), or from mem, or none */
  int in_fd;
  int64_t in_off, in_len;
  const char *mem;
  size_t mem_len;
  const s3_source *src;     /* or from src (in_len its size) */
  int trailer;              /* src goes aws-chunked, x-amz-checksum-sha256 in its trailer */
  const char *payload_hash; /* hex SHA-256 of the body (required when there is one) */
  const char *checksum_b64; /* x-amz-checksum-sha256, or NULL */
  const char *extra_name, *extra_value; /* one more signed header, or NULL */
  int64_t work_bytes; /* bytes the server handles beyond the body (CompleteMultipartUpload
                         assembles the object, CopyObject copies it): in the deadline */
  /* response body: to out_fd from out_off when 2xx, else into the capped buffer */
  int out_fd;
  int64_t out_off;
  int64_t out_size; /* bytes the object must have (its listed size); -1: its Content-Length */
  int head;         /* HEAD: no body expected */
  /* or a ranged GET: the 2xx body into out_mem[0, out_cap) (out_cap > 0),
   * sent as Range: bytes=range_off-(range_off + out_cap - 1) */
  char *out_mem;
  size_t out_cap;
  int64_t range_off;
  const char *if_match; /* sent as If-Match (unsigned, as Range), or NULL */
} s3_req;

typedef struct s3_resp {
  s3_headers hd; /* status, ETag, x-amz-checksum-sha256, Content-Length, Retry-After, ... */
  ctrain_buf body;
  /* streaming state */
  const s3_req *req;
  size_t hdr_bytes;    /* header bytes of this attempt (S3_HEADER_CAP) */
  int too_large;       /* 1: the body passed its cap, 2: the headers did */
  int no_length;       /* a GET of unknown size answered without a Content-Length */
  int64_t up_bytes;    /* bytes this attempt sends (for its deadline) */
  double t0, base_s;   /* start of the attempt (monotonic s), the deadline's grace */
  double rate;         /* its minimum average rate, bytes/s */
  double deadline_hit; /* the deadline (s) it passed, or 0 */
  /* the rolling minimum rate: bytes moved over the last roll_s seconds must
   * average roll_rate (0: not checked); the ring of samples; what was
   * measured when it ended the attempt */
  double roll_s, roll_rate;
  s3_rate_sample ring[S3_RATE_SAMPLES];
  int ring_n, ring_next;
  int too_slow;
  double slow_rate, slow_span;
  int64_t moved; /* bytes sent + received so far, as curl counts them */
  int64_t sent, written;
  /* a ranged GET: the answer's Content-Range "bytes first-last/total" (-1:
   * absent or "*"), and bad_range: its 2xx is not the range asked for */
  int64_t cr_first, cr_last, cr_total;
  int bad_range;
  EVP_MD_CTX *md;           /* SHA-256 of bytes written to out_fd */
  unsigned char digest[32]; /* its value once a GET succeeded */
  int write_failed;         /* errno of a failed write to out_fd */
  int read_failed;          /* errno of a failed read of the body (or EIO: the file shrank) */
  /* aws-chunked framing of a trailer upload: frame[frame_off, frame_len)
   * (a chunk header, CRLF or the trailer) goes before more data; chunk_left
   * bytes of the current chunk remain; framed once the trailer is queued */
  char frame[160];
  size_t frame_off, frame_len;
  int64_t chunk_left;
  int framed;
} s3_resp;

/* Sends one request with retries (backoff with jitter, Retry-After capped
 * at backoff_max_ms); each attempt ends when it moves less than the rolling
 * minimum rate over a window ("too slow", retryable), and within its
 * deadline (stall timeout + bytes / min rate), and its answer within its caps (the object's size,
 * S3_XML_CAP, S3_HEADER_CAP: "answer too large", retryable); the
 * response in r (free with s3_resp_free). Errors name the operation, bucket
 * and key; a permanent refusal is CTRAIN_E_CONFIG. */
CTRAIN_NODISCARD ctrain_err s3_do(s3_client *c, const s3_req *q, s3_resp *r, char *errbuf,
                                  size_t errlen);

/* The answer's side of an attempt (s3_answer.c): curl's callbacks (userp
 * an s3_resp whose req is set), the rolling rate's sampler (called at the
 * attempt's start with 0 bytes) and the verdict on a finished attempt, with
 * code/msg for messages. */
size_t s3_on_header(char *data, size_t size, size_t n, void *userp);
size_t s3_on_body(char *data, size_t size, size_t n, void *userp);
int s3_on_progress(void *userp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                   curl_off_t ulnow);
int s3_rate_too_slow(s3_resp *r, double now, int64_t moved);
s3_verdict s3_judge(const s3_client *c, const s3_req *q, s3_resp *r, CURLcode cc,
                    const char *curl_err, char *code, size_t codelen, char *msg, size_t msglen);

/* The full key of `name` (required) under the location's prefix into key
 * (initialised here; the caller frees it), at most S3's 1024 bytes. */
CTRAIN_NODISCARD ctrain_err s3_full_key(const s3_client *c, const char *name, ctrain_buf *key,
                                        char *errbuf, size_t errlen);

/* Frees what a response holds (the struct itself is the caller's). */
void s3_resp_free(s3_resp *r);

/* A request with no body and no response file. */
s3_req s3_req_init(const char *op, const char *method, const char *key);

/* Bytes of src's body of `size` bytes as aws-chunked with the SHA-256
 * trailer (S3_CHUNK bytes a chunk): the request's Content-Length. */
#define S3_CHUNK ((size_t)1 << 20)
int64_t s3_chunked_length(int64_t size);

/* SHA-256 of fd's bytes [off, off+len) as hex and base64 (either may be NULL). */
CTRAIN_NODISCARD ctrain_err s3_hash_range(int fd, int64_t off, int64_t len, char *hex, char *b64,
                                          EVP_MD_CTX *also);

#endif
