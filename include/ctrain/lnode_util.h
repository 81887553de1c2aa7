/* ctrain/lnode_util.h - small helpers of ctrain-localnode: error messages,
 * files, base64, RFC 3339 times and cJSON lookups.
 *
 * Everything here is pure or touches only the paths it is given. */
#ifndef CTRAIN_LNODE_UTIL_H
#define CTRAIN_LNODE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "ctrain/err.h"
#include "ctrain/util.h"

/* Formats into a fixed buffer; CTRAIN_E_TOOBIG when it does not fit. */
ctrain_err lnode_fmt(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes `len` bytes to `path` through a temporary file and rename(), so a
 * reader never sees half a file; `mode` is the file's permission bits. */
ctrain_err lnode_write_file_atomic(const char *path, const void *data, size_t len, mode_t mode,
                                   char *err, size_t errlen);

/* Rewrites `path` in place (truncate + write): the inode stays, so a bind
 * mount of the file sees the new content (used for /etc/hosts). */
ctrain_err lnode_write_file_inplace(const char *path, const void *data, size_t len, mode_t mode,
                                    char *err, size_t errlen);

/* mkdir -p with `mode` for the directories it creates. */
ctrain_err lnode_mkdir_p(const char *path, mode_t mode, char *err, size_t errlen);

/* rm -rf that never crosses into another filesystem (a mount point below
 * `path` is left alone and makes the call fail with CTRAIN_E_IO). */
ctrain_err lnode_rm_rf(const char *path, char *err, size_t errlen);

/* "2006-01-02T15:04:05Z" for a UNIX time (UTC). buf needs 21 bytes. */
void lnode_time_rfc3339(time_t t, char *buf, size_t cap);
/* "2006-01-02T15:04:05.000000Z" (MicroTime, for Lease renewTime); 28 bytes. */
void lnode_time_micro(const struct timespec *ts, char *buf, size_t cap);

/* Monotonic clock in milliseconds. */
int64_t lnode_mono_ms(void);

/* Borrowed string at a dotted path of objects ("metadata.name"), or NULL. */
const char *lnode_json_str(const cJSON *obj, const char *path);
/* Borrowed item at a dotted path, or NULL. */
const cJSON *lnode_json_at(const cJSON *obj, const char *path);
/* Number at a path, or `def`. */
double lnode_json_num(const cJSON *obj, const char *path, double def);

#endif
