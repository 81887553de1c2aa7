/* objstore/s3_range.c - ranged GETs into memory (s3_get_range, see s3.h):
 * for readers that stream an object in pieces (training data), each piece
 * one request through s3_do, its Range and If-Match checked by the answer's
 * side (s3_answer.c: the Content-Range, the ETag, 412 and 416). */
#include "s3_internal.h"

#include <string.h>

/* An ETag fit to send as If-Match: printable ASCII, as a listing's are (a
 * hostile listing's CR or LF must not become a header of ours). */
static int etag_ok(const char *etag) {
  size_t n = strlen(etag);
  if (n >= sizeof(((s3_object *)0)->etag))
    return 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)etag[i] < 0x20 || (unsigned char)etag[i] >= 0x7f)
      return 0;
  return 1;
}

/* The arguments s3_get_range refuses before any request, with why. */
static ctrain_err range_args(const s3_client *c, const char *key, int64_t off, size_t len,
                             const char *etag, const void *buf, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (off < 0 || len > S3_RANGE_MAX || (len && !buf) || off > INT64_MAX - (int64_t)len)
    CTRAIN_FAIL(CTRAIN_E_INVAL,
                "s3: GET %s://%s/%s: bytes [%lld, +%zu) is not a range to read (offset at least "
                "0, at most %zu bytes, into a buffer)",
                c->loc.scheme, c->loc.bucket, key, (long long)off, len, (size_t)S3_RANGE_MAX);
  if (etag && !etag_ok(etag))
    CTRAIN_FAIL(CTRAIN_E_INVAL,
                "s3: GET %s://%s/%s at byte %lld: the ETag to match is not printable ASCII or "
                "too long",
                c->loc.scheme, c->loc.bucket, key, (long long)off);
out:
  return result;
}

ctrain_err s3_get_range(s3_client *c, const char *name, int64_t off, size_t len, const char *etag,
                        void *buf, size_t *got, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  s3_resp r = {0};
  *got = 0;
  c->last_attempts = 0;
  c->last_retryable = 0;
  if ((result = s3_full_key(c, name, &key, errbuf, errlen)) ||
      (result = range_args(c, key.p, off, len, etag, buf, errbuf, errlen)) || len == 0)
    goto out;
  s3_req q = s3_req_init("GET", "GET", key.p);
  q.out_mem = buf;
  q.out_cap = len;
  q.range_off = off;
  q.if_match = etag && *etag ? etag : NULL;
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  *got = r.hd.http == 416 ? 0 : (size_t)r.written;
out:
  s3_resp_free(&r);
  ctrain_buf_free(&key);
  return result;
}
