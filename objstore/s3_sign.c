/* objstore/s3_sign.c - AWS Signature Version 4 (see s3_sign.h).
 *
 * The steps are AWS's: canonical request, string to sign over its SHA-256,
 * signing key HMAC("AWS4"+secret, date, region, service, "aws4_request"),
 * signature HMAC(key, string to sign). */
#include "ctrain/s3_sign.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

void s3_hex32(const unsigned char bin[32], char hex[65]) {
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; i++) {
    hex[2 * i] = digits[bin[i] >> 4];
    hex[2 * i + 1] = digits[bin[i] & 15];
  }
  hex[64] = '\0';
}

void s3_amz_date(long long unix_s, char out[17]) {
  time_t t = (time_t)unix_s;
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

ctrain_err s3_uri_encode(ctrain_buf *out, const char *s, size_t n, int keep_slash) {
  static const char digits[] = "0123456789ABCDEF";
  ctrain_err result = ctrain_buf_reserve(out, n * 3);
  if (result)
    return result;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/')) {
      out->p[out->len++] = (char)c;
    } else {
      out->p[out->len++] = '%';
      out->p[out->len++] = digits[c >> 4];
      out->p[out->len++] = digits[c & 15];
    }
  }
  out->p[out->len] = '\0';
  return CTRAIN_OK;
}

typedef struct span {
  const char *p;
  size_t n;
} span;

static int span_cmp(span a, span b) {
  size_t n = a.n < b.n ? a.n : b.n;
  int c = memcmp(a.p, b.p, n);
  if (c)
    return c;
  return a.n < b.n ? -1 : a.n > b.n;
}

/* A query pair, split at its first '='. */
typedef struct qpair {
  span name, value;
} qpair;

static int qpair_cmp(const void *a, const void *b) {
  const qpair *x = a, *y = b;
  int c = span_cmp(x->name, y->name);
  return c ? c : span_cmp(x->value, y->value);
}

/* Appends the canonical query: pairs sorted by name then value, each with '='. */
static ctrain_err canonical_query(ctrain_buf *b, const char *query) {
  ctrain_err result = CTRAIN_OK;
  qpair *pairs = NULL;
  size_t n = 0, alloc = 0;
  const char *p = query ? query : "";
  while (*p) {
    const char *end = strchr(p, '&');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len) {
      result = ctrain_grow(&pairs, &alloc, n + 1, sizeof(*pairs), 8, 1024);
      if (result)
        goto out;
      const char *eq = memchr(p, '=', len);
      pairs[n].name = (span){p, eq ? (size_t)(eq - p) : len};
      pairs[n].value = eq ? (span){eq + 1, len - (size_t)(eq - p) - 1} : (span){"", 0};
      n++;
    }
    p += len + (end ? 1 : 0);
  }
  if (n) /* qsort(NULL, 0, ...) is undefined */
    qsort(pairs, n, sizeof(*pairs), qpair_cmp);
  for (size_t i = 0; i < n; i++) {
    result = ctrain_buf_printf(b, "%s%.*s=%.*s", i ? "&" : "", (int)pairs[i].name.n,
                               pairs[i].name.p, (int)pairs[i].value.n, pairs[i].value.p);
    if (result)
      goto out;
  }
out:
  free(pairs);
  return result;
}

typedef struct hdr {
  char name[128]; /* lower case */
  const char *value;
} hdr;

static int hdr_cmp(const void *a, const void *b) {
  return strcmp(((const hdr *)a)->name, ((const hdr *)b)->name);
}

/* Appends a header value trimmed, with inner runs of whitespace folded to one space. */
static ctrain_err append_trimmed(ctrain_buf *b, const char *v) {
  ctrain_err result = ctrain_buf_reserve(b, strlen(v));
  if (result)
    return result;
  while (*v == ' ' || *v == '\t')
    v++;
  int pending_space = 0;
  for (; *v; v++) {
    if (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') {
      pending_space = 1;
      continue;
    }
    if (pending_space)
      b->p[b->len++] = ' ';
    pending_space = 0;
    b->p[b->len++] = *v;
  }
  b->p[b->len] = '\0';
  return CTRAIN_OK;
}

/* HMAC-SHA256; out may be the key itself (the key-derivation chain). */
static int hmac(const void *key, size_t keylen, const void *msg, size_t msglen,
                unsigned char out[32]) {
  unsigned char tmp[32];
  unsigned int outlen = 32;
  int ok = HMAC(EVP_sha256(), key, (int)keylen, msg, msglen, tmp, &outlen) != NULL && outlen == 32;
  memcpy(out, tmp, 32);
  OPENSSL_cleanse(tmp, sizeof(tmp));
  return ok;
}

ctrain_err s3_sign(const s3_sign_input *in, ctrain_buf *authz, ctrain_buf *canonical,
                   ctrain_buf *string_to_sign) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf creq, sts, signed_names, secret;
  hdr hs[S3_SIGN_MAX_HEADERS];
  unsigned char digest[32], key[32];
  char hex[65], date[9];

  ctrain_buf_init(&creq, 1 << 20);
  ctrain_buf_init(&sts, 4096);
  ctrain_buf_init(&signed_names, 4096);
  ctrain_buf_init(&secret, 1024);
  if (!in->method || !in->path || !in->payload_hash || !in->amz_date || !in->region ||
      !in->service || !in->access_key_id || !in->secret_key || in->nheaders > S3_SIGN_MAX_HEADERS ||
      strlen(in->amz_date) != 16 || in->amz_date[8] != 'T' || in->amz_date[15] != 'Z') {
    result = CTRAIN_E_INVAL;
    goto out;
  }
  memcpy(date, in->amz_date, 8);
  date[8] = '\0';

  for (size_t i = 0; i < in->nheaders; i++) {
    size_t n = strlen(in->headers[i].name);
    if (n == 0 || n >= sizeof(hs[i].name) || !in->headers[i].value) {
      result = CTRAIN_E_INVAL;
      goto out;
    }
    for (size_t j = 0; j <= n; j++)
      hs[i].name[j] = (char)tolower((unsigned char)in->headers[i].name[j]);
    hs[i].value = in->headers[i].value;
  }
  qsort(hs, in->nheaders, sizeof(hs[0]), hdr_cmp);

  /* Canonical request. */
  if ((result = ctrain_buf_printf(&creq, "%s\n%s\n", in->method, *in->path ? in->path : "/")))
    goto out;
  if ((result = canonical_query(&creq, in->query)) || (result = ctrain_buf_append(&creq, "\n", 1)))
    goto out;
  for (size_t i = 0; i < in->nheaders; i++) {
    if ((result = ctrain_buf_printf(&creq, "%s:", hs[i].name)) ||
        (result = append_trimmed(&creq, hs[i].value)) ||
        (result = ctrain_buf_append(&creq, "\n", 1)) ||
        (result = ctrain_buf_printf(&signed_names, "%s%s", i ? ";" : "", hs[i].name)))
      goto out;
  }
  if ((result = ctrain_buf_printf(&creq, "\n%s\n%s", signed_names.len ? signed_names.p : "",
                                  in->payload_hash)))
    goto out;

  /* String to sign. */
  EVP_Digest(creq.p, creq.len, digest, NULL, EVP_sha256(), NULL);
  s3_hex32(digest, hex);
  if ((result = ctrain_buf_printf(&sts, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s",
                                  in->amz_date, date, in->region, in->service, hex)))
    goto out;

  /* Signing key and signature. */
  if ((result = ctrain_buf_printf(&secret, "AWS4%s", in->secret_key)))
    goto out;
  if (!hmac(secret.p, secret.len, date, 8, key) ||
      !hmac(key, 32, in->region, strlen(in->region), key) ||
      !hmac(key, 32, in->service, strlen(in->service), key) ||
      !hmac(key, 32, "aws4_request", 12, key) || !hmac(key, 32, sts.p, sts.len, digest)) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  s3_hex32(digest, hex);

  ctrain_buf_clear(authz);
  if ((result = ctrain_buf_printf(
           authz,
           "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, SignedHeaders=%s, "
           "Signature=%s",
           in->access_key_id, date, in->region, in->service, signed_names.len ? signed_names.p : "",
           hex)))
    goto out;
  if (canonical) {
    ctrain_buf_clear(canonical);
    if ((result = ctrain_buf_append(canonical, creq.p, creq.len)))
      goto out;
  }
  if (string_to_sign) {
    ctrain_buf_clear(string_to_sign);
    if ((result = ctrain_buf_append(string_to_sign, sts.p, sts.len)))
      goto out;
  }
out:
  OPENSSL_cleanse(key, sizeof(key));
  if (secret.p)
    OPENSSL_cleanse(secret.p, secret.alloc);
  ctrain_buf_free(&secret);
  ctrain_buf_free(&creq);
  ctrain_buf_free(&sts);
  ctrain_buf_free(&signed_names);
  return result;
}
