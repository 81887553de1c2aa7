/* fuzz_httpd_request.c - the request parser of ctrain/httpd.h on arbitrary
 * bytes, framed as the server frames them: the head is found within the cap
 * (ctrain_httpd_head_len), parsed in place (ctrain_httpd_parse), and headers
 * are looked up. Never crashes nor reads past the head; a parsed request has
 * a method of 1..16 visible characters, a non-empty path without '?', and a
 * header value that fits its buffer. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/httpd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > CTRAIN_HTTPD_REQ_MAX)
    size = CTRAIN_HTTPD_REQ_MAX;
  /* Exactly what the server holds: the bytes read, one spare for the NUL. */
  char *buf = malloc(size + 1);
  if (!buf)
    return 0;
  memcpy(buf, data, size);
  size_t hl = ctrain_httpd_head_len(buf, size);
  if (hl > size)
    abort();
  if (hl && (buf[hl - 1] != '\n' || (buf[hl - 2] != '\n' && buf[hl - 2] != '\r')))
    abort();
  /* Parse the framed head, or (as the fuzz's own check) the whole input. */
  ctrain_httpd_request req;
  if (ctrain_httpd_parse(buf, hl ? hl : size, &req) == CTRAIN_OK) {
    size_t m = strlen(req.method);
    if (!m || m > 16 || !*req.path || strchr(req.path, '?') || !req.query || !req.headers)
      abort();
    for (size_t i = 0; i < m; i++)
      if (!isgraph((unsigned char)req.method[i]))
        abort();
    static const char *names[] = {"Authorization", "host", "X", "", "Content-Length"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
      char v[64];
      ctrain_err result = ctrain_httpd_header(&req, names[i], v, sizeof(v));
      if (result == CTRAIN_OK && strlen(v) >= sizeof(v))
        abort();
      if (result && result != CTRAIN_E_NOTFOUND && result != CTRAIN_E_TOOBIG)
        abort();
    }
  }
  free(buf);
  return 0;
}
