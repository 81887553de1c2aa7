/* worker/checkpoint/s3.c - the S3 client over libcurl (see s3.h).
 *
 * One function, s3_do, sends one signed request with retries; the
 * operations build on it. Bodies are hashed in a first pass over the file
 * (pread, 1 MiB at a time) so the request can be signed with its SHA-256,
 * then streamed by curl's read callback in a second pass. */
#include "worker/checkpoint/s3.h"

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

#include "ctrain/buf.h"
#include "ctrain/clock.h"
#include "ctrain/log.h"
#include "worker/checkpoint/s3_sign.h"

#define S3_XML_CAP  ((size_t)16 << 20) /* a ListObjectsV2 page is < 1 MiB; errors are tiny */
#define S3_LIST_MAX 1000000            /* objects one s3_list may return */
#define S3_IO_CHUNK ((size_t)1 << 20)

struct s3_client {
  s3_location loc;
  size_t threshold, part_size;
  int max_attempts, no_checksum;
  long base_ms, max_ms, connect_s, stall_s;
  int64_t max_send;
  char *ca_file;
  char *access_key, *secret_key, *session_token; /* owned; wiped on free */
  CURL *curl;
  uint32_t rng;
  int last_attempts;
  int last_retryable; /* the last failure was transient; retries ran out */
};

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
  const char *payload_hash;             /* hex SHA-256 of the body (required when there is one) */
  const char *checksum_b64;             /* x-amz-checksum-sha256, or NULL */
  const char *extra_name, *extra_value; /* one more signed header, or NULL */
  /* response body: to out_fd from out_off when 2xx, else into the capped buffer */
  int out_fd;
  int64_t out_off;
  int head; /* HEAD: no body expected */
} s3_req;

typedef struct s3_resp {
  long http;
  ctrain_buf body;
  char etag[80];
  char checksum[64]; /* x-amz-checksum-sha256 of the response */
  char last_modified[40];
  int64_t content_length;
  long retry_after_s;
  /* streaming state */
  const s3_req *req;
  int64_t sent, written;
  EVP_MD_CTX *md;           /* SHA-256 of bytes written to out_fd */
  unsigned char digest[32]; /* its value once a GET succeeded */
  int write_failed;         /* errno of a failed write to out_fd */
  int read_failed;          /* errno of a failed read of the body (or EIO: the file shrank) */
} s3_resp;

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

/* --- curl callbacks ------------------------------------------------------ */

static size_t on_header(char *data, size_t size, size_t n, void *userp) {
  s3_resp *r = userp;
  size_t len = size * n;
  if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
    /* A new status line (after a 100 Continue, too): the last one wins. */
    const char *sp = memchr(data, ' ', len);
    r->http = sp ? strtol(sp + 1, NULL, 10) : 0;
    r->etag[0] = r->checksum[0] = r->last_modified[0] = '\0';
    r->content_length = -1;
    r->retry_after_s = 0;
    return len;
  }
  const char *colon = memchr(data, ':', len);
  if (!colon)
    return len;
  size_t nlen = (size_t)(colon - data);
  const char *v = colon + 1, *end = data + len;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
    end--;
  int vlen = (int)(end - v);
#define HDR_IS(s) (nlen == sizeof(s) - 1 && strncasecmp(data, s, nlen) == 0)
  if (HDR_IS("etag"))
    snprintf(r->etag, sizeof(r->etag), "%.*s", vlen, v);
  else if (HDR_IS("x-amz-checksum-sha256"))
    snprintf(r->checksum, sizeof(r->checksum), "%.*s", vlen, v);
  else if (HDR_IS("last-modified"))
    snprintf(r->last_modified, sizeof(r->last_modified), "%.*s", vlen, v);
  else if (HDR_IS("content-length"))
    r->content_length = strtoll(v, NULL, 10);
  else if (HDR_IS("retry-after"))
    r->retry_after_s = strtol(v, NULL, 10);
#undef HDR_IS
  return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *userp) {
  s3_resp *r = userp;
  size_t len = size * n;
  if (r->req->out_fd >= 0 && r->http >= 200 && r->http < 300) {
    for (size_t done = 0; done < len;) {
      ssize_t w = write(r->req->out_fd, data + done, len - done);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0) {
        r->write_failed = errno ? errno : EIO;
        return 0; /* CURLE_WRITE_ERROR */
      }
      done += (size_t)w;
    }
    EVP_DigestUpdate(r->md, data, len);
    r->written += (int64_t)len;
    return len;
  }
  if (ctrain_buf_append(&r->body, data, len))
    return 0;
  return len;
}

static size_t on_read(char *buf, size_t size, size_t n, void *userp) {
  s3_resp *r = userp;
  const s3_req *q = r->req;
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
  if (origin != SEEK_SET)
    return CURL_SEEKFUNC_CANTSEEK;
  r->sent = (int64_t)offset;
  return CURL_SEEKFUNC_OK;
}

/* --- one request with retries -------------------------------------------- */

/* A SHA-256 over fd [off, off+len) into hex (65) and base64 (45, optional);
 * `also` (optional) is fed the same bytes (the whole object's digest). */
static ctrain_err hash_range(int fd, int64_t off, int64_t len, char *hex, char *b64,
                             EVP_MD_CTX *also) {
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

/* "s3://bucket/key" for messages; the location's prefix for bucket-level requests. */
static void describe(const s3_client *c, const s3_req *q, char *dst, size_t cap) {
  if (q->key)
    snprintf(dst, cap, "%s://%s/%s", c->loc.scheme, c->loc.bucket, q->key);
  else
    snprintf(dst, cap, "%s://%s/%s%s", c->loc.scheme, c->loc.bucket, c->loc.prefix,
             c->loc.prefix[0] ? "/" : "");
}

/* Signs q for this moment and builds its header list into *hl (replaced;
 * the caller frees it). Host is sent as signed, so curl's own is replaced. */
static ctrain_err build_headers(s3_client *c, const s3_req *q, const char *path,
                                struct curl_slist **hl) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf authz, line;
  char amz_date[17];
  s3_header sh[8];
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
  /* curl would label a POST form data; every body of ours is bytes or XML. */
  if ((strcmp(q->method, "PUT") == 0 || strcmp(q->method, "POST") == 0) &&
      !slist_add(hl, "Content-Type: application/octet-stream"))
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
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
  if (c->max_send)
    curl_easy_setopt(h, CURLOPT_MAX_SEND_SPEED_LARGE, (curl_off_t)c->max_send);
  if (q->head) {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else if (strcmp(q->method, "PUT") == 0) {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
                     (curl_off_t)(q->mem ? (int64_t)q->mem_len : q->in_len));
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

/* What one finished attempt means: the verdict, and code/msg for messages
 * (the server's <Code>/<Message>, or the transport's or our own words). */
static s3_verdict judge(const s3_req *q, s3_resp *r, CURLcode cc, const char *curl_err, char *code,
                        size_t codelen, char *msg, size_t msglen) {
  s3_verdict v;
  code[0] = msg[0] = '\0';
  if (cc != CURLE_OK) {
    if (r->write_failed) {
      snprintf(msg, msglen, "writing the output failed: %s", strerror(r->write_failed));
      return (s3_verdict){CTRAIN_E_IO, 0};
    }
    if (r->read_failed) {
      snprintf(msg, msglen, "reading the source failed (%s): it changed during the upload?",
               r->read_failed == EIO ? "it is shorter than it was" : strerror(r->read_failed));
      return (s3_verdict){CTRAIN_E_IO, 0};
    }
    snprintf(msg, msglen, "%s", curl_err[0] ? curl_err : curl_easy_strerror(cc));
    return s3_classify_transport((int)cc);
  }
  if (r->http >= 300 && r->body.len) {
    s3_xml_text(r->body.p, r->body.len, "Code", NULL, code, codelen);
    s3_xml_text(r->body.p, r->body.len, "Message", NULL, msg, msglen);
  }
  v = s3_classify(r->http, code);
  if (v.err || q->out_fd < 0)
    return v;
  /* A GET: its bytes must match the store's own checksum of the object when
   * it has a full-object one (composite ones, of multipart uploads, end in
   * "-<parts>" and cover the parts, not the bytes as a whole). */
  EVP_DigestFinal_ex(r->md, r->digest, NULL);
  if (r->checksum[0] && !strchr(r->checksum, '-')) {
    char b64[48];
    EVP_EncodeBlock((unsigned char *)b64, r->digest, 32);
    if (strcmp(b64, r->checksum) != 0) {
      snprintf(code, codelen, "ChecksumMismatch");
      snprintf(msg, msglen, "x-amz-checksum-sha256 %s, received bytes hash to %s", r->checksum,
               b64);
      return (s3_verdict){CTRAIN_E_CORRUPT, 1};
    }
  }
  return v;
}

/* Sends q once per attempt until it succeeds, fails permanently or attempts
 * run out, sleeping a jittered backoff between attempts. r->body holds the
 * response body of the last attempt (non-2xx, or 2xx without out_fd). The
 * error message names the operation, the object, the status and the
 * server's Code/Message, and the attempts. */
static ctrain_err s3_do(s3_client *c, const s3_req *q, s3_resp *r, char *errbuf, size_t errlen) {
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
    r->http = 0;
    r->sent = r->written = 0;
    r->write_failed = r->read_failed = 0;
    r->content_length = -1;
    r->retry_after_s = 0;
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
    s3_verdict v = judge(q, r, cc, curl_err, code, sizeof(code), msg, sizeof(msg));
    if (!v.err)
      break;
    int got_http = cc == CURLE_OK && r->http;
    if (!v.retryable || attempt >= c->max_attempts) {
      result = v.err;
      c->last_retryable = v.retryable;
      if (got_http)
        CTRAIN_FAIL(result, "s3: %s %s: HTTP %ld %s%s%s (%d attempt%s)", q->op, what, r->http,
                    code[0] ? code : "(no error code)", msg[0] ? ": " : "", msg, attempt,
                    attempt == 1 ? "" : "s");
      CTRAIN_FAIL(result, "s3: %s %s: %s (%d attempt%s)", q->op, what, msg, attempt,
                  attempt == 1 ? "" : "s");
    }
    long delay =
        s3_backoff_ms(attempt, c->base_ms, c->max_ms, r->retry_after_s * 1000L, rng_next(c));
    if (got_http)
      LOG_WARN("s3: %s %s: HTTP %ld %s (attempt %d/%d), retrying in %ld ms", q->op, what, r->http,
               code[0] ? code : "(no error code)", attempt, c->max_attempts, delay);
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

static void resp_free(s3_resp *r) {
  ctrain_buf_free(&r->body);
  EVP_MD_CTX_free(r->md);
  r->md = NULL;
}

static s3_req req_init(const char *op, const char *method, const char *key) {
  return (s3_req){.op = op, .method = method, .key = key, .in_fd = -1, .out_fd = -1};
}

/* --- operations ---------------------------------------------------------- */

static ctrain_err full_key(const s3_client *c, const char *name, ctrain_buf *key, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf_init(key, 4096);
  if (!name || !*name)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "s3: an object name is required");
  if ((result = s3_location_key(&c->loc, name, key)) || key->len > 1024)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "s3: key '%.100s...' is longer than S3's 1024 bytes", name);
out:
  return result;
}

/* The payload hash a body is signed with. With x-amz-checksum-sha256 the
 * store checks the body against that (signed) header, so the body itself
 * goes UNSIGNED-PAYLOAD, as the AWS SDKs send it: the store then hashes it
 * once, not twice. Without checksums (gs://) the signature covers it. */
static const char *body_hash(const s3_client *c, const char *hex) {
  return c->no_checksum ? hex : S3_UNSIGNED_PAYLOAD;
}

static ctrain_err put_single(s3_client *c, const char *key, int fd, int64_t size,
                             const unsigned char *known, char *hex, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char b64[48];
  s3_resp r = {0};
  s3_req q = req_init("PUT", "PUT", key);
  if (known) {
    s3_hex32(known, hex);
    EVP_EncodeBlock((unsigned char *)b64, known, 32);
  } else if ((result = hash_range(fd, 0, size, hex, b64, NULL))) {
    CTRAIN_FAIL(result, "s3: PUT %s://%s/%s: reading the source file failed", c->loc.scheme,
                c->loc.bucket, key);
  }
  q.in_fd = fd;
  q.in_len = size;
  q.payload_hash = body_hash(c, hex);
  q.checksum_b64 = c->no_checksum ? NULL : b64;
  result = s3_do(c, &q, &r, errbuf, errlen);
out:
  resp_free(&r);
  return result;
}

/* AbortMultipartUpload of `key` (full key); NoSuchUpload counts as done. */
static ctrain_err abort_key(s3_client *c, const char *key, const char *upload_id, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf q_str;
  s3_resp r = {0};
  ctrain_buf_init(&q_str, 4096);
  if ((result = ctrain_buf_printf(&q_str, "uploadId=")) ||
      (result = s3_uri_encode(&q_str, upload_id, strlen(upload_id), 0)))
    CTRAIN_FAIL(result, "s3: AbortMultipartUpload: upload id too long");
  s3_req q = req_init("AbortMultipartUpload", "DELETE", key);
  q.query = q_str.p;
  result = s3_do(c, &q, &r, errbuf, errlen);
  if (result == CTRAIN_E_NOTFOUND)
    result = CTRAIN_OK;
out:
  resp_free(&r);
  ctrain_buf_free(&q_str);
  return result;
}

typedef struct part {
  char etag[80];
  char checksum[48];
} part;

/* One multipart upload in flight. */
typedef struct mp_upload {
  const char *key;       /* full key */
  char what[1400];       /* "s3://bucket/key" for messages */
  char upload_id[1024];  /* "" until created, and again once completed or aborted */
  part *parts;           /* nparts */
  int64_t nparts, psize; /* psize: every part's size but the last's */
} mp_upload;

/* "<name>=<upload id, encoded>" (name "partNumber=N&uploadId" for parts). */
static ctrain_err upload_query(const mp_upload *u, const char *name, ctrain_buf *out) {
  ctrain_err result;
  ctrain_buf_clear(out);
  if ((result = ctrain_buf_printf(out, "%s=", name)))
    return result;
  return s3_uri_encode(out, u->upload_id, strlen(u->upload_id), 0);
}

static ctrain_err mp_create(s3_client *c, mp_upload *u, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s3_resp r = {0};
  s3_req q = req_init("CreateMultipartUpload", "POST", u->key);
  q.query = "uploads=";
  if (!c->no_checksum) {
    q.extra_name = "x-amz-checksum-algorithm";
    q.extra_value = "SHA256";
  }
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  if (s3_xml_text(r.body.p, r.body.len, "UploadId", NULL, u->upload_id, sizeof(u->upload_id)) !=
          1 ||
      !u->upload_id[0]) {
    u->upload_id[0] = '\0';
    CTRAIN_FAIL(CTRAIN_E_HTTP, "s3: CreateMultipartUpload %s: no UploadId in the answer", u->what);
  }
out:
  resp_free(&r);
  return result;
}

/* Part i (0-based): hashed (into `whole` too), then streamed from fd. */
static ctrain_err mp_part(s3_client *c, mp_upload *u, int64_t i, int fd, int64_t size,
                          EVP_MD_CTX *whole, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf q_str;
  s3_resp r = {0};
  char name[64], phex[65];
  int64_t off = i * u->psize, len = size - off < u->psize ? size - off : u->psize;
  ctrain_buf_init(&q_str, 4096);
  snprintf(name, sizeof(name), "partNumber=%lld&uploadId", (long long)i + 1);
  if ((result = upload_query(u, name, &q_str)))
    CTRAIN_FAIL(result, "s3: UploadPart %s: query too long", u->what);
  if ((result = hash_range(fd, off, len, phex, u->parts[i].checksum, whole)))
    CTRAIN_FAIL(result, "s3: UploadPart %s: reading the source file failed", u->what);
  s3_req q = req_init("UploadPart", "PUT", u->key);
  q.query = q_str.p;
  q.in_fd = fd;
  q.in_off = off;
  q.in_len = len;
  q.payload_hash = body_hash(c, phex);
  q.checksum_b64 = c->no_checksum ? NULL : u->parts[i].checksum;
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  snprintf(u->parts[i].etag, sizeof(u->parts[i].etag), "%s", r.etag);
  if (!u->parts[i].etag[0])
    CTRAIN_FAIL(CTRAIN_E_HTTP, "s3: UploadPart %s: part %lld answered without an ETag", u->what,
                (long long)i + 1);
out:
  resp_free(&r);
  ctrain_buf_free(&q_str);
  return result;
}

/* The CompleteMultipartUpload body: every part's number, ETag (escaped) and checksum. */
static ctrain_err mp_complete_body(const s3_client *c, const mp_upload *u, ctrain_buf *xml) {
  ctrain_err result = ctrain_buf_printf(xml, "<CompleteMultipartUpload>");
  for (int64_t i = 0; !result && i < u->nparts; i++) {
    result = ctrain_buf_printf(xml, "<Part><PartNumber>%lld</PartNumber><ETag>", (long long)i + 1);
    for (const char *e = u->parts[i].etag; !result && *e; e++) {
      const char *ent = *e == '"' ? "&quot;" : *e == '&' ? "&amp;" : *e == '<' ? "&lt;" : NULL;
      result = ent ? ctrain_buf_printf(xml, "%s", ent) : ctrain_buf_append(xml, e, 1);
    }
    if (!result)
      result = ctrain_buf_printf(xml, "</ETag>");
    if (!result && !c->no_checksum)
      result = ctrain_buf_printf(xml, "<ChecksumSHA256>%s</ChecksumSHA256>", u->parts[i].checksum);
    if (!result)
      result = ctrain_buf_printf(xml, "</Part>");
  }
  return result ? result : ctrain_buf_printf(xml, "</CompleteMultipartUpload>");
}

static ctrain_err mp_complete(s3_client *c, mp_upload *u, int64_t size, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf q_str, xml;
  s3_resp r = {0};
  unsigned char digest[32];
  char xhex[65], code[128] = "", msg[512] = "";
  ctrain_buf_init(&q_str, 4096);
  ctrain_buf_init(&xml, (size_t)S3_MAX_PARTS * 256);
  if ((result = mp_complete_body(c, u, &xml)) || (result = upload_query(u, "uploadId", &q_str)))
    CTRAIN_FAIL(result, "s3: CompleteMultipartUpload %s: request too large", u->what);
  EVP_Digest(xml.p, xml.len, digest, NULL, EVP_sha256(), NULL);
  s3_hex32(digest, xhex);
  s3_req q = req_init("CompleteMultipartUpload", "POST", u->key);
  q.query = q_str.p;
  q.mem = xml.p;
  q.mem_len = xml.len;
  q.payload_hash = xhex;
  result = s3_do(c, &q, &r, errbuf, errlen);
  if (!result) {
    /* S3 may answer 200 and put the error in the body. */
    if (r.body.len && s3_xml_text(r.body.p, r.body.len, "Code", NULL, code, sizeof(code)) == 1) {
      s3_xml_text(r.body.p, r.body.len, "Message", NULL, msg, sizeof(msg));
      CTRAIN_FAIL(CTRAIN_E_HTTP, "s3: CompleteMultipartUpload %s: %s: %s", u->what, code, msg);
    }
  } else if (result == CTRAIN_E_NOTFOUND && c->last_attempts > 1) {
    /* An earlier attempt may have completed it and only the answer was
     * lost: the object is there with the right size, or it is not. */
    s3_object info;
    const char *name = u->key + (c->loc.prefix[0] ? strlen(c->loc.prefix) + 1 : 0);
    if (s3_head(c, name, &info, NULL, 0) == CTRAIN_OK && info.size == size)
      result = CTRAIN_OK;
  }
out:
  resp_free(&r);
  ctrain_buf_free(&q_str);
  ctrain_buf_free(&xml);
  return result;
}

/* Aborts u after a failure, so its parts are not kept (and never become an
 * object). Its own failure is logged: the first error is the one reported,
 * and the caller's attempt count and retryability are kept. */
static void mp_abort(s3_client *c, mp_upload *u) {
  char aerr[1600];
  int saved = c->last_attempts, saved_retryable = c->last_retryable, max = c->max_attempts;
  /* A store that just failed the upload for good is unlikely to answer
   * now: two tries, not a second full backoff; leftovers are swept later. */
  if (saved_retryable && c->max_attempts > 2)
    c->max_attempts = 2;
  if (abort_key(c, u->key, u->upload_id, aerr, sizeof(aerr)))
    LOG_WARN("%s (the parts stay until s3_list_uploads/s3_abort_upload or the bucket's lifecycle "
             "rule remove them)",
             aerr);
  c->max_attempts = max;
  c->last_attempts = saved;
  c->last_retryable = saved_retryable;
  u->upload_id[0] = '\0';
}

/* Create, the parts in order, complete; abort on any failure. hex receives
 * the SHA-256 of the whole file, hashed while the parts were. */
static ctrain_err put_multipart(s3_client *c, const char *key, int fd, int64_t size, char *hex,
                                char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  mp_upload u = {.key = key, .psize = (int64_t)c->part_size};
  unsigned char digest[32];
  EVP_MD_CTX *whole = EVP_MD_CTX_new();

  snprintf(u.what, sizeof(u.what), "%s://%s/%s", c->loc.scheme, c->loc.bucket, key);
  while ((size + u.psize - 1) / u.psize > S3_MAX_PARTS)
    u.psize *= 2;
  u.nparts = (size + u.psize - 1) / u.psize;
  if (!whole || !EVP_DigestInit_ex(whole, EVP_sha256(), NULL) ||
      !(u.parts = calloc((size_t)u.nparts, sizeof(*u.parts))))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "s3: out of memory");
  if ((result = mp_create(c, &u, errbuf, errlen)))
    goto out;
  for (int64_t i = 0; i < u.nparts; i++)
    if ((result = mp_part(c, &u, i, fd, size, whole, errbuf, errlen)))
      goto out;
  if ((result = mp_complete(c, &u, size, errbuf, errlen)))
    goto out;
  u.upload_id[0] = '\0'; /* completed: nothing to abort */
  EVP_DigestFinal_ex(whole, digest, NULL);
  s3_hex32(digest, hex);
out:
  if (u.upload_id[0])
    mp_abort(c, &u);
  EVP_MD_CTX_free(whole);
  free(u.parts);
  return result;
}

ctrain_err s3_put_fd(s3_client *c, const char *name, int fd, char *sha256_hex, char *errbuf,
                     size_t errlen) {
  return s3_put_fd_hashed(c, name, fd, NULL, sha256_hex, errbuf, errlen);
}

ctrain_err s3_put_fd_hashed(s3_client *c, const char *name, int fd, const unsigned char *sha256,
                            char *sha256_hex, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  struct stat st;
  char hex[65];
  if ((result = full_key(c, name, &key, errbuf, errlen)))
    goto out;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "s3: PUT %s://%s/%s: the source is not a regular file",
                c->loc.scheme, c->loc.bucket, key.p);
  if ((int64_t)st.st_size <= (int64_t)c->threshold)
    result = put_single(c, key.p, fd, (int64_t)st.st_size, sha256, hex, errbuf, errlen);
  else
    result = put_multipart(c, key.p, fd, (int64_t)st.st_size, hex, errbuf, errlen);
  if (!result && sha256_hex)
    memcpy(sha256_hex, hex, 65);
out:
  ctrain_buf_free(&key);
  return result;
}

ctrain_err s3_get_fd(s3_client *c, const char *name, int fd, s3_object *info, char *sha256_hex,
                     char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  s3_resp r = {0};
  off_t start;
  if ((result = full_key(c, name, &key, errbuf, errlen)))
    goto out;
  if ((start = lseek(fd, 0, SEEK_CUR)) < 0)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "s3: GET %s://%s/%s: the output is not seekable", c->loc.scheme,
                c->loc.bucket, key.p);
  s3_req q = req_init("GET", "GET", key.p);
  q.out_fd = fd;
  q.out_off = (int64_t)start;
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  if (r.content_length >= 0 && r.content_length != r.written)
    CTRAIN_FAIL(CTRAIN_E_NET, "s3: GET %s://%s/%s: %lld of %lld bytes", c->loc.scheme,
                c->loc.bucket, key.p, (long long)r.written, (long long)r.content_length);
  if (info) {
    memset(info, 0, sizeof(*info));
    snprintf(info->name, sizeof(info->name), "%s", name);
    info->size = r.written;
    snprintf(info->etag, sizeof(info->etag), "%s", r.etag);
    snprintf(info->last_modified, sizeof(info->last_modified), "%s", r.last_modified);
  }
  if (sha256_hex)
    s3_hex32(r.digest, sha256_hex);
out:
  resp_free(&r);
  ctrain_buf_free(&key);
  return result;
}

ctrain_err s3_head(s3_client *c, const char *name, s3_object *info, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  s3_resp r = {0};
  if ((result = full_key(c, name, &key, errbuf, errlen)))
    goto out;
  s3_req q = req_init("HEAD", "HEAD", key.p);
  q.head = 1;
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  memset(info, 0, sizeof(*info));
  snprintf(info->name, sizeof(info->name), "%s", name);
  info->size = r.content_length;
  snprintf(info->etag, sizeof(info->etag), "%s", r.etag);
  snprintf(info->last_modified, sizeof(info->last_modified), "%s", r.last_modified);
out:
  resp_free(&r);
  ctrain_buf_free(&key);
  return result;
}

void s3_object_list_free(s3_object_list *list) {
  if (!list)
    return;
  free(list->items);
  list->items = NULL;
  list->n = list->alloc = 0;
}

ctrain_err s3_list(s3_client *c, const char *name_prefix, s3_object_list *list, char *errbuf,
                   size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf prefix, q_str;
  s3_resp r = {0};
  char token[2048] = "", truncated[16];
  size_t strip = c->loc.prefix[0] ? strlen(c->loc.prefix) + 1 : 0;
  ctrain_buf_init(&prefix, 4096);
  ctrain_buf_init(&q_str, 16384);
  if ((result = s3_location_key(&c->loc, name_prefix ? name_prefix : "", &prefix)))
    CTRAIN_FAIL(result, "s3: list: prefix too long");
  for (;;) {
    ctrain_buf_clear(&q_str);
    if (token[0] && ((result = ctrain_buf_printf(&q_str, "continuation-token=")) ||
                     (result = s3_uri_encode(&q_str, token, strlen(token), 0)) ||
                     (result = ctrain_buf_printf(&q_str, "&"))))
      CTRAIN_FAIL(result, "s3: list: query too long");
    if ((result = ctrain_buf_printf(&q_str, "list-type=2&max-keys=1000&prefix=")) ||
        (result = s3_uri_encode(&q_str, prefix.p, prefix.len, 0)))
      CTRAIN_FAIL(result, "s3: list: query too long");
    s3_req q = req_init("ListObjectsV2", "GET", NULL);
    q.query = q_str.p;
    if ((result = s3_do(c, &q, &r, errbuf, errlen)))
      goto out;
    const char *inner;
    size_t ilen, pos = 0;
    while (s3_xml_element(r.body.p, r.body.len, "Contents", &pos, &inner, &ilen)) {
      char key[2048], num[32] = "0";
      if (s3_xml_text(inner, ilen, "Key", NULL, key, sizeof(key)) != 1)
        CTRAIN_FAIL(CTRAIN_E_PARSE, "s3: ListObjectsV2 %s://%s: an entry without a usable Key",
                    c->loc.scheme, c->loc.bucket);
      if (strlen(key) < strip || strlen(key) - strip >= sizeof(list->items[0].name))
        continue; /* not under our prefix (cannot happen with a correct server) */
      if ((result = ctrain_grow(&list->items, &list->alloc, list->n + 1, sizeof(*list->items), 16,
                                S3_LIST_MAX)))
        CTRAIN_FAIL(result, "s3: ListObjectsV2 %s://%s: more than %d objects", c->loc.scheme,
                    c->loc.bucket, S3_LIST_MAX);
      s3_object *o = &list->items[list->n++];
      memset(o, 0, sizeof(*o));
      snprintf(o->name, sizeof(o->name), "%s", key + strip);
      s3_xml_text(inner, ilen, "Size", NULL, num, sizeof(num));
      o->size = strtoll(num, NULL, 10);
      s3_xml_text(inner, ilen, "ETag", NULL, o->etag, sizeof(o->etag));
      s3_xml_text(inner, ilen, "LastModified", NULL, o->last_modified, sizeof(o->last_modified));
    }
    truncated[0] = '\0';
    s3_xml_text(r.body.p, r.body.len, "IsTruncated", NULL, truncated, sizeof(truncated));
    if (strcmp(truncated, "true") != 0)
      break;
    if (s3_xml_text(r.body.p, r.body.len, "NextContinuationToken", NULL, token, sizeof(token)) !=
            1 ||
        !token[0])
      CTRAIN_FAIL(CTRAIN_E_PARSE, "s3: ListObjectsV2 %s://%s: truncated without a token",
                  c->loc.scheme, c->loc.bucket);
    resp_free(&r);
  }
out:
  resp_free(&r);
  ctrain_buf_free(&prefix);
  ctrain_buf_free(&q_str);
  return result;
}

ctrain_err s3_delete(s3_client *c, const char *name, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  s3_resp r = {0};
  if ((result = full_key(c, name, &key, errbuf, errlen)))
    goto out;
  s3_req q = req_init("DELETE", "DELETE", key.p);
  result = s3_do(c, &q, &r, errbuf, errlen);
  if (result == CTRAIN_E_NOTFOUND) /* some stores answer 404 NoSuchKey: already gone */
    result = CTRAIN_OK;
out:
  resp_free(&r);
  ctrain_buf_free(&key);
  return result;
}

void s3_upload_list_free(s3_upload_list *list) {
  if (!list)
    return;
  free(list->items);
  list->items = NULL;
  list->n = list->alloc = 0;
}

ctrain_err s3_list_uploads(s3_client *c, const char *name_prefix, s3_upload_list *list,
                           char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf prefix, q_str;
  s3_resp r = {0};
  char key_marker[2048] = "", id_marker[1024] = "", truncated[16];
  size_t strip = c->loc.prefix[0] ? strlen(c->loc.prefix) + 1 : 0;
  ctrain_buf_init(&prefix, 4096);
  ctrain_buf_init(&q_str, 16384);
  if ((result = s3_location_key(&c->loc, name_prefix ? name_prefix : "", &prefix)))
    CTRAIN_FAIL(result, "s3: list uploads: prefix too long");
  for (;;) {
    /* Query names in any order: the signer sorts them. */
    ctrain_buf_clear(&q_str);
    if ((result = ctrain_buf_printf(&q_str, "uploads=&max-uploads=1000&prefix=")) ||
        (result = s3_uri_encode(&q_str, prefix.p, prefix.len, 0)))
      CTRAIN_FAIL(result, "s3: list uploads: query too long");
    if (key_marker[0] && ((result = ctrain_buf_printf(&q_str, "&key-marker=")) ||
                          (result = s3_uri_encode(&q_str, key_marker, strlen(key_marker), 0)) ||
                          (result = ctrain_buf_printf(&q_str, "&upload-id-marker=")) ||
                          (result = s3_uri_encode(&q_str, id_marker, strlen(id_marker), 0))))
      CTRAIN_FAIL(result, "s3: list uploads: query too long");
    s3_req q = req_init("ListMultipartUploads", "GET", NULL);
    q.query = q_str.p;
    if ((result = s3_do(c, &q, &r, errbuf, errlen)))
      goto out;
    const char *inner;
    size_t ilen, pos = 0;
    while (s3_xml_element(r.body.p, r.body.len, "Upload", &pos, &inner, &ilen)) {
      char key[2048];
      if (s3_xml_text(inner, ilen, "Key", NULL, key, sizeof(key)) != 1)
        CTRAIN_FAIL(CTRAIN_E_PARSE, "s3: ListMultipartUploads %s://%s: an entry without a Key",
                    c->loc.scheme, c->loc.bucket);
      if (strlen(key) < strip || strlen(key) - strip >= sizeof(list->items[0].name))
        continue;
      if ((result = ctrain_grow(&list->items, &list->alloc, list->n + 1, sizeof(*list->items), 8,
                                S3_LIST_MAX)))
        CTRAIN_FAIL(result, "s3: ListMultipartUploads %s://%s: too many uploads", c->loc.scheme,
                    c->loc.bucket);
      s3_upload *u = &list->items[list->n];
      memset(u, 0, sizeof(*u));
      snprintf(u->name, sizeof(u->name), "%s", key + strip);
      if (s3_xml_text(inner, ilen, "UploadId", NULL, u->upload_id, sizeof(u->upload_id)) != 1)
        CTRAIN_FAIL(CTRAIN_E_PARSE,
                    "s3: ListMultipartUploads %s://%s: an entry without an UploadId", c->loc.scheme,
                    c->loc.bucket);
      s3_xml_text(inner, ilen, "Initiated", NULL, u->initiated, sizeof(u->initiated));
      list->n++;
    }
    truncated[0] = '\0';
    s3_xml_text(r.body.p, r.body.len, "IsTruncated", NULL, truncated, sizeof(truncated));
    if (strcmp(truncated, "true") != 0)
      break;
    if (s3_xml_text(r.body.p, r.body.len, "NextKeyMarker", NULL, key_marker, sizeof(key_marker)) !=
            1 ||
        !key_marker[0])
      CTRAIN_FAIL(CTRAIN_E_PARSE, "s3: ListMultipartUploads %s://%s: truncated without a marker",
                  c->loc.scheme, c->loc.bucket);
    id_marker[0] = '\0';
    s3_xml_text(r.body.p, r.body.len, "NextUploadIdMarker", NULL, id_marker, sizeof(id_marker));
    resp_free(&r);
  }
out:
  resp_free(&r);
  ctrain_buf_free(&prefix);
  ctrain_buf_free(&q_str);
  return result;
}

ctrain_err s3_abort_upload(s3_client *c, const char *name, const char *upload_id, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  if ((result = full_key(c, name, &key, errbuf, errlen)))
    goto out;
  if (!upload_id || !*upload_id)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "s3: AbortMultipartUpload: an upload id is required");
  result = abort_key(c, key.p, upload_id, errbuf, errlen);
out:
  ctrain_buf_free(&key);
  return result;
}
