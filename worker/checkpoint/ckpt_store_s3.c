/* ckpt_store_s3.c - backups in object storage; see ckpt_store_s3.h. */
#include "worker/checkpoint/ckpt_store_s3.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctrain/buf.h"
#include "ctrain/clock.h"
#include "ctrain/log.h"

typedef struct {
  ckpt_store base;
  s3_client *c;
  size_t threshold; /* the client's multipart threshold */
} s3_store;

static s3_client *client_of(ckpt_store *s) {
  return ((s3_store *)s)->c;
}

/* What an S3 failure means for the worker: a permanent refusal stays
 * CTRAIN_E_CONFIG (78), as does any other answer that no retry changes
 * (an unexpected status, a certificate that does not verify); a transient
 * failure that outlasted the retries is CTRAIN_E_NET (75). */
static ctrain_err s3_outcome(ckpt_store *s, ctrain_err r) {
  if (r == CTRAIN_OK || r == CTRAIN_E_NOMEM || r == CTRAIN_E_NOTFOUND)
    return r;
  if (s3_client_last_retryable(client_of(s)))
    return CTRAIN_E_NET;
  if (r == CTRAIN_E_HTTP || r == CTRAIN_E_TLS || r == CTRAIN_E_INVAL)
    return CTRAIN_E_CONFIG;
  return r;
}

/* An unlinked staging file in TMPDIR (else /tmp): nothing is left behind
 * whatever happens to the process. -1 with errbuf on failure. */
static int staging_file(char *errbuf, size_t errlen) {
  const char *tmp = getenv("TMPDIR");
  char path[4096];
  if (!tmp || !*tmp)
    tmp = "/tmp";
  snprintf(path, sizeof(path), "%s/ctrain-backup-XXXXXX", tmp);
  int fd = mkstemp(path);
  if (fd < 0) {
    snprintf(errbuf, errlen, "backup: staging file in %s: %s", tmp, strerror(errno));
    return -1;
  }
  unlink(path);
  return fd;
}

static ctrain_err s3s_list(ckpt_store *s, ckpt_entry **out, size_t *n, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s3_object_list l = {0};
  ckpt_entry *v = NULL;
  size_t cnt = 0, cap = 0;
  char why[1024];
  *out = NULL;
  *n = 0;
  result = s3_list(client_of(s), "backup-", &l, why, sizeof(why));
  if (result)
    CTRAIN_FAIL(s3_outcome(s, result), "--backup-uri %s: %s", s->base, why);
  for (size_t i = 0; i < l.n; i++) {
    uint64_t step;
    if (!ckpt_parse_backup_name(l.items[i].name, &step))
      continue;
    if (ctrain_grow(&v, &cap, cnt + 1, sizeof(*v), 16, 0))
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "--backup-uri %s: out of memory", s->base);
    v[cnt].step = step;
    v[cnt].size = l.items[i].size;
    memcpy(v[cnt].name, l.items[i].name, strlen(l.items[i].name) + 1);
    cnt++;
  }
  *out = v;
  *n = cnt;
  v = NULL;
out:
  s3_object_list_free(&l);
  free(v);
  return result;
}

static ctrain_err image_pread(void *arg, int64_t off, void *buf, size_t len, size_t *got) {
  return ckpt_image_pread(arg, (uint64_t)off, buf, len, got);
}

static ctrain_err image_sha256(void *arg, unsigned char out[32]) {
  return ckpt_image_sha256(arg, out);
}

/* A backup up to the multipart threshold goes up straight from the state's
 * arrays (ckpt_image: no staging copy, hashed beside the send, the store's
 * checksum in the trailer); a larger one is staged in a local file and
 * uploaded multipart, each part hashed before it is sent. */
static ctrain_err s3s_write(ckpt_store *s, const char *name, const ckpt_state *st, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char what[1200], why[1024], hex[65];
  uint8_t digest[CKPT_HASH_BYTES];
  int fd = -1;
  ckpt_image *im = NULL;
  uint64_t size = ckpt_file_size(st);
  ckpt_store_path(s, name, what, sizeof(what));
  double t0 = ctrain_mono_s();
  if (size && size <= ((s3_store *)s)->threshold) {
    if ((result = ckpt_image_open(st, &im, why, sizeof(why))))
      CTRAIN_FAIL(result, "%s: %s", what, why);
    LOG_INFO("backup: uploading %s (%llu bytes)", what, (unsigned long long)size);
    s3_source src = {
        .size = (int64_t)size, .pread = image_pread, .sha256 = image_sha256, .arg = im};
    result = s3_put_source(client_of(s), name, &src, hex, why, sizeof(why));
  } else {
    fd = staging_file(errbuf, errlen);
    if (fd < 0) {
      result = CTRAIN_E_IO;
      goto out;
    }
    result = ckpt_write_fd(fd, "backup staging file", st, digest, why, sizeof(why));
    if (result)
      CTRAIN_FAIL(result, "%s: %s", what, why);
    LOG_INFO("backup: uploading %s (%llu bytes)", what, (unsigned long long)size);
    result = s3_put_fd_hashed(client_of(s), name, fd, digest, hex, why, sizeof(why));
  }
  if (result)
    CTRAIN_FAIL(s3_outcome(s, result), "--backup-uri: %s", why);
  LOG_DEBUG("backup: uploaded %s in %.3f s (sha256 %s)", what, ctrain_mono_s() - t0, hex);
out:
  ckpt_image_free(im);
  if (fd >= 0)
    close(fd);
  return result;
}

/* A read that fails in any way (short, too large, past its deadline, the
 * store unreachable, after the client's retries) stops the restore (75);
 * only damage seen in a whole object is CTRAIN_E_CORRUPT: the store's own
 * checksum disagreeing with every attempt's bytes, or our header and
 * SHA-256 (ckpt_read_fd) on exactly the bytes the listing promised. */
static ctrain_err s3s_read(ckpt_store *s, const ckpt_entry *e, ckpt_state *out, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char why[1024];
  int fd = -1;
  memset(out, 0, sizeof(*out));
  fd = staging_file(errbuf, errlen);
  if (fd < 0) {
    result = CTRAIN_E_IO;
    goto out;
  }
  result = s3_get_fd(client_of(s), e->name, fd, e->size, NULL, NULL, why, sizeof(why));
  /* CTRAIN_E_CORRUPT: the store's own SHA-256 disagrees with its bytes. */
  if (result)
    CTRAIN_FAIL(result == CTRAIN_E_CORRUPT ? result : s3_outcome(s, result), "%s", why);
  if (lseek(fd, 0, SEEK_SET) < 0)
    CTRAIN_FAIL(CTRAIN_E_IO, "backup staging file: lseek: %s", strerror(errno));
  result = ckpt_read_fd(fd, out, errbuf, errlen);
  /* The staging file is ours: any failure but damage and memory is ours too. */
  if (result && result != CTRAIN_E_CORRUPT && result != CTRAIN_E_NOMEM &&
      result != CTRAIN_E_UNSUPPORTED)
    result = CTRAIN_E_IO;
out:
  if (fd >= 0)
    close(fd);
  return result;
}

static ctrain_err s3s_remove(ckpt_store *s, const char *name, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char why[1024];
  result = s3_delete(client_of(s), name, why, sizeof(why));
  if (result)
    CTRAIN_FAIL(s3_outcome(s, result), "--backup-uri: %s", why);
out:
  return result;
}

/* Quarantined, never destroyed: copied inside the bucket to
 * <name>.corrupt-<UTC time> (a name no listing of backups takes, and no
 * later save of the same step overwrites), and deleted only once the copy
 * holds all its bytes. When the copy fails (an object over CopyObject's
 * 5 GiB, a store that refuses) it stays where it is and the warning says
 * so: the restore goes on to the previous backup either way. */
static ctrain_err s3s_discard(ckpt_store *s, const ckpt_entry *e, char *how, size_t how_len) {
  char why[1024], aside[CKPT_NAME_BYTES + 40], stamp[20];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
  snprintf(aside, sizeof(aside), "%s.corrupt-%s", e->name, stamp);
  ctrain_err r = s3_copy(client_of(s), e->name, aside, e->size, why, sizeof(why));
  if (r) {
    snprintf(how, how_len, "left in place: the copy aside failed: %s", why);
    return s3_outcome(s, r);
  }
  r = s3_delete(client_of(s), e->name, why, sizeof(why));
  if (r) {
    snprintf(how, how_len, "copied aside to %s/%s, the original left in place: %s", s->base, aside,
             why);
    return s3_outcome(s, r);
  }
  snprintf(how, how_len, "quarantined: moved aside to %s/%s", s->base, aside);
  return CTRAIN_OK;
}

/* Unfinished multipart uploads under the prefix: a chief killed mid-upload
 * leaves one, whose parts cost storage and are never visible. */
static ctrain_err s3s_clean(ckpt_store *s, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s3_upload_list l = {0};
  char why[1024];
  result = s3_list_uploads(client_of(s), "backup-", &l, why, sizeof(why));
  if (result)
    CTRAIN_FAIL(s3_outcome(s, result), "--backup-uri %s: %s", s->base, why);
  for (size_t i = 0; i < l.n; i++) {
    result = s3_abort_upload(client_of(s), l.items[i].name, l.items[i].upload_id, why, sizeof(why));
    if (result)
      CTRAIN_FAIL(s3_outcome(s, result), "--backup-uri %s: %s", s->base, why);
    char name[1100], started[100];
    LOG_INFO(
        "backup: aborted an unfinished upload of %s/%s (started %s), left by an "
        "interrupted save",
        s->base, s3_escape(l.items[i].name, strlen(l.items[i].name), name, sizeof(name)),
        s3_escape(l.items[i].initiated, strlen(l.items[i].initiated), started, sizeof(started)));
  }
out:
  s3_upload_list_free(&l);
  return result;
}

static void s3s_free(ckpt_store *s) {
  s3_client_free(client_of(s));
  free(s);
}

static const ckpt_store_ops s3_ops = {.list = s3s_list,
                                      .write = s3s_write,
                                      .read = s3s_read,
                                      .remove = s3s_remove,
                                      .discard = s3s_discard,
                                      .clean = s3s_clean,
                                      .sync = NULL,
                                      .free = s3s_free};

ctrain_err ckpt_store_open_s3(const s3_options *opt, ckpt_store **out, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s3_store *ss = NULL;
  char why[1024];
  *out = NULL;
  ss = calloc(1, sizeof(*ss));
  if (!ss)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "--backup-uri: out of memory");
  ss->base.ops = &s3_ops;
  ss->base.flag = "--backup-uri";
  s3_options o = *opt;
  if (!o.multipart_threshold)
    o.multipart_threshold = CKPT_S3_MULTIPART_THRESHOLD;
  ss->threshold = o.multipart_threshold;
  result = s3_client_new(&o, &ss->c, why, sizeof(why));
  if (result)
    CTRAIN_FAIL(result, "--backup-uri %s: %s", opt->uri, why);
  const s3_location *loc = s3_client_location(ss->c);
  int n = snprintf(ss->base.base, sizeof(ss->base.base), "%.2s://%.255s%s%.800s", loc->scheme,
                   loc->bucket, loc->prefix[0] ? "/" : "", loc->prefix);
  if (n < 0 || (size_t)n >= sizeof(ss->base.base))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "--backup-uri %s: prefix too long", opt->uri);
  *out = &ss->base;
  ss = NULL;
out:
  if (ss)
    s3s_free(&ss->base);
  return result;
}
