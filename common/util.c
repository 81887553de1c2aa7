/* util.c - small helpers both programs and the node agent use; see ctrain/util.h. */
#include "ctrain/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/buf.h"

ctrain_err ctrain_errf(ctrain_err code, char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

ctrain_err ctrain_read_file(const char *path, size_t cap, char **out, size_t *len, char *err,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf b;
  ctrain_buf_init(&b, cap);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    result = ctrain_errf(CTRAIN_E_IO, err, errlen, "open %s: %s", path, strerror(errno));
    goto out;
  }
  for (;;) {
    /* Room for one more byte than the cap allows, so a file of exactly
     * `cap` bytes reads to EOF and a larger one is seen as larger. */
    size_t want = b.cap - b.len >= 4096 ? 4096 : b.cap - b.len;
    if ((result = ctrain_buf_reserve(&b, want)))
      goto out;
    ssize_t r = read(fd, b.p + b.len, (want ? want : 1));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      result = ctrain_errf(CTRAIN_E_IO, err, errlen, "read %s: %s", path, strerror(errno));
      goto out;
    }
    if (r == 0)
      break;
    if ((size_t)r > want) {
      result = ctrain_errf(CTRAIN_E_TOOBIG, err, errlen, "%s is larger than %zu bytes", path, cap);
      goto out;
    }
    b.len += (size_t)r;
    b.p[b.len] = '\0';
  }
  if (!(*out = ctrain_buf_take(&b, len)))
    result = CTRAIN_E_NOMEM;
out:
  if (fd >= 0)
    close(fd);
  ctrain_buf_free(&b);
  return result;
}

static int b64_val(unsigned char c) {
  if (c >= 'A' && c <= 'Z')
    return c - 'A';
  if (c >= 'a' && c <= 'z')
    return c - 'a' + 26;
  if (c >= '0' && c <= '9')
    return c - '0' + 52;
  if (c == '+' || c == '-')
    return 62;
  if (c == '/' || c == '_')
    return 63;
  return -1;
}

ctrain_err ctrain_b64_decode(const char *in, size_t inlen, char **out, size_t *outlen) {
  char *buf = malloc(inlen / 4 * 3 + 4);
  if (!buf)
    return CTRAIN_E_NOMEM;
  size_t n = 0;
  unsigned acc = 0;
  int bits = 0, pad = 0;
  for (size_t i = 0; i < inlen; i++) {
    unsigned char c = (unsigned char)in[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
      continue;
    if (c == '=') {
      pad++;
      continue;
    }
    int v = b64_val(c);
    if (v < 0 || pad) {
      free(buf);
      return CTRAIN_E_PARSE;
    }
    acc = (acc << 6) | (unsigned)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      buf[n++] = (char)((acc >> bits) & 0xff);
    }
  }
  if (bits >= 6 || pad > 2) {
    free(buf);
    return CTRAIN_E_PARSE;
  }
  buf[n] = '\0';
  *out = buf;
  *outlen = n;
  return CTRAIN_OK;
}

char *ctrain_escape_ctl(const char *in, char *out, size_t outlen) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  if (!outlen)
    return out;
  for (const unsigned char *p = (const unsigned char *)(in ? in : ""); *p; p++) {
    char e[8];
    size_t n = 0;
    unsigned c = *p;
    if (c == '\n' || c == '\r' || c == '\t') {
      e[n++] = '\\';
      e[n++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
    } else if (c < 0x20 || c == 0x7f || (c == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)) {
      for (int k = 0; k < (c == 0xc2 ? 2 : 1); k++) {
        unsigned b = p[k];
        e[n++] = '\\';
        e[n++] = 'x';
        e[n++] = hex[b >> 4];
        e[n++] = hex[b & 15];
      }
      if (c == 0xc2)
        p++;
    } else {
      e[n++] = (char)c;
    }
    if (o + n >= outlen)
      break;
    memcpy(out + o, e, n);
    o += n;
  }
  out[o] = '\0';
  return out;
}
