/* backup_uri.c - the grammar of a backup URI (see ctrain/backup_uri.h). */
#include "ctrain/backup_uri.h"

#include <stdio.h>
#include <string.h>

#include "ctrain/util.h"

static int lower_or_digit(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* RFC 3986 pchar without pct-encoded. */
static int pchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c != '\0' && strchr("-._~!$&'()*+,;=:@", c) != NULL);
}

static int starts(const char *s, size_t n, const char *p) {
  size_t k = strlen(p);
  return n >= k && memcmp(s, p, k) == 0;
}

static int ends(const char *s, size_t n, const char *p) {
  size_t k = strlen(p);
  return n >= k && memcmp(s + n - k, p, k) == 0;
}

static int contains(const char *s, size_t n, const char *p) {
  size_t k = strlen(p);
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(s + i, p, k) == 0)
      return 1;
  return 0;
}

/* The bucket b[0..n): NULL when valid, else why not. */
static const char *bucket_why(const char *b, size_t n, int gcs) {
  if (n == 0)
    return "no bucket name";
  size_t max = gcs ? CTRAIN_BACKUP_BUCKET_MAX : 63;
  if (n < 3 || n > max)
    return gcs ? "a gs:// bucket name is 3 to 63 characters, or up to 222 with dots"
               : "an s3:// bucket name is 3 to 63 characters";
  size_t labels = 0, digit_labels = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    int digits = 1;
    while (j < n && b[j] != '.') {
      unsigned char c = (unsigned char)b[j];
      if (!(lower_or_digit(c) || c == '-' || (gcs && c == '_')))
        return gcs ? "a gs:// bucket name holds only a-z, 0-9, '.', '-' and '_'"
                   : "an s3:// bucket name holds only a-z, 0-9, '.' and '-'";
      if (!(c >= '0' && c <= '9'))
        digits = 0;
      j++;
    }
    if (j == i)
      return "a bucket name has no empty label (no leading, trailing or double '.')";
    if (!lower_or_digit((unsigned char)b[i]) || !lower_or_digit((unsigned char)b[j - 1]))
      return "each '.'-separated label of a bucket name begins and ends with a letter or digit";
    if (j - i > 63)
      return "each '.'-separated label of a bucket name is at most 63 characters";
    labels++;
    digit_labels += (size_t)digits;
    if (j < n && j + 1 == n)
      return "a bucket name has no empty label (no leading, trailing or double '.')";
    i = j + 1;
  }
  if (labels == 4 && digit_labels == 4)
    return "a bucket name is not an IP address";
  if (!gcs) {
    static const char *const pre[] = {"xn--", "sthree-", "amzn-s3-demo-"};
    static const char *const suf[] = {"--ol-s3", ".mrap", "--x-s3", "--table-s3"};
    for (size_t i = 0; i < sizeof(pre) / sizeof(pre[0]); i++)
      if (starts(b, n, pre[i]))
        return "an s3:// bucket name does not begin with xn--, sthree- or amzn-s3-demo- "
               "(reserved by AWS)";
    for (size_t i = 0; i < sizeof(suf) / sizeof(suf[0]); i++)
      if (ends(b, n, suf[i]))
        return "an s3:// bucket name does not end with --ol-s3, .mrap, --x-s3 or --table-s3 "
               "(reserved by AWS)";
  } else if (starts(b, n, "goog") || contains(b, n, "google")) {
    return "a gs:// bucket name does not begin with goog nor contain google (reserved by Google)";
  }
  return NULL;
}

ctrain_err ctrain_backup_uri_parse(const char *uri, ctrain_backup_uri *out, char *why,
                                   size_t whylen) {
  if (out)
    memset(out, 0, sizeof(*out));
  if (!uri || !*uri)
    return ctrain_errf(CTRAIN_E_CONFIG, why, whylen, "empty");
  size_t len = strlen(uri);
  if (len > CTRAIN_BACKUP_URI_MAX)
    return ctrain_errf(CTRAIN_E_CONFIG, why, whylen, "longer than %d characters (%zu)",
                       CTRAIN_BACKUP_URI_MAX, len);
  int gcs;
  if (strncmp(uri, "s3://", 5) == 0)
    gcs = 0;
  else if (strncmp(uri, "gs://", 5) == 0)
    gcs = 1;
  else
    return ctrain_errf(CTRAIN_E_CONFIG, why, whylen, "scheme must be s3:// or gs://");
  const char *b = uri + 5, *slash = strchr(b, '/');
  size_t blen = slash ? (size_t)(slash - b) : strlen(b);
  const char *bw = bucket_why(b, blen, gcs);
  if (bw) {
    /* Echo the name only when it is printable ASCII (it ends up in logs). */
    int printable = blen <= CTRAIN_BACKUP_BUCKET_MAX + 1;
    for (size_t i = 0; printable && i < blen; i++)
      printable = b[i] >= 0x20 && b[i] < 0x7f;
    if (printable && blen)
      return ctrain_errf(CTRAIN_E_CONFIG, why, whylen, "bad bucket name '%.*s': %s", (int)blen, b,
                         bw);
    return ctrain_errf(CTRAIN_E_CONFIG, why, whylen, "bad bucket name: %s", bw);
  }

  const char *p = slash ? slash + 1 : "";
  size_t full = strlen(p), plen = full;
  if (plen && p[plen - 1] == '/')
    plen--; /* one trailing '/' is the same prefix */
  if (full && (plen == 0 || p[plen - 1] == '/'))
    return ctrain_errf(CTRAIN_E_CONFIG, why, whylen,
                       "prefix has an empty segment ('//', or a '/' more at either end)");
  for (size_t i = 0; i < plen;) {
    size_t j = i;
    while (j < plen && p[j] != '/') {
      unsigned char c = (unsigned char)p[j];
      if (!pchar(c)) {
        if (c < 0x20 || c == 0x7f)
          return ctrain_errf(CTRAIN_E_CONFIG, why, whylen, "prefix holds a control byte (0x%02x)",
                             c);
        if (c >= 0x80)
          return ctrain_errf(CTRAIN_E_CONFIG, why, whylen, "prefix holds a non-ASCII byte (0x%02x)",
                             c);
        return ctrain_errf(CTRAIN_E_CONFIG, why, whylen,
                           "prefix holds '%c': a prefix is letters, digits and -._~!$&'()*+,;=:@ "
                           "between single '/'",
                           c);
      }
      j++;
    }
    if (j == i)
      return ctrain_errf(CTRAIN_E_CONFIG, why, whylen,
                         "prefix has an empty segment ('//', or a '/' more at either end)");
    if ((j - i == 1 && p[i] == '.') || (j - i == 2 && p[i] == '.' && p[i + 1] == '.'))
      return ctrain_errf(CTRAIN_E_CONFIG, why, whylen, "prefix has a '.' or '..' segment");
    i = j + 1;
  }
  if (out) {
    out->gcs = gcs;
    memcpy(out->bucket, b, blen);
    memcpy(out->prefix, p, plen);
  }
  return CTRAIN_OK;
}
