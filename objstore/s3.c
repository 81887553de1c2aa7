/* objstore/s3.c - the S3 client's operations (see s3.h): PUT
 * (single or multipart, aborted on failure), GET, HEAD, COPY, DELETE and
 * aborting an upload, each built on s3_do (s3_http.c); the listings are
 * s3_list.c, ranged GETs s3_range.c. */
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

#include "ctrain/log.h"
#include "ctrain/s3_sign.h"

/* --- operations ---------------------------------------------------------- */

ctrain_err s3_full_key(const s3_client *c, const char *name, ctrain_buf *key, char *errbuf,
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
  s3_req q = s3_req_init("PUT", "PUT", key);
  if (known) {
    s3_hex32(known, hex);
    EVP_EncodeBlock((unsigned char *)b64, known, 32);
  } else if ((result = s3_hash_range(fd, 0, size, hex, b64, NULL))) {
    CTRAIN_FAIL(result, "s3: PUT %s://%s/%s: reading the source file failed", c->loc.scheme,
                c->loc.bucket, key);
  }
  q.in_fd = fd;
  q.in_len = size;
  q.payload_hash = body_hash(c, hex);
  q.checksum_b64 = c->no_checksum ? NULL : b64;
  result = s3_do(c, &q, &r, errbuf, errlen);
out:
  s3_resp_free(&r);
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
  s3_req q = s3_req_init("AbortMultipartUpload", "DELETE", key);
  q.query = q_str.p;
  result = s3_do(c, &q, &r, errbuf, errlen);
  if (result == CTRAIN_E_NOTFOUND)
    result = CTRAIN_OK;
out:
  s3_resp_free(&r);
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
  s3_req q = s3_req_init("CreateMultipartUpload", "POST", u->key);
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
  s3_resp_free(&r);
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
  if ((result = s3_hash_range(fd, off, len, phex, u->parts[i].checksum, whole)))
    CTRAIN_FAIL(result, "s3: UploadPart %s: reading the source file failed", u->what);
  s3_req q = s3_req_init("UploadPart", "PUT", u->key);
  q.query = q_str.p;
  q.in_fd = fd;
  q.in_off = off;
  q.in_len = len;
  q.payload_hash = body_hash(c, phex);
  q.checksum_b64 = c->no_checksum ? NULL : u->parts[i].checksum;
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  snprintf(u->parts[i].etag, sizeof(u->parts[i].etag), "%s", r.hd.etag);
  if (!u->parts[i].etag[0])
    CTRAIN_FAIL(CTRAIN_E_HTTP, "s3: UploadPart %s: part %lld answered without an ETag", u->what,
                (long long)i + 1);
out:
  s3_resp_free(&r);
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
  s3_req q = s3_req_init("CompleteMultipartUpload", "POST", u->key);
  q.query = q_str.p;
  q.mem = xml.p;
  q.mem_len = xml.len;
  q.payload_hash = xhex;
  q.work_bytes = size; /* S3 may take minutes to assemble a large object */
  result = s3_do(c, &q, &r, errbuf, errlen);
  if (!result) {
    /* S3 may answer 200 and put the error in the body. */
    if (r.body.len && s3_xml_text(r.body.p, r.body.len, "Code", NULL, code, sizeof(code)) == 1) {
      char ecode[520], emsg[2060];
      s3_xml_text(r.body.p, r.body.len, "Message", NULL, msg, sizeof(msg));
      CTRAIN_FAIL(CTRAIN_E_HTTP, "s3: CompleteMultipartUpload %s: %s: %s", u->what,
                  s3_escape(code, strlen(code), ecode, sizeof(ecode)),
                  s3_escape(msg, strlen(msg), emsg, sizeof(emsg)));
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
  s3_resp_free(&r);
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
  if ((result = s3_full_key(c, name, &key, errbuf, errlen)))
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

ctrain_err s3_put_source(s3_client *c, const char *name, const s3_source *src, char *sha256_hex,
                         char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  s3_resp r = {0};
  unsigned char sum[32];
  char hex[65];
  if ((result = s3_full_key(c, name, &key, errbuf, errlen)))
    goto out;
  if (src->size < 0 || src->size > (int64_t)c->threshold)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "s3: PUT %s://%s/%s: %lld bytes is over the single-PUT limit",
                c->loc.scheme, c->loc.bucket, key.p, (long long)src->size);
  s3_req q = s3_req_init("PUT", "PUT", key.p);
  q.src = src;
  q.in_len = src->size;
  if (c->no_checksum) {
    /* The signature covers the body's hash: it is needed before sending. */
    if ((result = src->sha256(src->arg, sum)))
      CTRAIN_FAIL(result, "s3: PUT %s://%s/%s: hashing the source failed", c->loc.scheme,
                  c->loc.bucket, key.p);
    s3_hex32(sum, hex);
    q.payload_hash = hex;
  } else {
    q.payload_hash = S3_STREAMING_TRAILER;
    q.trailer = 1;
  }
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  if (sha256_hex) {
    if ((result = src->sha256(src->arg, sum)))
      CTRAIN_FAIL(result, "s3: PUT %s://%s/%s: hashing the source failed", c->loc.scheme,
                  c->loc.bucket, key.p);
    s3_hex32(sum, sha256_hex);
  }
out:
  s3_resp_free(&r);
  ctrain_buf_free(&key);
  return result;
}

ctrain_err s3_get_fd(s3_client *c, const char *name, int fd, int64_t size, s3_object *info,
                     char *sha256_hex, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  s3_resp r = {0};
  off_t start;
  if ((result = s3_full_key(c, name, &key, errbuf, errlen)))
    goto out;
  if ((start = lseek(fd, 0, SEEK_CUR)) < 0)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "s3: GET %s://%s/%s: the output is not seekable", c->loc.scheme,
                c->loc.bucket, key.p);
  s3_req q = s3_req_init("GET", "GET", key.p);
  q.out_fd = fd;
  q.out_off = (int64_t)start;
  q.out_size = size >= 0 ? size : -1;
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  if (info) {
    memset(info, 0, sizeof(*info));
    snprintf(info->name, sizeof(info->name), "%s", name);
    info->size = r.written;
    snprintf(info->etag, sizeof(info->etag), "%s", r.hd.etag);
    snprintf(info->last_modified, sizeof(info->last_modified), "%s", r.hd.last_modified);
  }
  if (sha256_hex)
    s3_hex32(r.digest, sha256_hex);
out:
  s3_resp_free(&r);
  ctrain_buf_free(&key);
  return result;
}

ctrain_err s3_head(s3_client *c, const char *name, s3_object *info, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  s3_resp r = {0};
  if ((result = s3_full_key(c, name, &key, errbuf, errlen)))
    goto out;
  s3_req q = s3_req_init("HEAD", "HEAD", key.p);
  q.head = 1;
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  memset(info, 0, sizeof(*info));
  snprintf(info->name, sizeof(info->name), "%s", name);
  info->size = r.hd.content_length;
  snprintf(info->etag, sizeof(info->etag), "%s", r.hd.etag);
  snprintf(info->last_modified, sizeof(info->last_modified), "%s", r.hd.last_modified);
out:
  s3_resp_free(&r);
  ctrain_buf_free(&key);
  return result;
}

ctrain_err s3_copy(s3_client *c, const char *name, const char *to, int64_t size, char *errbuf,
                   size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf src, dst, source;
  s3_resp r = {0};
  char code[128] = "", msg[512] = "", ecode[520], emsg[2060];
  ctrain_buf_init(&source, 8192);
  ctrain_buf_init(&src, 0);
  ctrain_buf_init(&dst, 0);
  if ((result = s3_full_key(c, name, &src, errbuf, errlen)) ||
      (result = s3_full_key(c, to, &dst, errbuf, errlen)))
    goto out;
  if ((result = ctrain_buf_printf(&source, "/%s/", c->loc.bucket)) ||
      (result = s3_uri_encode(&source, src.p, src.len, 1)))
    CTRAIN_FAIL(result, "s3: CopyObject: source key too long");
  s3_req q = s3_req_init("CopyObject", "PUT", dst.p);
  q.mem = "";
  q.mem_len = 0;
  q.payload_hash = S3_EMPTY_SHA256;
  q.extra_name = "x-amz-copy-source";
  q.extra_value = source.p;
  q.work_bytes = size >= 0 ? size : (int64_t)5 << 30; /* a server-side copy of up to 5 GiB */
  if ((result = s3_do(c, &q, &r, errbuf, errlen)))
    goto out;
  /* As CompleteMultipartUpload, a copy may answer 200 with the error in the body. */
  if (r.body.len && s3_xml_text(r.body.p, r.body.len, "Code", NULL, code, sizeof(code)) == 1) {
    s3_xml_text(r.body.p, r.body.len, "Message", NULL, msg, sizeof(msg));
    CTRAIN_FAIL(CTRAIN_E_HTTP, "s3: CopyObject %s://%s/%s: %s: %s", c->loc.scheme, c->loc.bucket,
                dst.p, s3_escape(code, strlen(code), ecode, sizeof(ecode)),
                s3_escape(msg, strlen(msg), emsg, sizeof(emsg)));
  }
  if (size >= 0) {
    s3_object info;
    if ((result = s3_head(c, to, &info, errbuf, errlen)))
      goto out;
    if (info.size != size)
      CTRAIN_FAIL(CTRAIN_E_HTTP, "s3: CopyObject %s://%s/%s: the copy holds %lld bytes, not %lld",
                  c->loc.scheme, c->loc.bucket, dst.p, (long long)info.size, (long long)size);
  }
out:
  s3_resp_free(&r);
  ctrain_buf_free(&src);
  ctrain_buf_free(&dst);
  ctrain_buf_free(&source);
  return result;
}

ctrain_err s3_delete(s3_client *c, const char *name, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  s3_resp r = {0};
  if ((result = s3_full_key(c, name, &key, errbuf, errlen)))
    goto out;
  s3_req q = s3_req_init("DELETE", "DELETE", key.p);
  result = s3_do(c, &q, &r, errbuf, errlen);
  if (result == CTRAIN_E_NOTFOUND) /* some stores answer 404 NoSuchKey: already gone */
    result = CTRAIN_OK;
out:
  s3_resp_free(&r);
  ctrain_buf_free(&key);
  return result;
}

ctrain_err s3_abort_upload(s3_client *c, const char *name, const char *upload_id, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf key;
  if ((result = s3_full_key(c, name, &key, errbuf, errlen)))
    goto out;
  if (!upload_id || !*upload_id)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "s3: AbortMultipartUpload: an upload id is required");
  result = abort_key(c, key.p, upload_id, errbuf, errlen);
out:
  ctrain_buf_free(&key);
  return result;
}
