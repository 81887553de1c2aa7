/* worker/data/files.h - the file list a --data spec names: comma-separated
 * entries, each a file, a directory (its regular files, sorted by name, dot
 * files skipped) or a glob(7) pattern (its matches, sorted). */
#ifndef CTRAIN_DATA_FILES_H
#define CTRAIN_DATA_FILES_H

#include <stddef.h>

#include "ctrain/err.h"

#define FILES_MAX 4096 /* files in one spec */

typedef struct {
  char **names; /* (n) owned */
  int n;
} files_list;

/* Expands `spec` into fl (owned by the caller: files_free). `expand` 0 keeps
 * each entry as given (IDX prefixes). CTRAIN_E_DATA when a pattern or a
 * directory names no file, or past FILES_MAX; `flag` names the flag in
 * messages. */
CTRAIN_NODISCARD ctrain_err files_expand(const char *spec, int expand, const char *flag,
                                         files_list *fl, char *errbuf, size_t errlen);

void files_free(files_list *fl);

#endif
