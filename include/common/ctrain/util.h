/* ctrain/util.h - small helpers shared by the controller, the kube client,
 * the worker and the node agent. */
#ifndef CTRAIN_UTIL_H
#define CTRAIN_UTIL_H

#include <stddef.h>

#include "ctrain/err.h"

/* snprintf into err (when non-NULL and errlen > 0); always returns `code`,
 * so callers can write `result = ctrain_errf(CTRAIN_E_CONFIG, err, errlen, ...)`. */
CTRAIN_NODISCARD ctrain_err ctrain_errf(ctrain_err code, char *err, size_t errlen, const char *fmt,
                                        ...) __attribute__((format(printf, 4, 5)));

/* Reads a whole file of at most `cap` bytes (0: no cap beyond memory). *out is owned by the caller,
 * NUL-terminated; *len (optional) excludes the NUL. CTRAIN_E_IO or
 * CTRAIN_E_TOOBIG with the path in err. */
CTRAIN_NODISCARD ctrain_err ctrain_read_file(const char *path, size_t cap, char **out, size_t *len,
                                             char *err, size_t errlen);

/* Decodes standard or URL-safe base64 (whitespace ignored). *out owned by the
 * caller, NUL-terminated. CTRAIN_E_PARSE on bad input. */
CTRAIN_NODISCARD ctrain_err ctrain_b64_decode(const char *in, size_t inlen, char **out,
                                              size_t *outlen);

/* Copies foreign text (an apiserver's or object store's message, a pod's
 * answer, a name from an object) into out with its control bytes escaped,
 * so that it cannot split a log line or an event message, nor carry
 * terminal escapes: \n \r \t as those two characters, every other byte
 * below 0x20, 0x7f, and the UTF-8 C1 controls (U+0080..U+009F) as \xNN
 * (one per byte); the rest, UTF-8 included, unchanged. NULL reads as "".
 * out is always NUL-terminated (outlen > 0), truncated at an escape's
 * boundary; 4 * strlen(in) + 1 bytes always fit. Returns out. */
char *ctrain_escape_ctl(const char *in, char *out, size_t outlen);

#endif
