/* fileio.c - atomic, link-safe file replacement and appends on shared
 * storage; see ctrain/fileio.h. */
#include "ctrain/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PATH_BYTES 4096

struct ctrain_file {
  int fd;              /* the temp file, O_WRONLY */
  int dirfd;           /* the target's directory: create, rename and fsync there */
  int failed;          /* a write failed: only abort is left */
  size_t name_off;     /* the target's name within path */
  size_t tmp_name_off; /* the temp file's name within tmp */
  char path[PATH_BYTES];
  char tmp[PATH_BYTES];
};

static uint64_t (*g_nonce_next)(void *);
static void *g_nonce_arg;

void ctrain_file_set_nonce_source(uint64_t (*next)(void *arg), void *arg) {
  g_nonce_next = next;
  g_nonce_arg = arg;
}

/* splitmix64: spreads the fallback's weak inputs over all 64 bits. */
static uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t next_nonce(void) {
  static atomic_uint_fast64_t counter;
  uint64_t v;
  if (g_nonce_next)
    return g_nonce_next(g_nonce_arg);
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
    return v;
  /* No entropy yet (early boot): unpredictable enough to dodge a planted
   * name, and O_EXCL makes a collision an EEXIST, never a followed link. */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 20) ^
               (uint64_t)atomic_fetch_add(&counter, 1) ^ (uint64_t)(uintptr_t)&v);
}

static int nospace(int e) {
  return e == ENOSPC || e == EFBIG || e == EDQUOT;
}

static ctrain_err io_code(int e) {
  return nospace(e) ? CTRAIN_E_NOSPACE : CTRAIN_E_IO;
}

/* Offset of the last path component of path; -1 when there is none (empty,
 * ends in '/', or is "." / ".."). */
static long name_offset(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
    return -1;
  return (long)(name - path);
}

ctrain_err ctrain_file_format_temp(const char *path, uint64_t nonce, char *out, size_t outlen) {
  long off = name_offset(path);
  if (off < 0 || (size_t)snprintf(out, outlen, "%.*s.%s.%016llx.tmp", (int)off, path, path + off,
                                  (unsigned long long)nonce) >= outlen)
    return CTRAIN_E_INVAL;
  return CTRAIN_OK;
}

/* Opens the directory holding path (the directory's own path may contain
 * links: it is the operator's choice; only names inside it are guarded). */
static int open_parent(const char *path, size_t name_off) {
  char dir[PATH_BYTES];
  if (name_off == 0)
    snprintf(dir, sizeof(dir), ".");
  else if (name_off == 1)
    snprintf(dir, sizeof(dir), "/");
  else
    snprintf(dir, sizeof(dir), "%.*s", (int)(name_off - 1), path);
  return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

ctrain_err ctrain_file_create(const char *path, ctrain_file **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_file *f = NULL;
  long off = name_offset(path);
  *out = NULL;
  if (off < 0 || strlen(path) >= PATH_BYTES)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "%s: not a usable file path", path);
  f = calloc(1, sizeof(*f));
  if (!f)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", path);
  f->fd = -1;
  f->name_off = (size_t)off;
  memcpy(f->path, path, strlen(path) + 1);
  f->dirfd = open_parent(path, f->name_off);
  if (f->dirfd < 0)
    CTRAIN_FAIL(io_code(errno), "%s: open its directory: %s", path, strerror(errno));
  for (int i = 0; i < CTRAIN_FILE_TEMP_TRIES; i++) {
    if (ctrain_file_format_temp(path, next_nonce(), f->tmp, sizeof(f->tmp)))
      CTRAIN_FAIL(CTRAIN_E_INVAL, "%s: path too long for a temp name", path);
    f->tmp_name_off = (size_t)name_offset(f->tmp);
    /* O_EXCL: a name that exists (a file, or a planted link) is never
     * opened, and O_NOFOLLOW says so twice. */
    f->fd = openat(f->dirfd, f->tmp + f->tmp_name_off,
                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (f->fd >= 0)
      break;
    if (errno != EEXIST)
      CTRAIN_FAIL(io_code(errno), "%s: create: %s", f->tmp, strerror(errno));
  }
  if (f->fd < 0)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: no free temp name after %d tries (last %s exists)", path,
                CTRAIN_FILE_TEMP_TRIES, f->tmp);
  *out = f;
  f = NULL;
out:
  if (f) {
    if (f->dirfd >= 0)
      close(f->dirfd);
    free(f);
  }
  return result;
}

ctrain_err ctrain_file_write(ctrain_file *f, const void *buf, size_t len, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const unsigned char *p = buf;
  if (f->failed)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: write after a failed write", f->tmp);
  while (len > 0) {
    size_t chunk = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
    ssize_t w = write(f->fd, p, chunk);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      f->failed = 1;
      CTRAIN_FAIL(io_code(errno), "%s: write: %s", f->tmp, strerror(errno));
    }
    if (w == 0) {
      f->failed = 1;
      CTRAIN_FAIL(CTRAIN_E_NOSPACE, "%s: write: no progress (disk full?)", f->tmp);
    }
    p += w;
    len -= (size_t)w;
  }
out:
  return result;
}

ctrain_err ctrain_file_writeback(ctrain_file *f, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (f->failed)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: writeback after a failed write", f->tmp);
#ifdef __linux__
  if (sync_file_range(f->fd, 0, 0,
                      SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                          SYNC_FILE_RANGE_WAIT_AFTER) &&
      errno != ENOSYS && errno != EINVAL && errno != ESPIPE) {
    f->failed = 1;
    CTRAIN_FAIL(io_code(errno), "%s: writeback: %s", f->tmp, strerror(errno));
  }
#endif
out:
  return result;
}

const char *ctrain_file_temp_path(const ctrain_file *f) {
  return f->tmp;
}

void ctrain_file_abort(ctrain_file *f) {
  if (!f)
    return;
  if (f->fd >= 0)
    close(f->fd);
  unlinkat(f->dirfd, f->tmp + f->tmp_name_off, 0);
  close(f->dirfd);
  free(f);
}

ctrain_err ctrain_file_commit(ctrain_file *f, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int renamed = 0;
  if (f->failed)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: not committed after a failed write", f->tmp);
  if (fsync(f->fd))
    CTRAIN_FAIL(io_code(errno), "%s: fsync: %s", f->tmp, strerror(errno));
  int rc = close(f->fd);
  f->fd = -1;
  if (rc)
    CTRAIN_FAIL(io_code(errno), "%s: close: %s", f->tmp, strerror(errno));
  /* Both names relative to the one directory we created the temp file in,
   * so a directory swapped meanwhile cannot split them. */
  if (renameat(f->dirfd, f->tmp + f->tmp_name_off, f->dirfd, f->path + f->name_off))
    CTRAIN_FAIL(io_code(errno), "rename %s -> %s: %s", f->tmp, f->path, strerror(errno));
  renamed = 1;
  /* The rename is durable only once the directory entry is. */
  if (fsync(f->dirfd) && errno != EINVAL)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: fsync of its directory: %s", f->path, strerror(errno));
out:
  if (renamed) {
    close(f->dirfd);
    free(f);
  } else {
    ctrain_file_abort(f);
  }
  return result;
}

ctrain_err ctrain_file_save(const char *path, const void *buf, size_t len, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_file *f = NULL;
  result = ctrain_file_create(path, &f, errbuf, errlen);
  if (result)
    goto out;
  result = ctrain_file_write(f, buf, len, errbuf, errlen);
  if (result)
    goto out;
  result = ctrain_file_commit(f, errbuf, errlen);
  f = NULL; /* taken */
out:
  ctrain_file_abort(f);
  return result;
}

ctrain_err ctrain_file_open_append(const char *path, int *fd_out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  struct stat st;
  int fd;
  *fd_out = -1;
  /* O_NONBLOCK: opening a FIFO for writing would wait for a reader. */
  fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: open: %s (symbolic links are not followed)", path,
                strerror(errno));
  if (fd < 0 && errno == ENXIO)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: not a regular file (a FIFO)", path);
  if (fd < 0)
    CTRAIN_FAIL(io_code(errno), "%s: open: %s", path, strerror(errno));
  if (fstat(fd, &st))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: fstat: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: not a regular file", path);
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK))
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: fcntl: %s", path, strerror(errno));
  *fd_out = fd;
  fd = -1;
out:
  if (fd >= 0)
    close(fd);
  return result;
}

ctrain_err ctrain_file_fsync_dir(const char *dir, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: open directory: %s", dir, strerror(errno));
  if (fsync(fd) && errno != EINVAL)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: fsync directory: %s", dir, strerror(errno));
out:
  if (fd >= 0)
    close(fd);
  return result;
}

/* One step of ctrain_mkdir_p: `p` is a prefix of `whole`. */
static ctrain_err mkdir_one(const char *whole, const char *p, mode_t mode, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  struct stat st;
  if (!mkdir(p, mode))
    return CTRAIN_OK;
  int e = errno;
  if (e == EEXIST && stat(p, &st) == 0 && S_ISDIR(st.st_mode))
    return CTRAIN_OK; /* there already, or made by a racing mkdir */
  if (e == EEXIST)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: mkdir %s: exists and is not a directory", whole, p);
  CTRAIN_FAIL(io_code(e), "%s: mkdir %s: %s", whole, p, strerror(e));
out:
  return result;
}

ctrain_err ctrain_mkdir_p(const char *path, mode_t mode, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char p[PATH_BYTES];
  if (!path || !*path || (size_t)snprintf(p, sizeof(p), "%s", path) >= sizeof(p))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "%s: not a usable directory path", path ? path : "(null)");
  /* Each prefix that ends before a '/', then the whole path. */
  for (char *q = p + 1; *q; q++) {
    if (*q != '/' || q[-1] == '/')
      continue;
    *q = '\0';
    result = mkdir_one(path, p, mode, errbuf, errlen);
    *q = '/';
    if (result)
      goto out;
  }
  result = mkdir_one(path, p, mode, errbuf, errlen);
out:
  return result;
}
