/* kube_util.c - private helpers shared by the controller/kube modules. */
#include "kube_util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

ctrain_err kube_errf(ctrain_err code, char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

ctrain_err kube_read_file(const char *path, size_t cap, char **out, size_t *len, char *err,
                          size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char *buf = NULL;
  size_t used = 0, alloc = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    result = kube_errf(CTRAIN_E_IO, err, errlen, "%s: %s", path, strerror(errno));
    goto out;
  }
  for (;;) {
    if (used + 1 >= alloc) {
      size_t want = alloc ? alloc * 2 : 4096;
      if (want > cap + 2)
        want = cap + 2;
      if (used + 1 >= want) {
        result = kube_errf(CTRAIN_E_TOOBIG, err, errlen, "%s: larger than %zu bytes", path, cap);
        goto out;
      }
      char *nb = realloc(buf, want);
      if (!nb) {
        result = CTRAIN_E_NOMEM;
        goto out;
      }
      buf = nb;
      alloc = want;
    }
    ssize_t n = read(fd, buf + used, alloc - used - 1);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      result = kube_errf(CTRAIN_E_IO, err, errlen, "%s: %s", path, strerror(errno));
      goto out;
    }
    if (n == 0)
      break;
    used += (size_t)n;
    if (used > cap) {
      result = kube_errf(CTRAIN_E_TOOBIG, err, errlen, "%s: larger than %zu bytes", path, cap);
      goto out;
    }
  }
  if (!buf) {
    buf = malloc(1);
    if (!buf) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
  }
  buf[used] = '\0';
  *out = buf;
  *len = used;
  buf = NULL;
out:
  if (fd >= 0)
    close(fd);
  free(buf);
  return result;
}

ctrain_err kube_b64_decode(const char *in, size_t inlen, char **out, size_t *outlen) {
  ctrain_err result = CTRAIN_OK;
  char *buf = NULL;
  EVP_ENCODE_CTX *ctx = NULL;
  int n1 = 0, n2 = 0;
  if (inlen > (size_t)INT32_MAX / 2) {
    result = CTRAIN_E_TOOBIG;
    goto out;
  }
  buf = malloc(inlen / 4 * 3 + 8);
  ctx = EVP_ENCODE_CTX_new();
  if (!buf || !ctx) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  EVP_DecodeInit(ctx);
  /* EVP_DecodeUpdate skips whitespace and newlines; -1 means bad input. */
  if (EVP_DecodeUpdate(ctx, (unsigned char *)buf, &n1, (const unsigned char *)in, (int)inlen) < 0 ||
      EVP_DecodeFinal(ctx, (unsigned char *)buf + n1, &n2) < 0) {
    result = CTRAIN_E_PARSE;
    goto out;
  }
  buf[n1 + n2] = '\0';
  *out = buf;
  *outlen = (size_t)(n1 + n2);
  buf = NULL;
out:
  EVP_ENCODE_CTX_free(ctx);
  free(buf);
  return result;
}

int64_t kube_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void kube_sleep_ns(int64_t ns) {
  if (ns <= 0)
    return;
  struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

char *kube_strndup(const char *s, size_t n) {
  return strndup(s, n);
}
