/* stream_cache.c - the objects' local cache (stream.h): DIR/<sha256 of
 * the URI>.data and its sidecar .meta ("URI\nSIZE\nETAG\nSHA256\n"),
 * written under temporary names and renamed, data first, so an entry
 * without its sidecar is never used. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/data/stream_impl.h"

#include "ctrain/thread.h"

#define CACHE_META_MAX 4096

struct stream_cache_fill {
  char data[4096], meta[4096], tmp[4120];
  char uri[2048];
  int fd;
  EVP_MD_CTX *md;
};

/* Entries whose bytes this process has hashed (each is hashed once; a
 * file replaced since, another inode or mtime, is hashed again). */
typedef struct verified {
  struct verified *next;
  ino_t ino;
  struct timespec mtime;
  char path[];
} verified;

static verified *verified_list;
static pthread_mutex_t verified_mu = PTHREAD_MUTEX_INITIALIZER;

static int same(const verified *v, const char *path, const struct stat *st) {
  return v->ino == st->st_ino && v->mtime.tv_sec == st->st_mtim.tv_sec &&
         v->mtime.tv_nsec == st->st_mtim.tv_nsec && !strcmp(v->path, path);
}

static int was_verified(const char *path, const struct stat *st) {
  int hit = 0;
  ctrain_mutex_lock(&verified_mu);
  for (verified *v = verified_list; v && !hit; v = v->next)
    hit = same(v, path, st);
  ctrain_mutex_unlock(&verified_mu);
  return hit;
}

static void mark_verified(const char *path) {
  struct stat st;
  verified *v = stat(path, &st) ? NULL : malloc(sizeof(*v) + strlen(path) + 1);
  if (!v)
    return; /* hashed again next time */
  strcpy(v->path, path);
  v->ino = st.st_ino;
  v->mtime = st.st_mtim;
  ctrain_mutex_lock(&verified_mu);
  v->next = verified_list;
  verified_list = v;
  ctrain_mutex_unlock(&verified_mu);
}

static void hex(const uint8_t *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++)
    sprintf(out + 2 * i, "%02x", b[i]);
}

/* The entry's two paths. */
static void entry_paths(const char *dir, const char *uri, char *data, char *meta, size_t n) {
  uint8_t d[32];
  unsigned dl = 0;
  char h[65];
  EVP_Digest(uri, strlen(uri), d, &dl, EVP_sha256(), NULL);
  hex(d, 32, h);
  snprintf(data, n, "%s/%s.data", dir, h);
  snprintf(meta, n, "%s/%s.meta", dir, h);
}

/* SHA-256 of the file at path, hex; 0 on a read failure. */
static int file_sha256(const char *path, char out[65]) {
  uint8_t buf[1 << 16], d[32];
  unsigned dl = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC), ok = fd >= 0;
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  ok = ok && md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1;
  for (ssize_t r = 1; ok && r > 0;) {
    r = read(fd, buf, sizeof(buf));
    ok = r >= 0 && EVP_DigestUpdate(md, buf, (size_t)r) == 1;
  }
  ok = ok && EVP_DigestFinal_ex(md, d, &dl) == 1;
  if (ok)
    hex(d, 32, out);
  EVP_MD_CTX_free(md);
  if (fd >= 0)
    close(fd);
  return ok;
}

/* Whether the entry (data, meta) is the object (uri, size, etag). */
static int entry_good(const char *data, const char *meta, const char *uri, int64_t size,
                      const char *etag) {
  char text[CACHE_META_MAX + 1], want[CACHE_META_MAX], sum[65];
  struct stat st;
  FILE *m = fopen(meta, "r");
  size_t n = m ? fread(text, 1, CACHE_META_MAX, m) : 0;
  if (m)
    fclose(m);
  text[n] = 0;
  int k = snprintf(want, sizeof(want), "%s\n%lld\n%s\n", uri, (long long)size, etag);
  if (!n || k >= (int)sizeof(want) || strncmp(text, want, (size_t)k) || n != (size_t)k + 65 ||
      text[k + 64] != '\n')
    return 0;
  if (stat(data, &st) || !S_ISREG(st.st_mode) || st.st_size != size)
    return 0;
  if (was_verified(data, &st))
    return 1;
  if (!file_sha256(data, sum) || memcmp(sum, text + k, 64))
    return 0;
  mark_verified(data);
  return 1;
}

ctrain_err stream_cache_lookup(const char *dir, const char *uri, int64_t size, const char *etag,
                               char **path, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char data[4096], meta[4096];
  *path = NULL;
  entry_paths(dir, uri, data, meta, sizeof(data));
  if (access(meta, F_OK) && access(data, F_OK))
    goto out;
  if (!entry_good(data, meta, uri, size, etag)) {
    unlink(meta); /* the sidecar first: never a sidecar without its data */
    unlink(data);
    goto out;
  }
  *path = strdup(data);
  if (!*path)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", uri);
out:
  return result;
}

ctrain_err stream_cache_begin(const char *dir, const char *uri, stream_cache_fill **out,
                              char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  static unsigned long seq;
  stream_cache_fill *cf = calloc(1, sizeof(*cf));
  *out = NULL;
  if (!cf)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", uri);
  cf->fd = -1;
  entry_paths(dir, uri, cf->data, cf->meta, sizeof(cf->data));
  snprintf(cf->uri, sizeof(cf->uri), "%s", uri);
  snprintf(cf->tmp, sizeof(cf->tmp), "%s.tmp.%ld.%lu", cf->data, (long)getpid(),
           __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
  if (mkdir(dir, 0755) && errno != EEXIST)
    CTRAIN_FAIL(CTRAIN_E_IO, "cache %s: cannot create the directory: %s", dir, strerror(errno));
  cf->fd = open(cf->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (cf->fd < 0)
    CTRAIN_FAIL(CTRAIN_E_IO, "cache %s: %s", cf->tmp, strerror(errno));
  cf->md = EVP_MD_CTX_new();
  if (!cf->md || EVP_DigestInit_ex(cf->md, EVP_sha256(), NULL) != 1)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "cache %s: SHA-256 init failed", cf->tmp);
  *out = cf;
  cf = NULL;
out:
  if (cf) /* commit 0 only removes the temporary file: it cannot fail */
    ctrain_ignore(stream_cache_end(cf, 0, 0, "", NULL, 0));
  return result;
}

ctrain_err stream_cache_write(stream_cache_fill *cf, const void *buf, size_t n, char *errbuf,
                              size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const uint8_t *p = buf;
  for (size_t done = 0; done < n;) {
    ssize_t w = write(cf->fd, p + done, n - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      CTRAIN_FAIL(errno == ENOSPC ? CTRAIN_E_NOSPACE : CTRAIN_E_IO, "cache %s: write: %s", cf->tmp,
                  strerror(errno));
    done += (size_t)w;
  }
  if (EVP_DigestUpdate(cf->md, buf, n) != 1)
    CTRAIN_FAIL(CTRAIN_E_IO, "cache %s: SHA-256 failed", cf->tmp);
out:
  return result;
}

/* The sidecar under a temporary name, then both renamed. */
static ctrain_err commit(stream_cache_fill *cf, int64_t size, const char *etag, char *errbuf,
                         size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t d[32];
  unsigned dl = 0;
  char sum[65], mtmp[4200];
  FILE *m = NULL;
  if (EVP_DigestFinal_ex(cf->md, d, &dl) != 1)
    CTRAIN_FAIL(CTRAIN_E_IO, "cache %s: SHA-256 failed", cf->tmp);
  hex(d, 32, sum);
  if (fsync(cf->fd) || close(cf->fd)) {
    cf->fd = -1;
    CTRAIN_FAIL(CTRAIN_E_IO, "cache %s: %s", cf->tmp, strerror(errno));
  }
  cf->fd = -1;
  snprintf(mtmp, sizeof(mtmp), "%s.meta", cf->tmp);
  m = fopen(mtmp, "w");
  if (!m || fprintf(m, "%s\n%lld\n%s\n%s\n", cf->uri, (long long)size, etag, sum) < 0 ||
      fclose(m)) {
    m = NULL;
    unlink(mtmp);
    CTRAIN_FAIL(CTRAIN_E_IO, "cache %s: %s", mtmp, strerror(errno));
  }
  if (rename(cf->tmp, cf->data) || rename(mtmp, cf->meta)) {
    unlink(mtmp);
    CTRAIN_FAIL(CTRAIN_E_IO, "cache %s: rename: %s", cf->data, strerror(errno));
  }
  mark_verified(cf->data);
out:
  return result;
}

ctrain_err stream_cache_end(stream_cache_fill *cf, int done, int64_t size, const char *etag,
                            char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (!cf)
    return CTRAIN_OK;
  if (done)
    result = commit(cf, size, etag, errbuf, errlen);
  if (cf->fd >= 0)
    close(cf->fd);
  unlink(cf->tmp); /* gone already when committed */
  EVP_MD_CTX_free(cf->md);
  free(cf);
  return result;
}
