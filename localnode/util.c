/* util.c - helpers of ctrain-localnode (see ctrain/lnode_util.h). */
#include "ctrain/lnode_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

ctrain_err lnode_fmt(char *buf, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, cap, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= cap)
    return CTRAIN_E_TOOBIG;
  return CTRAIN_OK;
}

static ctrain_err write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len) {
    ssize_t w = write(fd, p, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return errno == ENOSPC ? CTRAIN_E_NOSPACE : CTRAIN_E_IO;
    p += w;
    len -= (size_t)w;
  }
  return CTRAIN_OK;
}

ctrain_err lnode_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode,
                                   char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char tmp[4096];
  int fd = -1;
  if (lnode_fmt(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid()))
    return ctrain_errf(CTRAIN_E_TOOBIG, err, errlen, "path too long: %s", path);
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) {
    result = ctrain_errf(CTRAIN_E_IO, err, errlen, "open %s: %s", tmp, strerror(errno));
    goto out;
  }
  result = write_all(fd, data, len);
  if (!result && fchmod(fd, mode))
    result = CTRAIN_E_IO;
  if (result) {
    ctrain_errf(result, err, errlen, "write %s: %s", tmp, strerror(errno));
    goto out;
  }
  close(fd);
  fd = -1;
  if (rename(tmp, path)) {
    result = ctrain_errf(CTRAIN_E_IO, err, errlen, "rename %s: %s", path, strerror(errno));
    goto out;
  }
out:
  if (fd >= 0)
    close(fd);
  if (result)
    unlink(tmp);
  return result;
}

ctrain_err lnode_write_file_inplace(const char *path, const void *data, size_t len, mode_t mode,
                                    char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    return ctrain_errf(CTRAIN_E_IO, err, errlen, "open %s: %s", path, strerror(errno));
  result = write_all(fd, data, len);
  if (result)
    ctrain_errf(result, err, errlen, "write %s: %s", path, strerror(errno));
  close(fd);
  return result;
}

ctrain_err lnode_mkdir_p(const char *path, mode_t mode, char *err, size_t errlen) {
  char buf[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(buf))
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "bad directory path '%s'", path);
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0')
      continue;
    char c = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, mode) && errno != EEXIST)
      return ctrain_errf(CTRAIN_E_IO, err, errlen, "mkdir %s: %s", buf, strerror(errno));
    buf[i] = c;
  }
  struct stat st;
  if (stat(path, &st) || !S_ISDIR(st.st_mode))
    return ctrain_errf(CTRAIN_E_IO, err, errlen, "%s is not a directory", path);
  return CTRAIN_OK;
}

static ctrain_err rm_rf_at(int dfd, const char *name, dev_t dev, char *err, size_t errlen) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW))
    return errno == ENOENT
               ? CTRAIN_OK
               : ctrain_errf(CTRAIN_E_IO, err, errlen, "stat %s: %s", name, strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    if (unlinkat(dfd, name, 0) && errno != ENOENT)
      return ctrain_errf(CTRAIN_E_IO, err, errlen, "unlink %s: %s", name, strerror(errno));
    return CTRAIN_OK;
  }
  if (st.st_dev != dev)
    return ctrain_errf(CTRAIN_E_IO, err, errlen, "%s is a mount point; not removed", name);
  ctrain_err result = CTRAIN_OK;
  int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return ctrain_errf(CTRAIN_E_IO, err, errlen, "open %s: %s", name, strerror(errno));
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return ctrain_errf(CTRAIN_E_IO, err, errlen, "opendir %s: %s", name, strerror(errno));
  }
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
      continue;
    result = rm_rf_at(dirfd(d), de->d_name, dev, err, errlen);
    if (result)
      break;
  }
  closedir(d);
  if (!result && unlinkat(dfd, name, AT_REMOVEDIR) && errno != ENOENT)
    result = ctrain_errf(CTRAIN_E_IO, err, errlen, "rmdir %s: %s", name, strerror(errno));
  return result;
}

ctrain_err lnode_rm_rf(const char *path, char *err, size_t errlen) {
  struct stat st;
  if (lstat(path, &st))
    return errno == ENOENT
               ? CTRAIN_OK
               : ctrain_errf(CTRAIN_E_IO, err, errlen, "stat %s: %s", path, strerror(errno));
  return rm_rf_at(AT_FDCWD, path, st.st_dev, err, errlen);
}

void lnode_time_rfc3339(time_t t, char *buf, size_t cap) {
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void lnode_time_micro(const struct timespec *ts, char *buf, size_t cap) {
  struct tm tm;
  char base[32];
  gmtime_r(&ts->tv_sec, &tm);
  strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf(buf, cap, "%s.%06ldZ", base, ts->tv_nsec / 1000);
}

int64_t lnode_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const cJSON *lnode_json_at(const cJSON *obj, const char *path) {
  char key[256];
  const char *p = path;
  while (obj && *p) {
    const char *dot = strchr(p, '.');
    size_t n = dot ? (size_t)(dot - p) : strlen(p);
    if (n >= sizeof(key))
      return NULL;
    memcpy(key, p, n);
    key[n] = '\0';
    obj = cJSON_GetObjectItemCaseSensitive(obj, key);
    p += n;
    if (*p == '.')
      p++;
  }
  return obj;
}

const char *lnode_json_str(const cJSON *obj, const char *path) {
  const cJSON *it = lnode_json_at(obj, path);
  return cJSON_IsString(it) ? it->valuestring : NULL;
}

double lnode_json_num(const cJSON *obj, const char *path, double def) {
  const cJSON *it = lnode_json_at(obj, path);
  return cJSON_IsNumber(it) ? it->valuedouble : def;
}
