/* s3_check.c - drives the worker's S3 client (objstore/, ctrain/s3.h) from
 * tests/integration/test_s3.py against a real S3-compatible server.
 *
 *   s3_check [options] URI put NAME FILE    prints "sha256 HEX"
 *   s3_check [options] URI stream NAME FILE the same through s3_put_source (the
 *                                           body from a source, as a backup's)
 *   s3_check [options] URI stream-lie NAME FILE  s3_put_source whose source
 *                                           gives a wrong SHA-256 (one bit off)
 *   s3_check [options] URI get NAME FILE    prints "size N sha256 HEX"
 *   s3_check [options] URI head NAME        prints "size N etag E"
 *   s3_check [options] URI range NAME OFF LEN FILE [ETAG]
 *                                           s3_get_range into memory (If-Match
 *                                           ETAG), the bytes read written to
 *                                           FILE; prints "got N sha256 HEX"
 *   s3_check [options] URI list [PREFIX]    prints "NAME SIZE" per object
 *   s3_check [options] URI delete NAME
 *   s3_check [options] URI uploads [PREFIX] prints "NAME UPLOAD_ID" per unfinished upload
 *   s3_check [options] URI abort NAME UPLOAD_ID
 * options: --endpoint URL --threshold BYTES --part-size BYTES
 *          --max-attempts N --backoff-ms N --max-send BYTES_PER_S --stall-s N
 *          --no-checksum
 * Credentials and region come from the environment as in the worker. Every
 * run ends with "attempts N" on stderr. Exit: 0; 4 for a missing object;
 * 75 when a transient failure outlasted the retries; otherwise
 * ctrain_exit_for_err (78 for a permanent refusal),
 * with the client's message on stderr. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "ctrain/err.h"
#include "ctrain/log.h"
#include "ctrain/s3.h"

#define EXIT_NOTFOUND 4

static int parse_num(const char *s, long long *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || v < 0)
    return -1;
  *out = v;
  return 0;
}

/* The source of `stream`: FILE's bytes; its SHA-256 from a first read
 * (one bit flipped for stream-lie). */
typedef struct {
  int fd, lie;
} file_src;

static ctrain_err src_pread(void *arg, int64_t off, void *buf, size_t len, size_t *got) {
  ssize_t n = pread(((file_src *)arg)->fd, buf, len, (off_t)off);
  if (n < 0)
    return CTRAIN_E_IO;
  *got = (size_t)n;
  return CTRAIN_OK;
}

static ctrain_err src_sha256(void *arg, unsigned char out[32]) {
  file_src *f = arg;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  char buf[65536];
  ssize_t n;
  off_t off = 0;
  if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
    EVP_MD_CTX_free(md);
    return CTRAIN_E_NOMEM;
  }
  while ((n = pread(f->fd, buf, sizeof(buf), off)) > 0) {
    EVP_DigestUpdate(md, buf, (size_t)n);
    off += n;
  }
  EVP_DigestFinal_ex(md, out, NULL);
  EVP_MD_CTX_free(md);
  if (f->lie)
    out[5] ^= 1;
  return n < 0 ? CTRAIN_E_IO : CTRAIN_OK;
}

/* `range`: bytes [off, off+len) of name (If-Match etag, NULL: none) into
 * memory, then into the file `out`; prints what was read and its SHA-256. */
static ctrain_err range_cmd(s3_client *c, char **args, int nargs, char *err, size_t errlen,
                            int *rc) {
  ctrain_err result = CTRAIN_OK;
  long long off = 0, len = 0;
  unsigned char *buf = NULL, digest[32];
  size_t got = 0;
  FILE *f = NULL;
  if (parse_num(args[1], &off) || parse_num(args[2], &len) || len > (long long)S3_RANGE_MAX) {
    *rc = CTRAIN_EXIT_USAGE;
    goto out;
  }
  if (!(buf = malloc(len ? (size_t)len : 1)) || !(f = fopen(args[3], "wb"))) {
    perror(args[3]);
    *rc = CTRAIN_EXIT_USAGE;
    goto out;
  }
  if ((result = s3_get_range(c, args[0], (int64_t)off, (size_t)len, nargs > 4 ? args[4] : NULL, buf,
                             &got, err, errlen)))
    goto out;
  if (fwrite(buf, 1, got, f) != got) {
    *rc = CTRAIN_EXIT_SOFTWARE;
    goto out;
  }
  EVP_Digest(buf, got, digest, NULL, EVP_sha256(), NULL);
  printf("got %zu sha256 ", got);
  for (int k = 0; k < 32; k++)
    printf("%02x", digest[k]);
  printf("\n");
out:
  if (f && fclose(f) && !*rc)
    *rc = CTRAIN_EXIT_SOFTWARE;
  free(buf);
  return result;
}

static int usage(void) {
  fprintf(stderr, "usage: s3_check [options] URI "
                  "put|stream|stream-lie|get|head|range|list|delete|uploads|abort "
                  "ARGS\n");
  return CTRAIN_EXIT_USAGE;
}

int main(int argc, char **argv) {
  s3_options opt = {0};
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    long long v = 0;
    const char *f = argv[i];
    if (strcmp(f, "--no-checksum") == 0) {
      opt.checksum = -1;
      continue;
    }
    if (i + 1 >= argc)
      return usage();
    const char *val = argv[++i];
    if (strcmp(f, "--endpoint") == 0) {
      opt.endpoint = val;
      continue;
    }
    if (parse_num(val, &v))
      return usage();
    if (strcmp(f, "--threshold") == 0)
      opt.multipart_threshold = (size_t)v;
    else if (strcmp(f, "--part-size") == 0)
      opt.part_size = (size_t)v;
    else if (strcmp(f, "--max-attempts") == 0)
      opt.max_attempts = (int)v;
    else if (strcmp(f, "--backoff-ms") == 0)
      opt.backoff_base_ms = (long)v;
    else if (strcmp(f, "--max-send") == 0)
      opt.max_send_bytes_per_s = v;
    else if (strcmp(f, "--stall-s") == 0)
      opt.stall_timeout_s = (long)v;
    else
      return usage();
  }
  if (argc - i < 2)
    return usage();
  opt.uri = argv[i];
  const char *cmd = argv[i + 1];
  char **args = argv + i + 2;
  int nargs = argc - i - 2;

  ctrain_log_init("s3_check", CTRAIN_LOG_INFO, CTRAIN_LOG_TEXT);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  ctrain_err result = CTRAIN_OK;
  s3_client *c = NULL;
  s3_object_list list = {0};
  s3_upload_list uploads = {0};
  char err[2048] = "", hex[65];
  int fd = -1, rc = 0;
  if ((result = s3_client_new(&opt, &c, err, sizeof err)))
    goto out;
  if (strcmp(cmd, "put") == 0 && nargs == 2) {
    if ((fd = open(args[1], O_RDONLY | O_CLOEXEC)) < 0) {
      perror(args[1]);
      rc = CTRAIN_EXIT_USAGE;
      goto out;
    }
    if (!(result = s3_put_fd(c, args[0], fd, hex, err, sizeof err)))
      printf("sha256 %s\n", hex);
  } else if ((strcmp(cmd, "stream") == 0 || strcmp(cmd, "stream-lie") == 0) && nargs == 2) {
    if ((fd = open(args[1], O_RDONLY | O_CLOEXEC)) < 0) {
      perror(args[1]);
      rc = CTRAIN_EXIT_USAGE;
      goto out;
    }
    file_src f = {.fd = fd, .lie = strcmp(cmd, "stream-lie") == 0};
    s3_source src = {.size = (int64_t)lseek(fd, 0, SEEK_END),
                     .pread = src_pread,
                     .sha256 = src_sha256,
                     .arg = &f};
    if (!(result = s3_put_source(c, args[0], &src, hex, err, sizeof err)))
      printf("sha256 %s\n", hex);
  } else if (strcmp(cmd, "get") == 0 && nargs == 2) {
    s3_object info;
    if ((fd = open(args[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
      perror(args[1]);
      rc = CTRAIN_EXIT_USAGE;
      goto out;
    }
    if (!(result = s3_get_fd(c, args[0], fd, -1, &info, hex, err, sizeof err)))
      printf("size %lld sha256 %s\n", (long long)info.size, hex);
  } else if (strcmp(cmd, "head") == 0 && nargs == 1) {
    s3_object info;
    if (!(result = s3_head(c, args[0], &info, err, sizeof err)))
      printf("size %lld etag %s\n", (long long)info.size, info.etag);
  } else if (strcmp(cmd, "range") == 0 && (nargs == 4 || nargs == 5)) {
    result = range_cmd(c, args, nargs, err, sizeof err, &rc);
  } else if (strcmp(cmd, "list") == 0 && nargs <= 1) {
    if (!(result = s3_list(c, nargs ? args[0] : "", &list, err, sizeof err)))
      for (size_t k = 0; k < list.n; k++)
        printf("%s %lld\n", list.items[k].name, (long long)list.items[k].size);
  } else if (strcmp(cmd, "delete") == 0 && nargs == 1) {
    result = s3_delete(c, args[0], err, sizeof err);
  } else if (strcmp(cmd, "uploads") == 0 && nargs <= 1) {
    if (!(result = s3_list_uploads(c, nargs ? args[0] : "", &uploads, err, sizeof err)))
      for (size_t k = 0; k < uploads.n; k++)
        printf("%s %s\n", uploads.items[k].name, uploads.items[k].upload_id);
  } else if (strcmp(cmd, "abort") == 0 && nargs == 2) {
    result = s3_abort_upload(c, args[0], args[1], err, sizeof err);
  } else {
    rc = usage();
  }
out:
  if (c)
    fprintf(stderr, "attempts %d\n", s3_client_last_attempts(c));
  if (result) {
    fprintf(stderr, "error: %s: %s\n", ctrain_strerror(result), err);
    rc = result == CTRAIN_E_NOTFOUND        ? EXIT_NOTFOUND
         : c && s3_client_last_retryable(c) ? CTRAIN_EXIT_TEMPFAIL
                                            : ctrain_exit_for_err(result);
  }
  if (fd >= 0 && close(fd) && !rc)
    rc = CTRAIN_EXIT_SOFTWARE;
  s3_object_list_free(&list);
  s3_upload_list_free(&uploads);
  s3_client_free(c);
  curl_global_cleanup();
  return rc;
}
