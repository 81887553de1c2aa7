/* objstore/s3_proto.c - URIs, XML elements and error meanings of
 * S3 (see s3_proto.h). Uses curl's header for its error constants only: no
 * libcurl symbol is referenced here. */
#include "ctrain/s3_proto.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "ctrain/backup_uri.h"
#include "ctrain/s3_sign.h"
#include "ctrain/util.h"

static int copy_str(char *dst, size_t cap, const char *src, size_t n) {
  if (n >= cap)
    return -1;
  memcpy(dst, src, n);
  dst[n] = '\0';
  return 0;
}

/* Splits "http(s)://authority[/]" into its parts; 0 when it is not that shape. */
static int endpoint_ok(const char *ep, size_t *len_out, const char **authority) {
  const char *a = NULL;
  if (strncmp(ep, "https://", 8) == 0)
    a = ep + 8;
  else if (strncmp(ep, "http://", 7) == 0)
    a = ep + 7;
  else
    return 0;
  size_t n = strlen(ep);
  while (n > (size_t)(a - ep) && ep[n - 1] == '/')
    n--;
  if (n == (size_t)(a - ep))
    return 0;
  for (const char *p = a; p < ep + n; p++)
    if (*p == '/' || *p == '?' || *p == '#' || *p == '@' || isspace((unsigned char)*p))
      return 0; /* a path, query or credentials in the endpoint: refuse, not guess */
  *len_out = n;
  *authority = a;
  return 1;
}

ctrain_err s3_location_parse(const char *uri, const char *endpoint, const char *region,
                             s3_location *loc, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  memset(loc, 0, sizeof(*loc));
  /* The one grammar the CRD and the controller check too (ctrain/backup_uri.h). */
  ctrain_backup_uri u;
  char why[256];
  if (ctrain_backup_uri_parse(uri, &u, why, sizeof(why))) {
    char shown[4 * 200 + 1];
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "checkpoint uri '%.200s': %s",
                ctrain_escape_ctl(uri ? uri : "", shown, sizeof(shown)), why);
  }
  int gcs = u.gcs;
  memcpy(loc->scheme, gcs ? "gs" : "s3", 2);
  if (copy_str(loc->bucket, sizeof(loc->bucket), u.bucket, strlen(u.bucket)) ||
      copy_str(loc->prefix, sizeof(loc->prefix), u.prefix, strlen(u.prefix)))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "checkpoint uri: too long");

  const char *rg = region && *region ? region : (gcs ? "auto" : "us-east-1");
  for (const char *q = rg; *q; q++)
    if (!isalnum((unsigned char)*q) && *q != '-')
      CTRAIN_FAIL(CTRAIN_E_CONFIG, "region '%.64s' is not a region name", rg);
  if (copy_str(loc->region, sizeof(loc->region), rg, strlen(rg)))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "region '%.64s...' is too long", rg);

  const char *ep = endpoint && *endpoint ? endpoint : NULL;
  char dflt[sizeof(loc->endpoint)];
  if (!ep) {
    if (gcs)
      snprintf(dflt, sizeof(dflt), "%s", S3_GCS_ENDPOINT);
    else
      snprintf(dflt, sizeof(dflt), "https://s3.%s.amazonaws.com", loc->region);
    ep = dflt;
    /* AWS: virtual-hosted unless a dotted bucket would break the wildcard
     * certificate; GCS: path-style, as its XML API documents for HMAC use. */
    loc->path_style = gcs || strchr(loc->bucket, '.') != NULL;
  } else {
    loc->path_style = 1;
  }
  size_t eplen;
  const char *authority;
  if (!endpoint_ok(ep, &eplen, &authority))
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "endpoint '%.200s' must be http(s)://host[:port] without a path or credentials",
                ep);
  if (copy_str(loc->endpoint, sizeof(loc->endpoint), ep, eplen))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "endpoint is too long");
  size_t alen = (size_t)(ep + eplen - authority);
  int n = loc->path_style ? snprintf(loc->host, sizeof(loc->host), "%.*s", (int)alen, authority)
                          : snprintf(loc->host, sizeof(loc->host), "%s.%.*s", loc->bucket,
                                     (int)alen, authority);
  if (n < 0 || (size_t)n >= sizeof(loc->host))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "endpoint host is too long");
out:
  return result;
}

ctrain_err s3_location_key(const s3_location *loc, const char *name, ctrain_buf *out) {
  if (loc->prefix[0])
    return ctrain_buf_printf(out, "%s/%s", loc->prefix, name);
  return ctrain_buf_printf(out, "%s", name);
}

ctrain_err s3_location_path(const s3_location *loc, const char *key, ctrain_buf *out) {
  ctrain_err result = CTRAIN_OK;
  if (loc->path_style && (result = ctrain_buf_printf(out, "/%s", loc->bucket)))
    return result;
  if ((result = ctrain_buf_append(out, "/", 1)))
    return result;
  if (key && *key)
    result = s3_uri_encode(out, key, strlen(key), 1);
  return result;
}

int s3_xml_element(const char *xml, size_t len, const char *tag, size_t *pos, const char **inner,
                   size_t *inner_len) {
  char open[80], close[82];
  int on = snprintf(open, sizeof(open), "<%s>", tag);
  int cn = snprintf(close, sizeof(close), "</%s>", tag);
  if (on < 0 || (size_t)on >= sizeof(open) || cn < 0 || (size_t)cn >= sizeof(close))
    return 0;
  size_t i = pos ? *pos : 0;
  for (; i + (size_t)on <= len; i++) {
    if (memcmp(xml + i, open, (size_t)on) != 0)
      continue;
    size_t start = i + (size_t)on;
    for (size_t j = start; j + (size_t)cn <= len; j++) {
      if (memcmp(xml + j, close, (size_t)cn) == 0) {
        *inner = xml + start;
        *inner_len = j - start;
        if (pos)
          *pos = j + (size_t)cn;
        return 1;
      }
    }
    return 0;
  }
  return 0;
}

/* Decodes the five predefined XML entities and numeric ones (ASCII range). */
static int xml_decode(const char *s, size_t n, char *out, size_t outlen) {
  static const struct {
    const char *ent;
    char c;
  } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    char c = s[i];
    size_t adv = 1;
    if (c == '&') {
      int found = 0;
      for (size_t k = 0; k < sizeof(ents) / sizeof(ents[0]); k++) {
        size_t el = strlen(ents[k].ent);
        if (i + el <= n && memcmp(s + i, ents[k].ent, el) == 0) {
          c = ents[k].c;
          adv = el;
          found = 1;
          break;
        }
      }
      if (!found && i + 3 < n && s[i + 1] == '#') {
        const char *semi = memchr(s + i, ';', n - i);
        if (!semi)
          return -1;
        char num[16];
        size_t nl = (size_t)(semi - (s + i + 2));
        if (nl == 0 || nl >= sizeof(num))
          return -1;
        memcpy(num, s + i + 2, nl);
        num[nl] = '\0';
        char *end;
        long v = num[0] == 'x' ? strtol(num + 1, &end, 16) : strtol(num, &end, 10);
        if (*end || v <= 0 || v > 0x7f)
          return -1; /* keys we write are ASCII; anything else is not ours */
        c = (char)v;
        adv = (size_t)(semi - (s + i)) + 1;
        found = 1;
      }
      if (!found)
        return -1;
    }
    if (o + 1 >= outlen)
      return -1;
    out[o++] = c;
    i += adv;
  }
  if (outlen == 0)
    return -1;
  out[o] = '\0';
  return 0;
}

int s3_xml_text(const char *xml, size_t len, const char *tag, size_t *pos, char *out,
                size_t outlen) {
  const char *inner;
  size_t n;
  size_t p = pos ? *pos : 0;
  if (!s3_xml_element(xml, len, tag, &p, &inner, &n))
    return 0;
  if (xml_decode(inner, n, out, outlen))
    return -1;
  if (pos)
    *pos = p;
  return 1;
}

static int code_is(const char *code, const char *const *list) {
  for (; *list; list++)
    if (strcmp(code, *list) == 0)
      return 1;
  return 0;
}

s3_verdict s3_classify(long http_code, const char *code) {
  static const char *const throttled[] = {"SlowDown",
                                          "Throttling",
                                          "ThrottlingException",
                                          "RequestThrottled",
                                          "RequestTimeout",
                                          "InternalError",
                                          "ServiceUnavailable",
                                          "RequestLimitExceeded",
                                          "TooManyRequests",
                                          "OperationAborted",
                                          NULL};
  static const char *const permanent[] = {"AccessDenied",
                                          "InvalidAccessKeyId",
                                          "SignatureDoesNotMatch",
                                          "ExpiredToken",
                                          "RequestTimeTooSkewed",
                                          "InvalidToken",
                                          "TokenRefreshRequired",
                                          "AccountProblem",
                                          "AllAccessDisabled",
                                          "NoSuchBucket",
                                          "InvalidBucketName",
                                          "PermanentRedirect",
                                          "AuthorizationHeaderMalformed",
                                          "InvalidRegion",
                                          "IllegalLocationConstraintException",
                                          NULL};
  static const char *const corrupt[] = {"BadDigest", "XAmzContentSHA256Mismatch", "InvalidDigest",
                                        NULL};
  if (!code)
    code = "";
  if (http_code >= 200 && http_code < 300)
    return (s3_verdict){CTRAIN_OK, 0};
  if (code_is(code, permanent) || http_code == 401 || http_code == 403 ||
      (http_code >= 300 && http_code < 400))
    return (s3_verdict){CTRAIN_E_CONFIG, 0};
  if (http_code >= 500 || http_code == 429 || code_is(code, throttled))
    return (s3_verdict){CTRAIN_E_HTTP, 1};
  if (code_is(code, corrupt))
    return (s3_verdict){CTRAIN_E_CORRUPT, 1};
  if (http_code == 404) {
    /* A 404 about the object is the caller's business; one about anything
     * else (the bucket, the account: versitygw answers an unknown access key
     * with 404 XAdminUserNotFound) is a configuration that cannot work. */
    static const char *const object_gone[] = {"", "NoSuchKey", "NoSuchUpload", "NoSuchVersion",
                                              NULL};
    return code_is(code, object_gone) ? (s3_verdict){CTRAIN_E_NOTFOUND, 0}
                                      : (s3_verdict){CTRAIN_E_CONFIG, 0};
  }
  if (http_code == 409 || http_code == 412)
    return (s3_verdict){CTRAIN_E_CONFLICT, 0};
  return (s3_verdict){CTRAIN_E_HTTP, 0};
}

s3_verdict s3_classify_transport(int curl_code) {
  switch (curl_code) {
  case CURLE_OK:
    return (s3_verdict){CTRAIN_OK, 0};
  case CURLE_OPERATION_TIMEDOUT:
    return (s3_verdict){CTRAIN_E_TIMEOUT, 1};
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
  case CURLE_COULDNT_CONNECT:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM:
  case CURLE_SSL_CONNECT_ERROR:
    return (s3_verdict){CTRAIN_E_NET, 1};
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CERTPROBLEM:
    return (s3_verdict){CTRAIN_E_TLS, 0};
  case CURLE_URL_MALFORMAT:
  case CURLE_UNSUPPORTED_PROTOCOL:
    return (s3_verdict){CTRAIN_E_CONFIG, 0};
  case CURLE_READ_ERROR:
  case CURLE_WRITE_ERROR:
    return (s3_verdict){CTRAIN_E_IO, 0};
  case CURLE_OUT_OF_MEMORY:
    return (s3_verdict){CTRAIN_E_NOMEM, 0};
  default:
    return (s3_verdict){CTRAIN_E_NET, 0};
  }
}

long s3_backoff_ms(int attempt, long base_ms, long max_ms, long retry_after_ms, unsigned rnd) {
  long ceiling = base_ms > 0 ? base_ms : 1;
  for (int i = 1; i < attempt && ceiling < max_ms; i++)
    ceiling *= 2;
  if (ceiling > max_ms)
    ceiling = max_ms;
  /* Full jitter (AWS architecture blog), but never below half the ceiling so
   * a retry storm still spreads out and a retry never comes instantly. */
  long d = ceiling / 2 + (long)(rnd % (unsigned long)(ceiling / 2 + 1));
  return d < retry_after_ms ? retry_after_ms : d;
}

char *s3_escape(const char *in, size_t n, char *out, size_t outlen) {
  static const char hex[] = "0123456789abcdef";
  size_t total = 0, o = 0, room;
  if (!outlen)
    return out;
  for (size_t i = 0; i < n; i++)
    total += (unsigned char)in[i] >= 0x20 && (unsigned char)in[i] < 0x7f && in[i] != '\\' ? 1 : 4;
  /* All of it, or as much as leaves room for "..." and the NUL. */
  room = total < outlen ? outlen - 1 : outlen >= 4 ? outlen - 4 : 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)in[i];
    int plain = c >= 0x20 && c < 0x7f && c != '\\';
    if (o + (plain ? 1 : 4) > room)
      break;
    if (plain) {
      out[o++] = (char)c;
    } else {
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    }
  }
  if (total >= outlen && outlen >= 4) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
  return out;
}

/* A decimal count in [0, max], no sign, no overflow; -1 for anything else. */
static int64_t parse_count(const char *v, size_t n, int64_t max) {
  int64_t x = 0;
  if (!n)
    return -1;
  for (size_t i = 0; i < n; i++) {
    if (v[i] < '0' || v[i] > '9')
      return -1;
    int d = v[i] - '0';
    x = x > (max - d) / 10 ? max : x * 10 + d; /* saturates */
  }
  return x;
}

void s3_header_line(const char *data, size_t len, s3_headers *h) {
  if (len >= 5 && memcmp(data, "HTTP/", 5) == 0) {
    /* A new status line (after a 100 Continue, too): the last one wins. */
    const char *sp = memchr(data, ' ', len);
    size_t i = sp ? (size_t)(sp - data) + 1 : len, d = 0;
    long code = 0;
    while (i < len && d < 3 && data[i] >= '0' && data[i] <= '9')
      code = code * 10 + (data[i++] - '0'), d++;
    memset(h, 0, sizeof(*h));
    /* Exactly three digits, 100..999; anything else is no status (0). */
    int more = i < len && data[i] >= '0' && data[i] <= '9';
    h->http = d == 3 && !more && code >= 100 ? code : 0;
    h->content_length = -1;
    return;
  }
  const char *colon = memchr(data, ':', len);
  if (!colon)
    return;
  size_t nlen = (size_t)(colon - data);
  const char *v = colon + 1, *end = data + len;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
    end--;
  size_t vlen = (size_t)(end - v);
  int cut = vlen > 1024 ? 1024 : (int)vlen;
#define HDR_IS(s) (nlen == sizeof(s) - 1 && strncasecmp(data, s, nlen) == 0)
  if (HDR_IS("etag"))
    snprintf(h->etag, sizeof(h->etag), "%.*s", cut, v);
  else if (HDR_IS("x-amz-checksum-sha256"))
    snprintf(h->checksum, sizeof(h->checksum), "%.*s", cut, v);
  else if (HDR_IS("last-modified"))
    snprintf(h->last_modified, sizeof(h->last_modified), "%.*s", cut, v);
  else if (HDR_IS("content-length"))
    h->content_length = parse_count(v, vlen, INT64_MAX);
  else if (HDR_IS("retry-after")) {
    int64_t s = parse_count(v, vlen, S3_RETRY_AFTER_MAX_S);
    h->retry_after_s = s < 0 ? 0 : (long)s;
  }
#undef HDR_IS
}
