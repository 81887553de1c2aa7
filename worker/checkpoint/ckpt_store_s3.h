/* worker/checkpoint/ckpt_store_s3.h - the backup store in object storage
 * (--backup-uri s3://bucket/prefix or gs://bucket/prefix), behind
 * ckpt_store.h's interface, over the S3 client of ctrain/s3.h (objstore/).
 *
 * A backup is the object <prefix>/backup-<step>.ckpt. A save up to the
 * multipart threshold reads the image straight from the state's arrays
 * (ckpt_image: no staging copy; its SHA-256 computed on a second thread
 * while the bytes are sent) in one PUT, aws-chunked with the image's
 * SHA-256 as the trailing x-amz-checksum-sha256 (s3://), or signed as
 * x-amz-content-sha256 (gs://); a larger one is staged in an unlinked local
 * file (TMPDIR, else /tmp) and uploaded multipart (s3_put_fd), completed or
 * aborted. Either way the object appears only when whole and the store
 * checks the body against its SHA-256. A restore downloads to a staging
 * file (the store's checksum checked on the way) and verifies our own header and SHA-256
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
#include "ctrain/s3.h"
#include "worker/checkpoint/ckpt_store.h"

/* Backups up to this size go up in one PUT (S3 allows 5 GiB): read from
 * memory once, hashed beside the send, stored without the server joining
 * parts. Larger ones go multipart (s3.h), each part hashed before it is
 * sent. On a failure a single PUT is retried whole. */
#define CKPT_S3_MULTIPART_THRESHOLD ((size_t)1 << 30)

/* Opens the store for opt->uri (multipart_threshold 0:
 * CKPT_S3_MULTIPART_THRESHOLD) (opt borrowed; the client copies what it
 * keeps). Sends no request: the first is the restore's clean. *out owned by
 * the caller (ckpt_store_free). CTRAIN_E_CONFIG for a bad URI, endpoint or
 * missing credentials. */
CTRAIN_NODISCARD ctrain_err ckpt_store_open_s3(const s3_options *opt, ckpt_store **out,
                                               char *errbuf, size_t errlen);

#endif
