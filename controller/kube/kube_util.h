/* kube_util.h - private helpers shared by the controller/kube modules.
 * Not installed, not part of any public header. */
#ifndef CTRAIN_KUBE_UTIL_H
#define CTRAIN_KUBE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"

/* snprintf into err (when non-NULL and errlen > 0); always returns `code`,
 * so callers can write `result = kube_errf(CTRAIN_E_CONFIG, err, errlen, ...)`. */
ctrain_err kube_errf(ctrain_err code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Reads a whole file of at most `cap` bytes. *out is owned by the caller,
 * NUL-terminated; *len excludes the NUL. CTRAIN_E_IO or CTRAIN_E_TOOBIG with
 * the path in err. */
ctrain_err kube_read_file(const char *path, size_t cap, char **out, size_t *len, char *err,
                          size_t errlen);

/* Decodes base64 (newlines and whitespace ignored). *out owned by the caller,
 * NUL-terminated. CTRAIN_E_PARSE on bad input. */
ctrain_err kube_b64_decode(const char *in, size_t inlen, char **out, size_t *outlen);

/* Monotonic clock in nanoseconds. */
int64_t kube_mono_ns(void);

/* Sleeps `ns` nanoseconds (restarting on EINTR). */
void kube_sleep_ns(int64_t ns);

/* strndup that reports failure as NULL (alias for clarity). */
char *kube_strndup(const char *s, size_t n);

#endif
