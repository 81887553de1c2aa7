/* fuzz_s3.c - what an S3 server or a user hands the S3 client, on arbitrary
 * bytes. The first byte picks the parser:
 *   0: a checkpoint URI, endpoint and region (s3_location_parse), split at
 *      NULs; an accepted location must be NUL-terminated, path-style when an
 *      endpoint was given, its bucket and prefix must keep the grammar of
 *      ctrain/backup_uri.h and parse again to themselves, and its request
 *      paths must build;
 *   1: an XML answer walked as s3_list walks a ListObjectsV2 page (every
 *      <Contents>, its Key/Size/ETag, IsTruncated, NextContinuationToken) and
 *      an error's Code/Message, each escaped as a message would be;
 *   2: response header lines (s3_header_line), one per '\n': the status is a
 *      3-digit code or 0, Content-Length -1 or not negative, Retry-After
 *      within [0, S3_RETRY_AFTER_MAX_S];
 * and every escaped text must hold no byte outside printable ASCII. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/backup_uri.h"
#include "ctrain/buf.h"
#include "ctrain/s3_proto.h"

static void check_escaped(const char *in, size_t n) {
  char out[300];
  s3_escape(in, n, out, sizeof(out));
  size_t len = strlen(out);
  if (len >= sizeof(out))
    abort();
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] >= 0x7f)
      abort();
}

static void fuzz_location(const char *s, size_t n) {
  char buf[3][2048];
  size_t part = 0, o = 0;
  memset(buf, 0, sizeof(buf));
  for (size_t i = 0; i < n && part < 3; i++) {
    if (s[i] == '\0') {
      part++;
      o = 0;
    } else if (o + 1 < sizeof(buf[0])) {
      buf[part][o++] = s[i];
    }
  }
  s3_location loc;
  char err[512];
  if (s3_location_parse(buf[0], buf[1][0] ? buf[1] : NULL, buf[2][0] ? buf[2] : NULL, &loc, err,
                        sizeof(err)) != CTRAIN_OK) {
    if (!err[0])
      abort();
    return;
  }
  if (!memchr(loc.bucket, 0, sizeof(loc.bucket)) || !memchr(loc.prefix, 0, sizeof(loc.prefix)) ||
      !memchr(loc.host, 0, sizeof(loc.host)) || !memchr(loc.endpoint, 0, sizeof(loc.endpoint)))
    abort();
  if (buf[1][0] && !loc.path_style)
    abort();
  /* The grammar (ctrain/backup_uri.h) holds for what was taken: the bucket
   * is 3..222 bytes, the prefix has no '/' at either end nor "//", and
   * "scheme://bucket/prefix" parses again to the same bucket and prefix. */
  size_t bl = strlen(loc.bucket), pl = strlen(loc.prefix);
  if (bl < 3 || bl > CTRAIN_BACKUP_BUCKET_MAX ||
      (pl && (loc.prefix[0] == '/' || loc.prefix[pl - 1] == '/')) || strstr(loc.prefix, "//"))
    abort();
  char again[2200];
  ctrain_backup_uri u;
  snprintf(again, sizeof(again), "%s://%s/%s", loc.scheme, loc.bucket, loc.prefix);
  if (ctrain_backup_uri_parse(again, &u, err, sizeof(err)) || strcmp(u.bucket, loc.bucket) ||
      strcmp(u.prefix, loc.prefix))
    abort();
  ctrain_buf key, path;
  ctrain_buf_init(&key, 8192);
  ctrain_buf_init(&path, 32768);
  if (s3_location_key(&loc, "backup-00000000000000000001.ckpt", &key) ||
      s3_location_path(&loc, key.p, &path) || path.p[0] != '/')
    abort();
  ctrain_buf_free(&key);
  ctrain_buf_free(&path);
}

static void fuzz_xml(const char *s, size_t n) {
  size_t pos = 0, ilen;
  const char *inner;
  char text[2048];
  int pages = 0;
  while (s3_xml_element(s, n, "Contents", &pos, &inner, &ilen)) {
    if (inner < s || inner + ilen > s + n || pos > n)
      abort();
    static const char *const tags[] = {"Key", "Size", "ETag", "LastModified"};
    for (size_t t = 0; t < 4; t++)
      if (s3_xml_text(inner, ilen, tags[t], NULL, text, sizeof(text)) == 1)
        check_escaped(text, strlen(text));
    if (++pages > 100000)
      abort(); /* pos must move forward */
  }
  static const char *const top[] = {"IsTruncated", "NextContinuationToken", "Code", "Message",
                                    "UploadId"};
  for (size_t t = 0; t < 5; t++) {
    int r = s3_xml_text(s, n, top[t], NULL, text, sizeof(text));
    if (r == 1)
      check_escaped(text, strlen(text));
    else if (r != 0 && r != -1)
      abort();
  }
  (void)s3_classify(400, text);
}

static void fuzz_headers(const char *s, size_t n) {
  s3_headers h;
  memset(&h, 0, sizeof(h));
  h.content_length = -1;
  for (size_t i = 0; i < n;) {
    const char *nl = memchr(s + i, '\n', n - i);
    size_t len = nl ? (size_t)(nl - (s + i)) + 1 : n - i;
    s3_header_line(s + i, len, &h);
    if (h.http != 0 && (h.http < 100 || h.http > 999))
      abort();
    if (h.content_length < -1 || h.retry_after_s < 0 || h.retry_after_s > S3_RETRY_AFTER_MAX_S)
      abort();
    if (!memchr(h.etag, 0, sizeof(h.etag)) || !memchr(h.checksum, 0, sizeof(h.checksum)) ||
        !memchr(h.last_modified, 0, sizeof(h.last_modified)))
      abort();
    check_escaped(h.checksum, strlen(h.checksum));
    i += len;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  const char *s = (const char *)data + 1;
  size_t n = size - 1;
  switch (data[0] % 3) {
  case 0:
    fuzz_location(s, n);
    break;
  case 1:
    fuzz_xml(s, n);
    break;
  default:
    fuzz_headers(s, n);
    break;
  }
  check_escaped(s, n);
  return 0;
}
