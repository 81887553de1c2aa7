/* ctrain/backup_uri.h - what a valid backup URI (spec.checkpoint.uri,
 * --backup-uri, CTRAIN_BACKUP_URI) is: the one definition the worker's S3
 * client (objstore/s3_proto.c) and the controller's validation
 * (controller/recon_validate.c, podbuild.c) call, and that the CRD's
 * `pattern` and CEL rules on spec.checkpoint.uri
 * (manifests/crds/trainingjobs.ctrain.dev.yaml) express for the apiserver.
 * tests/data/backup_uris.tsv is the table both sides must agree on.
 *
 *   uri     = ("s3" | "gs") "://" bucket [ "/" [ prefix ] ]   at most 960 bytes
 *   prefix  = segment *( "/" segment ) [ "/" ]     one trailing '/' is ignored
 *   segment = 1*pchar, not "." nor ".."            so no "//", no "/./", no "/../"
 *   pchar   = ALPHA / DIGIT / - . _ ~ ! $ & ' ( ) * + , ; = : @
 *             (RFC 3986's path characters, written literally: no '%', no
 *             space, no control or non-ASCII byte, no ? # \ " < > [ ] ^ ` { | })
 *   bucket  = label *( "." label ), label = [a-z0-9] [ *[a-z0-9-] [a-z0-9] ]
 *             (gs:// labels may also hold '_' inside);
 *             s3://: 3..63 bytes; gs://: 3..222 bytes, each label at most 63;
 *             never four all-digit labels (an IP address);
 *             s3:// never begins with xn--, sthree- or amzn-s3-demo-, nor ends
 *             with --ol-s3, .mrap, --x-s3 or --table-s3 (AWS reserves them; an
 *             access point alias, ...-s3alias, is taken: S3 accepts it for a
 *             bucket's name in every request the worker makes);
 *             gs:// never begins with "goog" nor contains "google".
 *
 * 960 bytes: the longest key the worker writes under a prefix is the prefix,
 * '/' and 57 bytes ("backup-<20 digits>.ckpt.corrupt-<UTC time>"), within
 * the 1024 bytes S3 and GCS allow a key. */
#ifndef CTRAIN_BACKUP_URI_H
#define CTRAIN_BACKUP_URI_H

#include <stddef.h>

#include "ctrain/err.h"

#define CTRAIN_BACKUP_URI_MAX    960 /* bytes in a whole URI */
#define CTRAIN_BACKUP_BUCKET_MAX 222 /* gs:// with dots; s3:// 63 */

typedef struct ctrain_backup_uri {
  int gcs; /* 0: s3://, 1: gs:// */
  char bucket[CTRAIN_BACKUP_BUCKET_MAX + 1];
  char prefix[CTRAIN_BACKUP_URI_MAX + 1]; /* without the trailing '/'; "" the bucket root */
} ctrain_backup_uri;

/* Parses `uri` by the grammar above. out may be NULL (a check only).
 * CTRAIN_E_CONFIG when it is not a backup URI, with the reason in why
 * (what is wrong, without the URI itself: the caller names it). */
CTRAIN_NODISCARD ctrain_err ctrain_backup_uri_parse(const char *uri, ctrain_backup_uri *out,
                                                    char *why, size_t whylen);

#endif
