/* objstore/s3_answer.c - the S3 client's side of an answer (see
 * s3_internal.h): curl's header, body and progress callbacks with the
 * bounds a hostile server meets (the header and body caps, the rolling
 * minimum rate, the deadline), the ranged GET's checks, and judge, what one
 * finished attempt means. s3_http.c sends the requests. */
#include "s3_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <curl/curl.h>
#include <openssl/evp.h>

#include "ctrain/clock.h"
#include "ctrain/s3_sign.h"
/* --- headers ------------------------------------------------------------ */

/* A decimal of at most 18 digits at *p (moved past it), or -1. */
static int64_t parse_num(const char **p) {
  int64_t v = 0;
  int d = 0;
  for (; **p >= '0' && **p <= '9' && d < 18; (*p)++, d++)
    v = v * 10 + (**p - '0');
  return d && !(**p >= '0' && **p <= '9') ? v : -1;
}

/* A Content-Range value, NUL-terminated, into r: "bytes first-last/total",
 * the total may be a star (unknown), and on a 416 the range a star (the
 * first and last -1); all -1 when malformed. */
static void content_range(s3_resp *r, const char *v) {
  r->cr_first = r->cr_last = r->cr_total = -1;
  while (*v == ' ' || *v == '\t')
    v++;
  if (strncasecmp(v, "bytes ", 6) != 0)
    return;
  v += 6;
  int64_t first = -1, last = -1, total = -1;
  if (*v == '*') {
    v++;
  } else {
    first = parse_num(&v);
    if (first < 0 || *v++ != '-' || (last = parse_num(&v)) < first)
      return;
  }
  if (*v++ != '/')
    return;
  if (*v == '*')
    v++;
  else if ((total = parse_num(&v)) < 0 || (last >= 0 && last >= total))
    return;
  while (*v == ' ' || *v == '\t' || *v == '\r' || *v == '\n')
    v++;
  if (*v || (first < 0 && total < 0))
    return;
  r->cr_first = first;
  r->cr_last = last;
  r->cr_total = total;
}

size_t s3_on_header(char *data, size_t size, size_t n, void *userp) {
  s3_resp *r = userp;
  size_t len = size * n;
  if ((r->hdr_bytes += len) > S3_HEADER_CAP) {
    r->too_large = 2;
    return 0; /* CURLE_WRITE_ERROR */
  }
  s3_header_line(data, len, &r->hd);
  if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) { /* a new answer (after a 100 Continue) */
    r->cr_first = r->cr_last = r->cr_total = -1;
  } else if (len > 14 && len < 200 && strncasecmp(data, "content-range:", 14) == 0) {
    char v[200];
    memcpy(v, data + 14, len - 14);
    v[len - 14] = '\0';
    content_range(r, v);
  }
  return len;
}

/* --- the body ----------------------------------------------------------- */

/* The body a ranged GET's 2xx must bring, in bytes, or -1 when it is not the
 * range asked for: a 206 whose Content-Range starts at range_off and ends
 * where the range does, or earlier exactly where the object does (its
 * Content-Length, when sent, agreeing); or a 200 (the Range ignored) only
 * when it is that range: from offset 0, a Content-Length within out_cap. */
static int64_t range_expect(const s3_resp *r) {
  const s3_req *q = r->req;
  int64_t end = q->range_off + (int64_t)q->out_cap; /* one past the last byte asked */
  if (r->hd.http == 200)
    return q->range_off == 0 && r->hd.content_length >= 0 &&
                   r->hd.content_length <= (int64_t)q->out_cap
               ? r->hd.content_length
               : -1;
  if (r->hd.http != 206 || r->cr_first != q->range_off || r->cr_last < r->cr_first)
    return -1;
  int64_t want_end = r->cr_total >= 0 && r->cr_total < end ? r->cr_total : end;
  int64_t n = r->cr_last - r->cr_first + 1;
  if (r->cr_last + 1 != want_end || (r->hd.content_length >= 0 && r->hd.content_length != n))
    return -1;
  return n;
}

/* The most bytes a GET's body may hold: its listed size, else its
 * Content-Length (a ranged GET: the range it answers with); -1 when neither
 * is known. */
static int64_t body_limit(const s3_resp *r) {
  if (r->req->out_mem)
    return range_expect(r);
  return r->req->out_size >= 0 ? r->req->out_size : r->hd.content_length;
}

/* A 2xx body of a ranged GET, into out_mem within the range's bytes. */
static size_t body_to_mem(s3_resp *r, const char *data, size_t len) {
  int64_t limit = range_expect(r);
  if (limit < 0) {
    r->bad_range = 1; /* at the first byte: never a download of what was not asked */
    return 0;
  }
  if ((int64_t)len > limit - r->written) {
    r->too_large = 1;
    return 0;
  }
  memcpy(r->req->out_mem + r->written, data, len);
  r->written += (int64_t)len;
  return len;
}

size_t s3_on_body(char *data, size_t size, size_t n, void *userp) {
  s3_resp *r = userp;
  size_t len = size * n;
  if (r->req->out_mem && r->hd.http >= 200 && r->hd.http < 300)
    return body_to_mem(r, data, len);
  if (r->req->out_fd >= 0 && r->hd.http >= 200 && r->hd.http < 300) {
    /* Never more than the object holds: an endless answer must not fill the disk. */
    int64_t limit = body_limit(r);
    if (limit < 0) {
      r->no_length = 1;
      return 0;
    }
    if ((int64_t)len > limit - r->written) {
      r->too_large = 1;
      return 0;
    }
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
  if (ctrain_buf_append(&r->body, data, len)) {
    r->too_large = 1; /* over S3_XML_CAP (or out of memory, which fails the same way) */
    return 0;
  }
  return len;
}

/* Records `moved` (bytes sent + received) at `now` in the ring, at most
 * one sample every roll_s / (S3_RATE_SAMPLES / 2) s, and reports whether
 * the attempt fell under the rolling minimum rate: the newest sample at
 * least a window old is the start of the span measured (a window, or a
 * little more), so nothing is judged before the first window has passed.
 * Whatever the server declares: only bytes that moved count. */
int s3_rate_too_slow(s3_resp *r, double now, int64_t moved) {
  const s3_rate_sample *last =
      r->ring_n ? &r->ring[(r->ring_next + S3_RATE_SAMPLES - 1) % S3_RATE_SAMPLES] : NULL;
  if (!last || now - last->t >= r->roll_s / (S3_RATE_SAMPLES / 2)) {
    r->ring[r->ring_next] = (s3_rate_sample){now, moved};
    r->ring_next = (r->ring_next + 1) % S3_RATE_SAMPLES;
    if (r->ring_n < S3_RATE_SAMPLES)
      r->ring_n++;
  }
  for (int i = 1; i <= r->ring_n; i++) {
    const s3_rate_sample *s = &r->ring[(r->ring_next + S3_RATE_SAMPLES - i) % S3_RATE_SAMPLES];
    double span = now - s->t;
    if (span < r->roll_s)
      continue;
    double rate = (double)(moved - s->bytes) / span;
    if (rate >= r->roll_rate)
      return 0;
    r->slow_rate = rate;
    r->slow_span = span;
    return 1;
  }
  return 0;
}

/* Ends an attempt that moves too slowly: under the rolling minimum rate
 * over its last window (what ends a drip, whatever size the server
 * declares), or past its deadline, an outer bound: base_s plus the bytes it
 * moves at the minimum rate. A download's size there is the object's
 * (listed) size, else what the answer declares (capped as the body is),
 * else what came so far. */
int s3_on_progress(void *userp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                   curl_off_t ulnow) {
  s3_resp *r = userp;
  (void)ultotal;
  double now = ctrain_mono_s();
  r->moved = (int64_t)dlnow + (int64_t)ulnow;
  if (r->roll_rate > 0 && s3_rate_too_slow(r, now, r->moved)) {
    r->too_slow = 1;
    return 1; /* CURLE_ABORTED_BY_CALLBACK */
  }
  int64_t dl = dltotal > dlnow ? (int64_t)dltotal : (int64_t)dlnow;
  if (r->req->out_mem)
    dl = (int64_t)r->req->out_cap;
  else if (r->req->out_fd >= 0 && r->req->out_size >= 0)
    dl = r->req->out_size;
  else if (r->req->out_fd < 0 && dl > (int64_t)S3_XML_CAP)
    dl = (int64_t)S3_XML_CAP;
  double allowed = r->base_s + (double)(r->up_bytes + dl) / r->rate;
  if (now - r->t0 > allowed) {
    r->deadline_hit = allowed;
    return 1; /* CURLE_ABORTED_BY_CALLBACK */
  }
  return 0;
}

/* --- the verdict -------------------------------------------------------- */

/* Why a ranged GET's 2xx is not the range asked for, into msg. */
static void range_mismatch(const s3_req *q, const s3_resp *r, char *msg, size_t msglen) {
  long long a = (long long)q->range_off, b = a + (long long)q->out_cap - 1;
  if (r->hd.http == 200) {
    snprintf(msg, msglen,
             "HTTP 200 with %lld bytes (Content-Length) from offset 0: the Range bytes=%lld-%lld "
             "was ignored",
             (long long)r->hd.content_length, a, b);
    return;
  }
  if (r->hd.http != 206) {
    snprintf(msg, msglen, "HTTP %ld to the Range bytes=%lld-%lld, not 206", r->hd.http, a, b);
    return;
  }
  char f[24] = "*", l[24] = "*", t[24] = "*";
  if (r->cr_first >= 0)
    snprintf(f, sizeof(f), "%lld", (long long)r->cr_first);
  if (r->cr_last >= 0)
    snprintf(l, sizeof(l), "%lld", (long long)r->cr_last);
  if (r->cr_total >= 0)
    snprintf(t, sizeof(t), "%lld", (long long)r->cr_total);
  snprintf(msg, msglen,
           "Content-Range bytes %s-%s/%s (Content-Length %lld), not the range asked: "
           "bytes=%lld-%lld, or its part up to the object's end",
           f, l, t, (long long)r->hd.content_length, a, b);
}

/* A transport failure (cc not CURLE_OK), ours included: a cap, a rate or
 * deadline, a write, a read, a ranged GET's wrong range. */
static s3_verdict judge_transport(const s3_client *c, const s3_req *q, s3_resp *r, CURLcode cc,
                                  const char *curl_err, char *msg, size_t msglen) {
  char raw[1024];
  if (r->too_slow) {
    snprintf(msg, msglen,
             "too slow: %lld B/s %s %.200s over the last %.1f s, under the minimum of %lld B/s "
             "(%lld bytes in %.1f s)",
             (long long)r->slow_rate, r->up_bytes ? "to" : "from", c->loc.host, r->slow_span,
             (long long)r->roll_rate, (long long)r->moved, ctrain_mono_s() - r->t0);
    return (s3_verdict){CTRAIN_E_TIMEOUT, 1};
  }
  if (r->deadline_hit) {
    snprintf(msg, msglen,
             "no complete answer within its deadline of %.0f s (%.0f s + the bytes at %lld B/s)",
             r->deadline_hit, r->base_s, (long long)r->rate);
    return (s3_verdict){CTRAIN_E_TIMEOUT, 1};
  }
  if (r->bad_range) {
    range_mismatch(q, r, msg, msglen);
    return (s3_verdict){CTRAIN_E_NET, 1};
  }
  if (r->too_large || cc == CURLE_OUT_OF_MEMORY || (int)cc == 100 /* CURLE_TOO_LARGE */) {
    /* curl answers a header line over its own limit with OUT_OF_MEMORY. */
    if (r->too_large == 1 && q->out_mem)
      snprintf(msg, msglen, "answer too large: more than the %lld bytes of its Content-Range",
               (long long)body_limit(r));
    else if (r->too_large == 1 && q->out_fd >= 0)
      snprintf(msg, msglen, "answer too large: more than the %lld bytes %s",
               (long long)body_limit(r),
               q->out_size >= 0 ? "the listing gave the object" : "its Content-Length declared");
    else if (r->too_large == 1)
      snprintf(msg, msglen, "answer too large: a body over %zu bytes", (size_t)S3_XML_CAP);
    else if (r->too_large == 2)
      snprintf(msg, msglen, "answer too large: headers over %zu bytes", (size_t)S3_HEADER_CAP);
    else /* curl refuses a header line over its own 100 KiB limit as "out of memory" */
      snprintf(msg, msglen, "answer too large: a response header over curl's limit%s%s",
               curl_err[0] ? ": " : "", s3_escape(curl_err, strlen(curl_err), raw, sizeof(raw)));
    return (s3_verdict){CTRAIN_E_TOOBIG, 1};
  }
  if (r->no_length) {
    snprintf(msg, msglen, "an answer without a Content-Length for an object of unknown size");
    return (s3_verdict){CTRAIN_E_NET, 1};
  }
  if (r->write_failed) {
    snprintf(msg, msglen, "writing the output failed: %s", strerror(r->write_failed));
    return (s3_verdict){CTRAIN_E_IO, 0};
  }
  if (r->read_failed) {
    snprintf(msg, msglen, "reading the source failed (%s): it changed during the upload?",
             r->read_failed == EIO ? "it is shorter than it was" : strerror(r->read_failed));
    return (s3_verdict){CTRAIN_E_IO, 0};
  }
  const char *t = curl_err[0] ? curl_err : curl_easy_strerror(cc);
  s3_escape(t, strlen(t), msg, msglen);
  return s3_classify_transport((int)cc);
}

/* A ranged GET's answer: a 412 to its If-Match, or a 2xx with another
 * ETag (a store that ignores If-Match), means the object changed
 * (CTRAIN_E_DATA, final); a 416 that the range starts at or past the end
 * (CTRAIN_OK, nothing read), unless its Content-Range gives the object more
 * bytes; a 2xx must be the range asked for, every byte of it. */
static s3_verdict judge_range(const s3_req *q, s3_resp *r, const char *code, char *msg,
                              size_t msglen) {
  char e1[200], e2[200];
  if (r->hd.http == 412 && q->if_match) {
    snprintf(msg, msglen, "changed while being read (If-Match %s failed)",
             s3_escape(q->if_match, strlen(q->if_match), e1, sizeof(e1)));
    return (s3_verdict){CTRAIN_E_DATA, 0};
  }
  if (r->hd.http == 416) {
    if (r->cr_total < 0 || r->cr_total <= q->range_off)
      return (s3_verdict){CTRAIN_OK, 0};
    snprintf(msg, msglen,
             "416 to bytes=%lld-, though its Content-Range gives the object %lld bytes",
             (long long)q->range_off, (long long)r->cr_total);
    return (s3_verdict){CTRAIN_E_NET, 1};
  }
  s3_verdict v = s3_classify(r->hd.http, code);
  if (v.err)
    return v;
  if (q->if_match && r->hd.etag[0] && strcmp(r->hd.etag, q->if_match) != 0) {
    snprintf(msg, msglen, "changed while being read: ETag %s, not the If-Match %s",
             s3_escape(r->hd.etag, strlen(r->hd.etag), e1, sizeof(e1)),
             s3_escape(q->if_match, strlen(q->if_match), e2, sizeof(e2)));
    return (s3_verdict){CTRAIN_E_DATA, 0};
  }
  int64_t want = range_expect(r);
  if (want < 0) {
    range_mismatch(q, r, msg, msglen);
    return (s3_verdict){CTRAIN_E_NET, 1};
  }
  if (r->written != want) {
    snprintf(msg, msglen, "short answer: %lld of the %lld bytes of its Content-Range",
             (long long)r->written, (long long)want);
    return (s3_verdict){CTRAIN_E_NET, 1};
  }
  return v;
}

/* A GET into a file that went through: every byte the object holds, no
 * fewer (an answer cut short, close-delimited or not, is a failed read,
 * never a damaged backup), matching the store's checksum. */
static s3_verdict judge_get(const s3_req *q, s3_resp *r, char *code, size_t codelen, char *msg,
                            size_t msglen) {
  char raw[1024];
  int64_t want = body_limit(r);
  if (want < 0 && r->written == 0) {
    snprintf(msg, msglen, "an answer without a Content-Length for an object of unknown size");
    return (s3_verdict){CTRAIN_E_NET, 1};
  }
  if (r->written != want) {
    snprintf(msg, msglen, "short answer: %lld of the %lld bytes %s", (long long)r->written,
             (long long)want,
             q->out_size >= 0 ? "the listing gave the object" : "its Content-Length declared");
    return (s3_verdict){CTRAIN_E_NET, 1};
  }
  if (q->out_size >= 0 && r->hd.content_length >= 0 && r->hd.content_length != q->out_size) {
    snprintf(msg, msglen, "Content-Length %lld, the listing gave the object %lld bytes",
             (long long)r->hd.content_length, (long long)q->out_size);
    return (s3_verdict){CTRAIN_E_NET, 1};
  }
  /* Its bytes must match the store's own checksum of the object when it
   * has a full-object one (composite ones, of multipart uploads, end in
   * "-<parts>" and cover the parts, not the bytes as a whole). */
  EVP_DigestFinal_ex(r->md, r->digest, NULL);
  if (r->hd.checksum[0] && !strchr(r->hd.checksum, '-')) {
    char b64[48];
    EVP_EncodeBlock((unsigned char *)b64, r->digest, 32);
    if (strcmp(b64, r->hd.checksum) != 0) {
      snprintf(code, codelen, "ChecksumMismatch");
      snprintf(msg, msglen, "x-amz-checksum-sha256 %s, received bytes hash to %s",
               s3_escape(r->hd.checksum, strlen(r->hd.checksum), raw, sizeof(raw)), b64);
      return (s3_verdict){CTRAIN_E_CORRUPT, 1};
    }
  }
  return (s3_verdict){CTRAIN_OK, 0};
}

/* What one finished attempt means: the verdict, and code/msg for messages
 * (the server's <Code>/<Message>, escaped, or the transport's or our own
 * words). A misbehaving answer (too large, short, past its deadline, the
 * wrong range) is retryable: the next attempt, or in the end the worker's
 * exit 75, may meet a sane server; it is never taken for damage of the
 * object. */
s3_verdict s3_judge(const s3_client *c, const s3_req *q, s3_resp *r, CURLcode cc,
                    const char *curl_err, char *code, size_t codelen, char *msg, size_t msglen) {
  char raw[1024];
  code[0] = msg[0] = '\0';
  if (cc != CURLE_OK)
    return judge_transport(c, q, r, cc, curl_err, msg, msglen);
  if (r->hd.http >= 300 && r->body.len) {
    if (s3_xml_text(r->body.p, r->body.len, "Code", NULL, raw, sizeof(raw)) == 1)
      s3_escape(raw, strlen(raw), code, codelen);
    if (s3_xml_text(r->body.p, r->body.len, "Message", NULL, raw, sizeof(raw)) == 1)
      s3_escape(raw, strlen(raw), msg, msglen);
  }
  if (q->out_mem)
    return judge_range(q, r, code, msg, msglen);
  s3_verdict v = s3_classify(r->hd.http, code);
  if (v.err || q->out_fd < 0)
    return v;
  return judge_get(q, r, code, codelen, msg, msglen);
}
