/* ctrain/fileio.h - the one way ctrain creates files on shared storage
 * (docs/design.md "Worker contract": backups, the final model, metrics).
 *
 * Anyone who can write the shared volume can plant a symbolic link (or a
 * FIFO) under a name we are about to use. So a replaced file is written to a
 * temp file in the target's own directory, created with
 * O_CREAT|O_EXCL|O_NOFOLLOW under an unpredictable name (another name on
 * EEXIST), written fully, fsync'ed, renamed over the target (rename replaces
 * a link at the target, it never writes through it) and made durable with a
 * directory fsync. Until the rename the target is untouched; on any error
 * before it the temp file is removed.
 *
 * Temp names are `.<target name>.<16 hex digits>.tmp` beside the target, so
 * a cleaner can recognise a crashed writer's leftovers. Every error names the
 * file and the failing call; disk full, quota or a file-size limit is
 * CTRAIN_E_NOSPACE, anything else CTRAIN_E_IO (or CTRAIN_E_NOMEM, CTRAIN_E_INVAL
 * for a path that does not fit). */
#ifndef CTRAIN_FILEIO_H
#define CTRAIN_FILEIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ctrain/err.h"

/* Temp names tried before giving up (each EEXIST takes a fresh one). */
#define CTRAIN_FILE_TEMP_TRIES 8

/* An atomic replacement in progress (opaque). */
typedef struct ctrain_file ctrain_file;

/* Starts replacing `path` (borrowed): creates its temp file. On success *out
 * is owned by the caller until ctrain_file_commit or ctrain_file_abort takes
 * it; on failure *out is NULL and nothing is left behind. */
CTRAIN_NODISCARD ctrain_err ctrain_file_create(const char *path, ctrain_file **out, char *errbuf,
                                               size_t errlen);

/* Appends `len` bytes of buf (borrowed) to the temp file, retrying short
 * writes and EINTR. After a failure the file only accepts abort. */
CTRAIN_NODISCARD ctrain_err ctrain_file_write(ctrain_file *f, const void *buf, size_t len,
                                              char *errbuf, size_t errlen);

/* Writes what f holds so far to the device and waits for it (Linux
 * sync_file_range; elsewhere nothing), so that commit's fsync has only what
 * follows left to flush: a writer that has other work before its last bytes
 * (a checksum still being computed) overlaps the device's work with it. The
 * bytes are durable only after commit. An I/O error fails f as a failed
 * write does. */
CTRAIN_NODISCARD ctrain_err ctrain_file_writeback(ctrain_file *f, char *errbuf, size_t errlen);

/* Finishes a replacement (takes f, also on failure): fsync, close, rename
 * over the target, fsync of the directory. An error before the rename removes
 * the temp file and leaves the old target as it was; an error from the
 * directory fsync means the new file is in place but may not survive a
 * crash. */
CTRAIN_NODISCARD ctrain_err ctrain_file_commit(ctrain_file *f, char *errbuf, size_t errlen);

/* Drops a replacement (takes f): removes the temp file, the target stays as
 * it was. NULL is fine. */
void ctrain_file_abort(ctrain_file *f);

/* The temp file's path while f is open (borrowed from f), for messages. */
const char *ctrain_file_temp_path(const ctrain_file *f);

/* create + write + commit for a file that is one buffer (borrowed). */
CTRAIN_NODISCARD ctrain_err ctrain_file_save(const char *path, const void *buf, size_t len,
                                             char *errbuf, size_t errlen);

/* Opens `path` for appending (a JSON-lines log), creating it 0644 if
 * missing: O_APPEND|O_CREAT|O_NOFOLLOW, never blocking on a FIFO; a symbolic
 * link or anything but a regular file is refused with CTRAIN_E_IO. *fd_out is
 * a blocking descriptor owned by the caller (close it), -1 on failure. */
CTRAIN_NODISCARD ctrain_err ctrain_file_open_append(const char *path, int *fd_out, char *errbuf,
                                                    size_t errlen);

/* fsync of directory `dir` (borrowed), so renames and unlinks in it are
 * durable; file systems that cannot (EINVAL) are not an error. */
CTRAIN_NODISCARD ctrain_err ctrain_file_fsync_dir(const char *dir, char *errbuf, size_t errlen);

/* `mkdir -p`: creates directory `path` (borrowed) and every missing parent
 * with `mode` (less the umask). Directories that exist are fine. Anything
 * else in the way (a file) is CTRAIN_E_IO; disk full or quota
 * CTRAIN_E_NOSPACE; an empty or overlong path CTRAIN_E_INVAL. The error
 * names `path` and the component that failed. */
CTRAIN_NODISCARD ctrain_err ctrain_mkdir_p(const char *path, mode_t mode, char *errbuf,
                                           size_t errlen);

/* Formats the temp path used for `path` with the given nonce into out
 * (CTRAIN_E_INVAL when it does not fit). For tests that plant files there. */
CTRAIN_NODISCARD ctrain_err ctrain_file_format_temp(const char *path, uint64_t nonce, char *out,
                                                    size_t outlen);

/* Replaces the source of temp-name nonces (by default getrandom(2)) with
 * next(arg); NULL restores the default. Process-wide, for tests that need to
 * know every name a writer will try. */
void ctrain_file_set_nonce_source(uint64_t (*next)(void *arg), void *arg);

#endif
