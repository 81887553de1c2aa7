/* worker/data/tfrecord.h - TFRecord files of tf.train.Example records.
 *
 * A TFRecord file is a sequence of records, each (integers little-endian)
 *   length       u64
 *   length_crc   u32  masked CRC32C of the 8 length bytes
 *   data         length bytes
 *   data_crc     u32  masked CRC32C of the data
 * where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8, as TensorFlow's
 * tf.io.TFRecordWriter writes it (tensorflow/core/lib/io/record_writer.cc).
 * The whole file may be GZIP- or ZLIB-compressed, as TFRecordOptions
 * (compression_type "GZIP" / "ZLIB") makes it; --compression auto takes GZIP
 * when the file starts with the gzip magic, ZLIB when its name ends in .zlib
 * or .zz, else none.
 *
 * Both CRCs are verified. A bad CRC, a truncated record, a malformed
 * Example or a missing or mistyped feature is CTRAIN_E_DATA (exit 65),
 * naming the file, the record's index and its byte offset (in the
 * uncompressed stream for a compressed file). A record is at most 256 MiB
 * and its buffer grows as its bytes arrive, so a length that lies costs no
 * more memory than the file. */
#ifndef CTRAIN_DATA_TFRECORD_H
#define CTRAIN_DATA_TFRECORD_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"
#include "worker/data/data.h"

/* CRC32C (Castagnoli) of p[0..n) continuing from crc (0 to start). */
uint32_t tfr_crc32c(uint32_t crc, const void *p, size_t n);

/* TFRecord's masked CRC32C of p[0..n). */
uint32_t tfr_masked_crc(const void *p, size_t n);

/* True when `path`'s name says TFRecord: it ends in .tfrecord or
 * .tfrecords, optionally followed by .gz, .zlib or .zz. */
int tfr_name_matches(const char *path);

/* Appends the Examples of the TFRecord file `path` to ds, decoded as `fmt`
 * says (features, shape, compression). On error ds may hold some of the
 * file's samples; the caller frees it. */
ctrain_err tfr_load(const char *path, const data_format *fmt, data_set *ds, char *errbuf,
                    size_t errlen);

#endif
