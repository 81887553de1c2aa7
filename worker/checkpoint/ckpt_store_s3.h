/* worker/checkpoint/ckpt_store_s3.h - the backup store in object storage
 * (--backup-uri s3://bucket/prefix or gs://bucket/prefix), behind
 * ckpt_store.h's interface, over the S3 client of s3.h.
 *
 * A backup is the object <prefix>/backup-<step>.ckpt. A save writes the
 * image to an unlinked local staging file (TMPDIR, else /tmp) and uploads it
 * with s3_put_fd: one PUT, or a multipart upload that is completed or
 * aborted, so the object appears only when whole. Its body is signed with
 * its SHA-256 and, where the store supports it, stored with
 * x-amz-checksum-sha256. A restore downloads to a staging file (the store's
 * checksum checked on the way) and verifies our own header and SHA-256
 * (ckpt_read_fd) before anything is used; one that does not verify is
 * deleted from the bucket, so the bucket holds only backups that verify.
 * The clean hook aborts the unfinished multipart uploads under the prefix (a
 * chief killed mid-upload leaves one).
 *
 * Errors: a permanent refusal (403, NoSuchBucket, a wrong region, a bad URI,
 * missing credentials) is CTRAIN_E_CONFIG (exit 78) naming the operation,
 * s3://bucket/key, the HTTP status and the server's Code; a transient
 * failure that outlasted the client's retries is CTRAIN_E_NET (exit 75).
 * Credentials come only from AWS_* in the environment and are never
 * logged. */
#ifndef CTRAIN_CKPT_STORE_S3_H
#define CTRAIN_CKPT_STORE_S3_H

#include <stddef.h>

#include "ctrain/err.h"
#include "worker/checkpoint/ckpt_store.h"
#include "worker/checkpoint/s3.h"

/* Backups up to this size go up in one PUT (S3 allows 5 GiB): written and
 * hashed in one pass, sent in one pass, stored without the server joining
 * parts. Larger ones go multipart (s3.h), each part hashed before it is
 * sent. On a failure a single PUT is retried whole. */
#define CKPT_S3_MULTIPART_THRESHOLD ((size_t)1 << 30)

/* Opens the store for opt->uri (multipart_threshold 0:
 * CKPT_S3_MULTIPART_THRESHOLD) (opt borrowed; the client copies what it
 * keeps). Sends no request: the first is the restore's clean. *out owned by
 * the caller (ckpt_store_free). CTRAIN_E_CONFIG for a bad URI, endpoint or
 * missing credentials. */
ctrain_err ckpt_store_open_s3(const s3_options *opt, ckpt_store **out, char *errbuf, size_t errlen);

#endif
