/* backup_uris.h - reads tests/data/backup_uris.tsv, the one table of backup
 * URIs that the CRD, the worker's parser and the controller must agree on
 * (tests/unit/test_backup_uris.c, test_reconcile.c, and
 * tests/integration/backup_uri_check.c for test_backup_uris.py).
 *
 * A row: uri TAB yes|no TAB why; '#' lines are comments. In the uri, \xNN is
 * the byte NN (01..7f) and \\ a backslash; every other byte is itself. */
#ifndef CTRAIN_TEST_BACKUP_URIS_H
#define CTRAIN_TEST_BACKUP_URIS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKUP_URIS_TSV CTRAIN_SOURCE_DIR "/tests/data/backup_uris.tsv"

typedef struct backup_uri_row {
  int line;       /* in the file, from 1 */
  char uri[2048]; /* decoded */
  int accepted;   /* the table's verdict */
  char why[256];
} backup_uri_row;

static int backup_uris_hex(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Decodes the uri column s[0..n) into out; 0, or -1 on a malformed escape. */
static int backup_uris_decode(const char *s, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)s[i];
    if (c == '\\') {
      if (i + 1 < n && s[i + 1] == '\\') {
        i++;
      } else if (i + 3 < n && s[i + 1] == 'x' && backup_uris_hex(s[i + 2]) >= 0 &&
                 backup_uris_hex(s[i + 3]) >= 0) {
        c = backup_uris_hex(s[i + 2]) * 16 + backup_uris_hex(s[i + 3]);
        if (c == 0 || c > 0x7f)
          return -1;
        i += 3;
      } else {
        return -1;
      }
    }
    if (o + 1 >= cap)
      return -1;
    out[o++] = (char)c;
  }
  out[o] = '\0';
  return 0;
}

/* Loads every row into *rows (malloc'd, the caller frees); returns how
 * many, or -1 with the reason printed on stderr. */
static int backup_uris_load(const char *path, backup_uri_row **rows) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "%s: cannot open\n", path);
    return -1;
  }
  char line[4096];
  int n = 0, cap = 0, lineno = 0;
  backup_uri_row *r = NULL;
  while (fgets(line, sizeof(line), f)) {
    lineno++;
    size_t len = strlen(line);
    if (len && line[len - 1] == '\n')
      line[--len] = '\0';
    if (len == 0 || line[0] == '#')
      continue;
    char *t1 = strchr(line, '\t');
    char *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      backup_uri_row *g = realloc(r, (size_t)cap * sizeof(*r));
      if (!g)
        goto bad;
      r = g;
    }
    backup_uri_row *row = &r[n];
    memset(row, 0, sizeof(*row));
    row->line = lineno;
    if (!t2 || backup_uris_decode(line, (size_t)(t1 - line), row->uri, sizeof(row->uri)))
      goto bad;
    *t2 = '\0';
    if (!strcmp(t1 + 1, "yes"))
      row->accepted = 1;
    else if (strcmp(t1 + 1, "no"))
      goto bad;
    snprintf(row->why, sizeof(row->why), "%s", t2 + 1);
    n++;
  }
  fclose(f);
  *rows = r;
  return n;
bad:
  fprintf(stderr, "%s:%d: not a row (uri TAB yes|no TAB why)\n", path, lineno);
  fclose(f);
  free(r);
  return -1;
}

#endif
