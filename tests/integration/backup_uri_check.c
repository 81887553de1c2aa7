/* backup_uri_check.c - the worker's verdict on every backup URI of a table
 * (tests/data/backup_uris.tsv), for tests/integration/test_backup_uris.py,
 * which holds it and the apiserver's to the table's.
 *
 *   backup_uri_check TABLE     prints "LINE<TAB>yes|no<TAB>message" per row
 *
 * The verdict is s3_location_parse's (include/objstore/ctrain/s3_proto.h), the
 * parser the worker runs on --backup-uri and CTRAIN_BACKUP_URI before any
 * request; the message is its error, control bytes escaped. Exit 0, or 2
 * when the table cannot be read. */
#include <stdio.h>
#include <stdlib.h>

#include "ctrain/s3_proto.h"
#include "ctrain/util.h"
#include "tests/unit/backup_uris.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: backup_uri_check TABLE\n");
    return 2;
  }
  backup_uri_row *rows = NULL;
  int n = backup_uris_load(argv[1], &rows);
  if (n < 0)
    return 2;
  for (int i = 0; i < n; i++) {
    s3_location loc;
    char err[1024] = "", shown[4 * sizeof(err)];
    int ok = s3_location_parse(rows[i].uri, NULL, NULL, &loc, err, sizeof(err)) == CTRAIN_OK;
    printf("%d\t%s\t%s\n", rows[i].line, ok ? "yes" : "no",
           ctrain_escape_ctl(err, shown, sizeof(shown)));
  }
  free(rows);
  return 0;
}
