/* objstore/s3_http.c - the S3 client's transport (see s3.h and
 * s3_internal.h): the client and its credentials, the request body (curl's
 * read and seek callbacks), the signed headers, and s3_do, which sends one
 * request with retries (the answer's side is s3_answer.c).
 * A file body is hashed in a first pass over the file (pread, 1 MiB at a
 * time) so the request can be signed with its SHA-256, then streamed by
 * curl's read callback in a second pass; a source body (s3_source) is read
 * once, framed aws-chunked with its SHA-256 in the trailer. */
#include "s3_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "ctrain/clock.h"
#include "ctrain/log.h"
#include "ctrain/s3_sign.h"

static uint32_t rng_next(s3_client *c) {
  uint32_t x = c->rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return c->rng = x ? x : 0x9e3779b9u;
}

static char *dup_env(const char *name) {
  const char *v = getenv(name);
  return v && *v ? strdup(v) : NULL;
}

static void free_secret(char *s) {
  if (s) {
    OPENSSL_cleanse(s, strlen(s));
    free(s);
  }
}

ctrain_err s3_client_new(const s3_options *opt, s3_client **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s3_client *c = calloc(1, sizeof(*c));
  *out = NULL;
  if (!c)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "s3: out of memory");
  const char *region = opt->region && *opt->region ? opt->region : getenv("AWS_REGION");
  if (!region || !*region)
    region = getenv("AWS_DEFAULT_REGION");
  const char *endpoint = opt->endpoint && *opt->endpoint ? opt->endpoint : NULL;
  if (!endpoint)
    endpoint = getenv("AWS_ENDPOINT_URL_S3");
  if (!endpoint || !*endpoint)
    endpoint = getenv("AWS_ENDPOINT_URL");
  if ((result = s3_location_parse(opt->uri, endpoint, region, &c->loc, errbuf, errlen)))
    goto out;
  c->access_key = dup_env("AWS_ACCESS_KEY_ID");
  c->secret_key = dup_env("AWS_SECRET_ACCESS_KEY");
  c->session_token = dup_env("AWS_SESSION_TOKEN");
  if (!c->access_key || !c->secret_key)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "s3: %s://%s: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must both be set",
                c->loc.scheme, c->loc.bucket);
  c->threshold = opt->multipart_threshold ? opt->multipart_threshold : (size_t)64 << 20;
  c->part_size = opt->part_size ? opt->part_size : (size_t)16 << 20;
  if (c->part_size < S3_MIN_PART_SIZE)
    c->part_size = S3_MIN_PART_SIZE;
  if (c->threshold < c->part_size)
    c->threshold = c->part_size;
  c->max_attempts = opt->max_attempts > 0 ? opt->max_attempts : 6;
  c->base_ms = opt->backoff_base_ms > 0 ? opt->backoff_base_ms : 200;
  c->max_ms = opt->backoff_max_ms > 0 ? opt->backoff_max_ms : 20000;
  c->connect_s = opt->connect_timeout_s > 0 ? opt->connect_timeout_s : 10;
  c->stall_s = opt->stall_timeout_s > 0 ? opt->stall_timeout_s : 60;
  c->max_send = opt->max_send_bytes_per_s > 0 ? opt->max_send_bytes_per_s : 0;
  c->min_rate = opt->min_rate_bytes_per_s > 0 ? opt->min_rate_bytes_per_s : (int64_t)256 << 10;
  c->roll_rate =
      opt->rolling_min_bytes_per_s > 0 ? opt->rolling_min_bytes_per_s : (int64_t)64 << 10;
  c->roll_window_s = opt->rolling_window_s > 0 ? opt->rolling_window_s : 30;
  c->list_max_bytes = opt->list_max_bytes ? opt->list_max_bytes : (size_t)64 << 20;
  c->list_max_pages = opt->list_max_pages > 0 ? opt->list_max_pages : 10000;
  c->no_checksum = opt->checksum < 0 || (opt->checksum == 0 && strcmp(c->loc.scheme, "gs") == 0);
  if (opt->ca_file && !(c->ca_file = strdup(opt->ca_file)))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "s3: out of memory");
  c->rng = (uint32_t)ctrain_mono_ns() ^ ((uint32_t)getpid() << 16) ^ 0x5bd1e995u;
  if (!(c->curl = curl_easy_init()))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "s3: curl_easy_init failed");
  *out = c;
  c = NULL;
out:
  s3_client_free(c);
  return result;
}

void s3_client_free(s3_client *c) {
  if (!c)
    return;
  if (c->curl)
    curl_easy_cleanup(c->curl);
  free(c->access_key);
  free_secret(c->secret_key);
  free_secret(c->session_token);
  free(c->ca_file);
  free(c);
}

const s3_location *s3_client_location(const s3_client *c) {
  return &c->loc;
}

int s3_client_last_attempts(const s3_client *c) {
  return c->last_attempts;
}

int s3_client_last_retryable(const s3_client *c) {
  return c->last_retryable;
}

static int hex_digits(int64_t v) {
  int d = 1;
  while (v >>= 4)
    d++;
  return d;
}

int64_t s3_chunked_length(int64_t size) {
  int64_t full = size / (int64_t)S3_CHUNK, rem = size % (int64_t)S3_CHUNK;
  int64_t n = full * (hex_digits((int64_t)S3_CHUNK) + 2 + (int64_t)S3_CHUNK + 2);
  if (rem)
    n += hex_digits(rem) + 2 + rem + 2;
  /* "0\r\n" "x-amz-checksum-sha256:" <44 base64> "\r\n" "\r\n" */
  return n + 3 + 22 + 44 + 2 + 2;
}

/* Queues frame bytes written by snprintf (n its result). */
static void frame_queued(s3_resp *r, int n) {
  r->frame_off = 0;
  r->frame_len = n > 0 && (size_t)n < sizeof(r->frame) ? (size_t)n : 0;
}

/* The next frame of an aws-chunked body: a chunk header, or at the end the
 * zero chunk and the trailer with the source's SHA-256. 0 when the source
 * cannot give its hash. */
static int next_frame(s3_resp *r) {
  const s3_req *q = r->req;
  int64_t left = q->in_len - r->sent;
  if (left > 0) {
    r->chunk_left = left < (int64_t)S3_CHUNK ? left : (int64_t)S3_CHUNK;
    frame_queued(
        r, snprintf(r->frame, sizeof(r->frame), "%llx\r\n", (unsigned long long)r->chunk_left));
    return 1;
  }
  unsigned char sum[32];
  char b64[48];
  if (q->src->sha256(q->src->arg, sum))
    return 0;
  EVP_EncodeBlock((unsigned char *)b64, sum, 32);
  frame_queued(r,
               snprintf(r->frame, sizeof(r->frame), "0\r\nx-amz-checksum-sha256:%s\r\n\r\n", b64));
  r->framed = 1;
  return 1;
}

/* A body from q->src, framed as aws-chunked when q->trailer. */
static size_t read_source(s3_resp *r, char *buf, size_t want) {
  const s3_req *q = r->req;
  size_t out = 0;
  while (out < want) {
    if (r->frame_off < r->frame_len) {
      size_t n = r->frame_len - r->frame_off;
      n = n < want - out ? n : want - out;
      memcpy(buf + out, r->frame + r->frame_off, n);
      r->frame_off += n;
      out += n;
      continue;
    }
    int64_t lim = q->trailer ? r->chunk_left : q->in_len - r->sent;
    if (lim > 0) {
      size_t n = want - out, got = 0;
      n = (int64_t)n > lim ? (size_t)lim : n;
      if (q->src->pread(q->src->arg, r->sent, buf + out, n, &got) || got == 0) {
        r->read_failed = EIO;
        return CURL_READFUNC_ABORT;
      }
      r->sent += (int64_t)got;
      out += got;
      if (q->trailer && (r->chunk_left -= (int64_t)got) == 0)
        frame_queued(r, snprintf(r->frame, sizeof(r->frame), "\r\n"));
      continue;
    }
    if (!q->trailer || r->framed)
      break;
    if (!next_frame(r)) {
      r->read_failed = EIO;
      return CURL_READFUNC_ABORT;
    }
  }
  return out;
}

/* Back to the start of the body (a new attempt, or curl's rewind). */
static void rewind_body(s3_resp *r) {
  r->sent = 0;
  r->frame_off = r->frame_len = 0;
  r->chunk_left = 0;
  r->framed = 0;
}

static size_t on_read(char *buf, size_t size, size_t n, void *userp) {
  s3_resp *r = userp;
  const s3_req *q = r->req;
  if (q->src)
    return read_source(r, buf, size * n);
  int64_t left = (q->mem ? (int64_t)q->mem_len : q->in_len) - r->sent;
  size_t want = size * n;
  if (left <= 0)
    return 0;
  if ((int64_t)want > left)
    want = (size_t)left;
  if (q->mem) {
    memcpy(buf, q->mem + r->sent, want);
    r->sent += (int64_t)want;
    return want;
  }
  ssize_t got;
  do
    got = pread(q->in_fd, buf, want, (off_t)(q->in_off + r->sent));
  while (got < 0 && errno == EINTR);
  if (got <= 0) { /* the file shrank under us or failed: never send a short body */
    r->read_failed = got < 0 ? errno : EIO;
    return CURL_READFUNC_ABORT;
  }
  r->sent += got;
  return (size_t)got;
}

static int on_seek(void *userp, curl_off_t offset, int origin) {
  s3_resp *r = userp;
  if (origin != SEEK_SET || (r->req->src && offset != 0))
    return CURL_SEEKFUNC_CANTSEEK;
  if (r->req->src) {
    rewind_body(r);
    return CURL_SEEKFUNC_OK;
  }
  r->sent = (int64_t)offset;
  return CURL_SEEKFUNC_OK;
}

/* --- one request with retries -------------------------------------------- */

/* A SHA-256 over fd [off, off+len) into hex (65) and base64 (45, optional);
 * `also` (optional) is fed the same bytes (the whole object's digest). */
ctrain_err s3_hash_range(int fd, int64_t off, int64_t len, char *hex, char *b64, EVP_MD_CTX *also) {
  ctrain_err result = CTRAIN_OK;
  unsigned char digest[32];
  char *buf = malloc(S3_IO_CHUNK);
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  if (!buf || !md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (int64_t done = 0; done < len;) {
    size_t want = len - done < (int64_t)S3_IO_CHUNK ? (size_t)(len - done) : S3_IO_CHUNK;
    ssize_t got = pread(fd, buf, want, (off_t)(off + done));
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      result = CTRAIN_E_IO;
      goto out;
    }
    EVP_DigestUpdate(md, buf, (size_t)got);
    if (also)
      EVP_DigestUpdate(also, buf, (size_t)got);
    done += got;
  }
  EVP_DigestFinal_ex(md, digest, NULL);
  s3_hex32(digest, hex);
  if (b64)
    EVP_EncodeBlock((unsigned char *)b64, digest, 32);
out:
  EVP_MD_CTX_free(md);
  free(buf);
  return result;
}

/* Appends a header line; 0 when out of memory (the list is unchanged). */
static int slist_add(struct curl_slist **l, const char *line) {
  struct curl_slist *n = curl_slist_append(*l, line);
  if (n)
    *l = n;
  return n != NULL;
}

/* "s3://bucket/key" for messages (a ranged GET: "... bytes first-last");
 * the location's prefix for bucket-level requests. */
static void describe(const s3_client *c, const s3_req *q, char *dst, size_t cap) {
  char key[1100];
  if (q->key && q->out_mem) /* escaped: a name from a listing is the server's text */
    snprintf(dst, cap, "%s://%s/%s bytes %lld-%lld", c->loc.scheme, c->loc.bucket,
             s3_escape(q->key, strlen(q->key), key, sizeof(key)), (long long)q->range_off,
             (long long)q->range_off + (long long)q->out_cap - 1);
  else if (q->key)
    snprintf(dst, cap, "%s://%s/%s", c->loc.scheme, c->loc.bucket,
             s3_escape(q->key, strlen(q->key), key, sizeof(key)));
  else
    snprintf(dst, cap, "%s://%s/%s%s", c->loc.scheme, c->loc.bucket, c->loc.prefix,
             c->loc.prefix[0] ? "/" : "");
}

/* A ranged GET's Range and If-Match, unsigned (SigV4 needs only host and
 * the x-amz-* headers signed; these reach the store as sent either way). */
static ctrain_err range_headers(const s3_req *q, ctrain_buf *line, struct curl_slist **hl) {
  ctrain_err result = CTRAIN_OK;
  if (!q->out_mem)
    return CTRAIN_OK;
  ctrain_buf_clear(line);
  if ((result = ctrain_buf_printf(line, "Range: bytes=%lld-%lld", (long long)q->range_off,
                                  (long long)q->range_off + (long long)q->out_cap - 1)))
    return result;
  if (!slist_add(hl, line->p))
    return CTRAIN_E_NOMEM;
  ctrain_buf_clear(line);
  if (q->if_match &&
      ((result = ctrain_buf_printf(line, "If-Match: %s", q->if_match)) || !slist_add(hl, line->p)))
    return result ? result : CTRAIN_E_NOMEM;
  return CTRAIN_OK;
}

/* Signs q for this moment and builds its header list into *hl (replaced;
 * the caller frees it). Host is sent as signed, so curl's own is replaced. */
static ctrain_err build_headers(s3_client *c, const s3_req *q, const char *path,
                                struct curl_slist **hl) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf authz, line;
  char amz_date[17];
  s3_header sh[10];
  char declen[24];
  size_t nh = 0;
  const char *payload = q->payload_hash ? q->payload_hash : S3_EMPTY_SHA256;

  ctrain_buf_init(&authz, 4096);
  ctrain_buf_init(&line, 16384);
  curl_slist_free_all(*hl);
  *hl = NULL;
  s3_amz_date((long long)time(NULL), amz_date);
  sh[nh++] = (s3_header){"host", c->loc.host};
  sh[nh++] = (s3_header){"x-amz-date", amz_date};
  sh[nh++] = (s3_header){"x-amz-content-sha256", payload};
  if (c->session_token)
    sh[nh++] = (s3_header){"x-amz-security-token", c->session_token};
  if (q->checksum_b64)
    sh[nh++] = (s3_header){"x-amz-checksum-sha256", q->checksum_b64};
  if (q->extra_name)
    sh[nh++] = (s3_header){q->extra_name, q->extra_value};
  if (q->trailer) {
    snprintf(declen, sizeof(declen), "%lld", (long long)q->in_len);
    sh[nh++] = (s3_header){"x-amz-trailer", "x-amz-checksum-sha256"};
    sh[nh++] = (s3_header){"x-amz-decoded-content-length", declen};
  }
  if (q->out_fd >= 0 && !c->no_checksum) /* every x-amz-* header must be signed */
    sh[nh++] = (s3_header){"x-amz-checksum-mode", "ENABLED"};
  s3_sign_input si = {.method = q->method,
                      .path = path,
                      .query = q->query,
                      .headers = sh,
                      .nheaders = nh,
                      .payload_hash = payload,
                      .amz_date = amz_date,
                      .region = c->loc.region,
                      .service = "s3",
                      .access_key_id = c->access_key,
                      .secret_key = c->secret_key};
  if ((result = s3_sign(&si, &authz, NULL, NULL)))
    goto out;
  for (size_t i = 0; i <= nh; i++) {
    ctrain_buf_clear(&line);
    result = i < nh ? ctrain_buf_printf(&line, "%s: %s", sh[i].name, sh[i].value)
                    : ctrain_buf_printf(&line, "Authorization: %s", authz.p);
    if (result)
      goto out;
    if (!slist_add(hl, line.p)) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
  }
  if ((result = range_headers(q, &line, hl)))
    goto out;
  /* curl would label a POST form data; every body of ours is bytes or XML. */
  if ((strcmp(q->method, "PUT") == 0 || strcmp(q->method, "POST") == 0) &&
      !slist_add(hl, "Content-Type: application/octet-stream"))
    result = CTRAIN_E_NOMEM;
  if (!result && q->trailer && !slist_add(hl, "Content-Encoding: aws-chunked"))
    result = CTRAIN_E_NOMEM;
out:
  if (line.p) /* it held the session token */
    OPENSSL_cleanse(line.p, line.alloc);
  ctrain_buf_free(&line);
  ctrain_buf_free(&authz);
  return result;
}

/* Sets up the reused handle for one attempt of q. */
static void setup_handle(s3_client *c, const s3_req *q, s3_resp *r, const char *url,
                         struct curl_slist *hl, char *curl_err) {
  CURL *h = c->curl;
  curl_easy_reset(h); /* keeps the connection cache */
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L); /* keys are signed as they are */
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "ctrain-worker-s3");
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, c->connect_s);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, c->stall_s);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
  if (c->ca_file)
    curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, s3_on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, s3_on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, s3_on_progress);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, r);
  if (c->max_send)
    curl_easy_setopt(h, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)c->max_send);
  if (q->head) {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (strcmp(q->method, "PUT") == 0) {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    int64_t len = q->mem ? (int64_t)q->mem_len : q->in_len;
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                     (curl_off_t)(q->trailer ? s3_chunked_length(len) : len));
    /* Larger than curl's 64 KiB: a 100 MB body in fewer reads and sends;
     * under a send-rate cap curl's own, which paces more finely. */
    if (!c->max_send)
      curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, (long)S3_UPLOAD_BUFFER);
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, r);
    curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
    curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
  } else if (strcmp(q->method, "POST") == 0) {
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)q->mem_len);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, q->mem ? q->mem : "");
  } else if (strcmp(q->method, "GET") != 0) {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, q->method);
  }
}

/* Sends q once per attempt until it succeeds, fails permanently or attempts
 * run out, sleeping a jittered backoff between attempts. r->body holds the
 * response body of the last attempt (non-2xx, or 2xx without out_fd). The
 * error message names the operation, the object, the status and the
 * server's Code/Message, and the attempts. */
ctrain_err s3_do(s3_client *c, const s3_req *q, s3_resp *r, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf url, path;
  struct curl_slist *hl = NULL;
  char what[1400], code[128], msg[512], curl_err[CURL_ERROR_SIZE];
  int attempt = 0;

  c->last_retryable = 0;
  ctrain_buf_init(&url, 16384);
  ctrain_buf_init(&path, 16384);
  ctrain_buf_init(&r->body, S3_XML_CAP);
  r->req = q;
  describe(c, q, what, sizeof(what));
  if (!(r->md = EVP_MD_CTX_new()))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "s3: out of memory");
  const char *scheme_end = strstr(c->loc.endpoint, "://");
  if ((result = s3_location_path(&c->loc, q->key, &path)) ||
      (result = ctrain_buf_printf(&url, "%.*s%s%s%s%s", (int)(scheme_end + 3 - c->loc.endpoint),
                                  c->loc.endpoint, c->loc.host, path.p, q->query ? "?" : "",
                                  q->query ? q->query : "")))
    CTRAIN_FAIL(result, "s3: %s %s: request too long", q->op, what);

  for (;;) {
    attempt++;
    curl_err[0] = '\0';
    ctrain_buf_clear(&r->body);
    memset(&r->hd, 0, sizeof(r->hd));
    r->hd.content_length = -1;
    rewind_body(r);
    r->written = 0;
    r->cr_first = r->cr_last = r->cr_total = -1;
    r->bad_range = 0;
    r->write_failed = r->read_failed = 0;
    r->hdr_bytes = 0;
    r->too_large = r->no_length = 0;
    r->deadline_hit = 0;
    r->up_bytes = q->src   ? (q->trailer ? s3_chunked_length(q->in_len) : q->in_len)
                  : q->mem ? (int64_t)q->mem_len
                           : q->in_len;
    r->up_bytes += q->work_bytes;
    r->base_s = (double)c->stall_s;
    r->rate = (double)c->min_rate;
    if (r->up_bytes && c->max_send && c->max_send / 2 < c->min_rate)
      r->rate = (double)(c->max_send / 2 > 0 ? c->max_send / 2 : 1);
    /* The rolling minimum rate, not for a request the server may work on
     * in silence (its deadline counts that work), and for an upload under
     * a send cap at most half the cap. */
    r->roll_s = (double)c->roll_window_s;
    r->roll_rate = q->work_bytes ? 0 : (double)c->roll_rate;
    if (r->roll_rate && r->up_bytes && c->max_send && c->max_send / 2 < c->roll_rate)
      r->roll_rate = (double)(c->max_send / 2 > 0 ? c->max_send / 2 : 1);
    r->too_slow = 0;
    r->slow_rate = r->slow_span = 0;
    r->ring_n = r->ring_next = 0;
    r->moved = 0;
    r->t0 = ctrain_mono_s();
    s3_rate_too_slow(r, r->t0, 0); /* the first sample: the attempt's start */
    EVP_DigestInit_ex(r->md, EVP_sha256(), NULL);
    if (q->out_fd >= 0 && (ftruncate(q->out_fd, (off_t)q->out_off) ||
                           lseek(q->out_fd, (off_t)q->out_off, SEEK_SET) < 0))
      CTRAIN_FAIL(CTRAIN_E_IO, "s3: %s %s: the output file cannot be rewound: %s", q->op, what,
                  strerror(errno));
    if ((result = build_headers(c, q, path.p, &hl)))
      CTRAIN_FAIL(result, "s3: %s %s: building the signed request failed: %s", q->op, what,
                  ctrain_strerror(result));
    setup_handle(c, q, r, url.p, hl, curl_err);
    CURLcode cc = curl_easy_perform(c->curl);
    curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(c->curl, CURLOPT_ERRORBUFFER, NULL);
    s3_verdict v = s3_judge(c, q, r, cc, curl_err, code, sizeof(code), msg, sizeof(msg));
    if (!v.err)
      break;
    /* An answer with a status that is not an HTTP error (a GET cut short)
     * is described by msg alone. */
    int got_http = cc == CURLE_OK && r->hd.http && (r->hd.http >= 300 || code[0]);
    if (!v.retryable || attempt >= c->max_attempts) {
      result = v.err;
      c->last_retryable = v.retryable;
      if (got_http)
        CTRAIN_FAIL(result, "s3: %s %s: HTTP %ld %s%s%s (%d attempt%s)", q->op, what, r->hd.http,
                    code[0] ? code : "(no error code)", msg[0] ? ": " : "", msg, attempt,
                    attempt == 1 ? "" : "s");
      CTRAIN_FAIL(result, "s3: %s %s: %s (%d attempt%s)", q->op, what, msg, attempt,
                  attempt == 1 ? "" : "s");
    }
    /* Retry-After is honoured up to the longest backoff: a server cannot park us. */
    long after_ms =
        r->hd.retry_after_s * 1000L < c->max_ms ? r->hd.retry_after_s * 1000L : c->max_ms;
    long delay = s3_backoff_ms(attempt, c->base_ms, c->max_ms, after_ms, rng_next(c));
    if (got_http)
      LOG_WARN("s3: %s %s: HTTP %ld %s (attempt %d/%d), retrying in %ld ms", q->op, what,
               r->hd.http, code[0] ? code : "(no error code)", attempt, c->max_attempts, delay);
    else
      LOG_WARN("s3: %s %s: %s (attempt %d/%d), retrying in %ld ms", q->op, what, msg, attempt,
               c->max_attempts, delay);
    struct timespec ts = {delay / 1000, (delay % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR)
      ;
  }
out:
  c->last_attempts = attempt;
  curl_slist_free_all(hl);
  ctrain_buf_free(&url);
  ctrain_buf_free(&path);
  return result;
}

void s3_resp_free(s3_resp *r) {
  ctrain_buf_free(&r->body);
  EVP_MD_CTX_free(r->md);
  r->md = NULL;
}

s3_req s3_req_init(const char *op, const char *method, const char *key) {
  return (s3_req){
      .op = op, .method = method, .key = key, .in_fd = -1, .out_fd = -1, .out_size = -1};
}
