/* worker/checkpoint/ckpt_store.h - where backups live, behind one small
 * interface, and the rules every store shares (docs/design.md "Worker contract",
 * Backup).
 *
 * A store holds backups by name (backup-<global step, 20 digits>.ckpt, the
 * format of ckpt.h). Two stores: a directory (--backup-dir, a shared volume)
 * and an object store (--backup-uri s3://... or gs://..., ckpt_store_s3.h).
 * Each does four things (list, write one so that it is visible only when
 * whole, read one and verify it, delete one) plus two hooks: clean away what
 * an interrupted save left, and take a backup that does not verify out of
 * the rotation. The rules are written once, here, over those operations:
 * the newest backup that verifies is restored and a newer corrupt one falls
 * back to the previous; all but the `keep` newest are deleted after a save;
 * all are deleted after success. Only the chief ever opens a store. */
#ifndef CTRAIN_CKPT_STORE_H
#define CTRAIN_CKPT_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "worker/checkpoint/ckpt.h"

typedef struct ckpt_store ckpt_store;

/* One backup in a store. */
typedef struct ckpt_entry {
  uint64_t step;              /* its global step */
  char name[CKPT_NAME_BYTES]; /* backup-<step>.ckpt */
  int64_t size;               /* bytes, as the listing gave them; -1 when it does not say */
} ckpt_entry;

/* A store's operations. Every error message names the store and the backup. */
typedef struct ckpt_store_ops {
  /* The backups present (only names ckpt_parse_backup_name accepts), in any
   * order; *out owned by the caller (free()), NULL when none. */
  ctrain_err (*list)(ckpt_store *s, ckpt_entry **out, size_t *n, char *errbuf, size_t errlen);
  /* Writes st (borrowed) under `name`, visible under that name only when
   * whole and durable; a failure leaves every other backup as it was. */
  ctrain_err (*write)(ckpt_store *s, const char *name, const ckpt_state *st, char *errbuf,
                      size_t errlen);
  /* Reads the backup e (as listed) and verifies it (ckpt_read_fd: header,
   * sizes, SHA-256). CTRAIN_E_CORRUPT: all of it was read and it is not a
   * backup that verifies (the restore falls back to the previous one);
   * CTRAIN_E_NOTFOUND: gone since the listing; any other error (a read that
   * failed or came back short, whatever the retries) stops the restore, so
   * a backup is never taken for damage because a read went wrong. *out as
   * ckpt_read_fd fills it. */
  ctrain_err (*read)(ckpt_store *s, const ckpt_entry *e, ckpt_state *out, char *errbuf,
                     size_t errlen);
  /* Deletes `name` (absent is fine). */
  ctrain_err (*remove)(ckpt_store *s, const char *name, char *errbuf, size_t errlen);
  /* Takes e, which did not verify, out of the rotation, so a newer save is
   * never pruned in its favour, without destroying it (quarantine: the
   * directory renames it to <name>.corrupt, the object store copies it to
   * <name>.corrupt-<UTC time> and deletes the original only once the copy
   * is whole); `how` (how_len bytes) says what was done, for the warning.
   * On failure the backup is left where it is. */
  ctrain_err (*discard)(ckpt_store *s, const ckpt_entry *e, char *how, size_t how_len);
  /* Removes what an interrupted save left (temp files, unfinished uploads);
   * run by the restore, before anything is written. */
  ctrain_err (*clean)(ckpt_store *s, char *errbuf, size_t errlen);
  /* Makes removals durable (NULL: nothing to do). */
  ctrain_err (*sync)(ckpt_store *s, char *errbuf, size_t errlen);
  void (*free)(ckpt_store *s);
} ckpt_store_ops;

/* The common part of every store (the first member of each). */
struct ckpt_store {
  const ckpt_store_ops *ops;
  const char *flag; /* "--backup-dir" or "--backup-uri", for messages (static) */
  char base[1100];  /* the directory or the s3://bucket/prefix; a backup is base/name */
};

/* Opens the directory store of `dir` (borrowed): creates it and its parents
 * if needed and checks it is writable (ckpt_prepare_dir), so an unusable
 * --backup-dir fails at start. *out owned by the caller (ckpt_store_free). */
CTRAIN_NODISCARD ctrain_err ckpt_store_open_dir(const char *dir, ckpt_store **out, char *errbuf,
                                                size_t errlen);

/* Frees s (NULL fine). */
void ckpt_store_free(ckpt_store *s);

/* "<base>/<name>" into out: how a backup is named in logs and messages. */
void ckpt_store_path(const ckpt_store *s, const char *name, char *out, size_t len);

/* Writes st as the backup of its global step; its path (ckpt_store_path)
 * into path_out when non-NULL. */
CTRAIN_NODISCARD ctrain_err ckpt_store_save(ckpt_store *s, const ckpt_state *st, char *path_out,
                                            size_t path_len, char *errbuf, size_t errlen);

/* Cleans the store (ops->clean), then loads the newest backup that
 * verifies. One that does not is logged as a warning naming it and why and
 * quarantined (ops->discard), never deleted; one gone since the listing is
 * skipped. A read that fails (the object store unreachable, an answer cut
 * short, too large or past its deadline, after the client's retries) stops
 * the search: CTRAIN_E_NET, exit 75, and the bucket keeps every backup. An
 * allocation failure for a verified header's state (CTRAIN_E_NOMEM) or any
 * other store error (the object store unreachable, access refused) stops the
 * search and is returned: a store that cannot be read is not a fresh start.
 * CTRAIN_E_NOTFOUND when no backup verifies (a warning is logged if some
 * existed); path_out gets the chosen backup's path. */
CTRAIN_NODISCARD ctrain_err ckpt_store_restore_latest(ckpt_store *s, ckpt_state *out,
                                                      char *path_out, size_t path_len, char *errbuf,
                                                      size_t errlen);

/* Deletes all but the `keep` newest backups (by global step). */
CTRAIN_NODISCARD ctrain_err ckpt_store_prune(ckpt_store *s, int keep, char *errbuf, size_t errlen);

/* Deletes every backup (after a successful run). */
CTRAIN_NODISCARD ctrain_err ckpt_store_remove_all(ckpt_store *s, char *errbuf, size_t errlen);

/* The same on a directory by path, without creating it (a missing directory
 * holds no backups). Corrupt backups are renamed to `<name>.corrupt`; the
 * restore removes the temp files of an interrupted save. */
CTRAIN_NODISCARD ctrain_err ckpt_restore_latest(const char *dir, ckpt_state *out, char *path_out,
                                                size_t path_len, char *errbuf, size_t errlen);
CTRAIN_NODISCARD ctrain_err ckpt_prune(const char *dir, int keep, char *errbuf, size_t errlen);
CTRAIN_NODISCARD ctrain_err ckpt_remove_all(const char *dir, char *errbuf, size_t errlen);

#endif
