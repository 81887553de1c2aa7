/* ckpt_store.c - the backup rules over any store, and the directory store;
 * see ckpt_store.h. */
#include "worker/checkpoint/ckpt_store.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/buf.h"
#include "ctrain/fileio.h"
#include "ctrain/log.h"

void ckpt_store_free(ckpt_store *s) {
  if (s)
    s->ops->free(s);
}

void ckpt_store_path(const ckpt_store *s, const char *name, char *out, size_t len) {
  snprintf(out, len, "%s/%s", s->base, name);
}

static int cmp_newest_first(const void *a, const void *b) {
  const ckpt_entry *x = a, *y = b;
  return (x->step < y->step) - (x->step > y->step);
}

/* The store's backups, newest first (*out owned by the caller). */
static ctrain_err list_sorted(ckpt_store *s, ckpt_entry **out, size_t *n, char *errbuf,
                              size_t errlen) {
  ctrain_err result = s->ops->list(s, out, n, errbuf, errlen);
  if (!result && *n > 1)
    qsort(*out, *n, sizeof(**out), cmp_newest_first);
  return result;
}

ctrain_err ckpt_store_save(ckpt_store *s, const ckpt_state *st, char *path_out, size_t path_len,
                           char *errbuf, size_t errlen) {
  char name[CKPT_NAME_BYTES];
  ckpt_backup_name(st->global_step, name);
  ctrain_err result = s->ops->write(s, name, st, errbuf, errlen);
  if (!result && path_out)
    ckpt_store_path(s, name, path_out, path_len);
  return result;
}

ctrain_err ckpt_store_restore_latest(ckpt_store *s, ckpt_state *out, char *path_out,
                                     size_t path_len, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ckpt_entry *v = NULL;
  size_t n = 0, bad = 0;
  memset(out, 0, sizeof(*out));
  if (s->ops->clean) {
    result = s->ops->clean(s, errbuf, errlen);
    if (result)
      goto out;
  }
  result = list_sorted(s, &v, &n, errbuf, errlen);
  if (result)
    goto out;
  for (size_t i = 0; i < n; i++) {
    char path[1200], why[1024], how[1300];
    ckpt_store_path(s, v[i].name, path, sizeof(path));
    why[0] = '\0';
    ctrain_err r = s->ops->read(s, &v[i], out, why, sizeof(why));
    if (r == CTRAIN_OK) {
      if (path_out)
        snprintf(path_out, path_len, "%s", path);
      goto out;
    }
    if (r == CTRAIN_E_NOTFOUND) {
      LOG_WARN("backup: skipping %s: gone since it was listed", path);
      continue;
    }
    if (r != CTRAIN_E_CORRUPT) {
      result = r;
      snprintf(errbuf, errlen, "%s", why);
      goto out;
    }
    bad++;
    how[0] = '\0';
    if (s->ops->discard(s, &v[i], how, sizeof(how)) == CTRAIN_OK)
      LOG_WARN("backup: skipping %s: %s (%s)", path, why, how);
    else
      LOG_WARN("backup: skipping %s: %s (could not take it out of the rotation: %s)", path, why,
               how);
  }
  if (bad)
    LOG_WARN("backup: none of the %zu backups in %s verifies; starting fresh", bad, s->base);
  result = CTRAIN_E_NOTFOUND;
  snprintf(errbuf, errlen, "%s %s: no backup that verifies", s->flag, s->base);
out:
  free(v);
  return result;
}

/* Deletes every backup but the `first` newest. */
static ctrain_err remove_from(ckpt_store *s, size_t first, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ckpt_entry *v = NULL;
  size_t n = 0;
  result = list_sorted(s, &v, &n, errbuf, errlen);
  if (result)
    goto out;
  for (size_t i = first; i < n; i++) {
    result = s->ops->remove(s, v[i].name, errbuf, errlen);
    if (result)
      goto out;
  }
  if (n > first && s->ops->sync)
    result = s->ops->sync(s, errbuf, errlen);
out:
  free(v);
  return result;
}

ctrain_err ckpt_store_prune(ckpt_store *s, int keep, char *errbuf, size_t errlen) {
  return remove_from(s, keep > 0 ? (size_t)keep : 1, errbuf, errlen);
}

ctrain_err ckpt_store_remove_all(ckpt_store *s, char *errbuf, size_t errlen) {
  return remove_from(s, 0, errbuf, errlen);
}

/* --- the directory store -------------------------------------------------- */

typedef struct {
  ckpt_store base;
  char dir[4096];
} dir_store;

static const char *dir_of(ckpt_store *s) {
  return ((dir_store *)s)->dir;
}

static ctrain_err dir_list(ckpt_store *s, ckpt_entry **out, size_t *n, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const char *dir = dir_of(s);
  DIR *d = NULL;
  ckpt_entry *v = NULL;
  size_t cnt = 0, cap = 0;
  *out = NULL;
  *n = 0;
  d = opendir(dir);
  if (!d && errno == ENOENT)
    goto out; /* no backups yet */
  if (!d)
    CTRAIN_FAIL(CTRAIN_E_IO, "--backup-dir %s: %s", dir, strerror(errno));
  struct dirent *de;
  while ((de = readdir(d))) {
    uint64_t step;
    if (!ckpt_parse_backup_name(de->d_name, &step))
      continue;
    if (ctrain_grow(&v, &cap, cnt + 1, sizeof(*v), 16, 0))
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "--backup-dir %s: out of memory", dir);
    v[cnt].step = step;
    v[cnt].size = -1; /* ckpt_read_fd checks the file's own size */
    /* ckpt_parse_backup_name checked the length: it fits with its NUL. */
    memcpy(v[cnt].name, de->d_name, strlen(de->d_name) + 1);
    cnt++;
  }
  *out = v;
  *n = cnt;
  v = NULL;
out:
  if (d)
    closedir(d);
  free(v);
  return result;
}

static ctrain_err dir_write(ckpt_store *s, const char *name, const ckpt_state *st, char *errbuf,
                            size_t errlen) {
  (void)name; /* ckpt_save names the file by its step, as ckpt_backup_name does */
  return ckpt_save(dir_of(s), st, NULL, 0, errbuf, errlen);
}

static ctrain_err dir_read(ckpt_store *s, const ckpt_entry *e, ckpt_state *out, char *errbuf,
                           size_t errlen) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", dir_of(s), e->name);
  ctrain_err r = ckpt_load_file(path, out, errbuf, errlen);
  /* A file under a backup's name that cannot even be opened (a directory,
   * no permission) is not a backup either; only memory, and a newer build's
   * backup (CKPT_VERSIONS_AHEAD), stop the search. */
  return r == CTRAIN_OK || r == CTRAIN_E_NOMEM || r == CTRAIN_E_UNSUPPORTED ? r : CTRAIN_E_CORRUPT;
}

static ctrain_err dir_remove(ckpt_store *s, const char *name, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char path[4200];
  snprintf(path, sizeof(path), "%s/%s", dir_of(s), name);
  if (unlink(path) && errno != ENOENT)
    CTRAIN_FAIL(CTRAIN_E_IO, "%s: unlink: %s", path, strerror(errno));
out:
  return result;
}

/* Moved aside (kept for a post-mortem) rather than deleted. */
static ctrain_err dir_discard(ckpt_store *s, const ckpt_entry *e, char *how, size_t how_len) {
  char path[4200], aside[4300];
  snprintf(path, sizeof(path), "%s/%s", dir_of(s), e->name);
  snprintf(aside, sizeof(aside), "%s.corrupt", path);
  if (rename(path, aside)) {
    snprintf(how, how_len, "rename to %s: %s", aside, strerror(errno));
    return CTRAIN_E_IO;
  }
  snprintf(how, how_len, "moved aside to %s", aside);
  return CTRAIN_OK;
}

/* Leftover temp files of an interrupted save: .backup-*.tmp (ctrain/fileio.h). */
static ctrain_err dir_clean(ckpt_store *s, char *errbuf, size_t errlen) {
  (void)errbuf;
  (void)errlen;
  const char *dir = dir_of(s);
  DIR *d = opendir(dir);
  if (!d)
    return CTRAIN_OK; /* the listing reports an unusable directory */
  struct dirent *de;
  while ((de = readdir(d))) {
    size_t nl = strlen(de->d_name);
    if (de->d_name[0] == '.' && !strncmp(de->d_name + 1, "backup-", 7) && nl > 4 &&
        !strcmp(de->d_name + nl - 4, ".tmp")) {
      char p[4400];
      snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
      if (!unlink(p))
        LOG_INFO("backup: removed %s, left by an interrupted save", p);
    }
  }
  closedir(d);
  return CTRAIN_OK;
}

static ctrain_err dir_sync(ckpt_store *s, char *errbuf, size_t errlen) {
  return ctrain_file_fsync_dir(dir_of(s), errbuf, errlen);
}

static void dir_free(ckpt_store *s) {
  free(s);
}

static const ckpt_store_ops dir_ops = {.list = dir_list,
                                       .write = dir_write,
                                       .read = dir_read,
                                       .remove = dir_remove,
                                       .discard = dir_discard,
                                       .clean = dir_clean,
                                       .sync = dir_sync,
                                       .free = dir_free};

/* A directory store on the stack or heap, without touching the disk. */
static ctrain_err dir_init(dir_store *ds, const char *dir, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  memset(ds, 0, sizeof(*ds));
  ds->base.ops = &dir_ops;
  ds->base.flag = "--backup-dir";
  if ((size_t)snprintf(ds->dir, sizeof(ds->dir), "%s", dir) >= sizeof(ds->dir) ||
      (size_t)snprintf(ds->base.base, sizeof(ds->base.base), "%s", dir) >= sizeof(ds->base.base))
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--backup-dir %.200s...: path too long", dir);
out:
  return result;
}

ctrain_err ckpt_store_open_dir(const char *dir, ckpt_store **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  dir_store *ds = NULL;
  *out = NULL;
  ds = malloc(sizeof(*ds));
  if (!ds)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "--backup-dir %s: out of memory", dir);
  result = dir_init(ds, dir, errbuf, errlen);
  if (result)
    goto out;
  result = ckpt_prepare_dir(dir, errbuf, errlen);
  if (result)
    goto out;
  *out = &ds->base;
  ds = NULL;
out:
  free(ds);
  return result;
}

ctrain_err ckpt_restore_latest(const char *dir, ckpt_state *out, char *path_out, size_t path_len,
                               char *errbuf, size_t errlen) {
  dir_store ds;
  memset(out, 0, sizeof(*out));
  ctrain_err result = dir_init(&ds, dir, errbuf, errlen);
  return result ? result
                : ckpt_store_restore_latest(&ds.base, out, path_out, path_len, errbuf, errlen);
}

ctrain_err ckpt_prune(const char *dir, int keep, char *errbuf, size_t errlen) {
  dir_store ds;
  ctrain_err result = dir_init(&ds, dir, errbuf, errlen);
  return result ? result : ckpt_store_prune(&ds.base, keep, errbuf, errlen);
}

ctrain_err ckpt_remove_all(const char *dir, char *errbuf, size_t errlen) {
  dir_store ds;
  ctrain_err result = dir_init(&ds, dir, errbuf, errlen);
  return result ? result : ckpt_store_remove_all(&ds.base, errbuf, errlen);
}
