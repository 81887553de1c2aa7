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
CTRAIN_NODISCARD ctrain_err tfr_load(const char *path, const data_format *fmt, data_set *ds,
                                     char *errbuf, size_t errlen);

/* One decoder of the framing for every byte source: tfr_load's file and
 * the stream's byte queue (worker/data/stream.h). A source reads up to n
 * bytes into buf, *got < n only at its end; an error names the source in
 * errbuf. */
typedef ctrain_err (*tfr_read_fn)(void *arg, void *buf, size_t n, size_t *got, char *errbuf,
                                  size_t errlen);

typedef struct tfr_reader tfr_reader;

/* A reader of the records `read` gives; `name` (borrowed, alive while the
 * reader is) names them in messages; comp AUTO as above (reads the first
 * two bytes). */
CTRAIN_NODISCARD ctrain_err tfr_reader_open(const char *name, data_compression comp,
                                            tfr_read_fn read, void *arg, tfr_reader **out,
                                            char *errbuf, size_t errlen);

/* The next record's data (CRCs checked) in *rec (borrowed until the next
 * call), or *end at a clean end of the records. */
CTRAIN_NODISCARD ctrain_err tfr_reader_next(tfr_reader *r, const uint8_t **rec, size_t *len,
                                            int *end, char *errbuf, size_t errlen);

/* "NAME: record K at offset O[ of the GZIP stream]" of the last record. */
void tfr_reader_where(const tfr_reader *r, char *w, size_t n);

void tfr_reader_close(tfr_reader *r);

/* Where tfr_decode puts a sample's dim features: *x; `name` is the
 * source's, for a message. */
typedef ctrain_err (*tfr_row_fn)(void *arg, int dim, float **x, const char *name, char *errbuf,
                                 size_t errlen);

/* Decodes the Example rec[0..len) as fmt says: the shape from --image-shape
 * or the first float_list (set in shape's dim, rank and shape when its dim
 * is 0, else the record must agree), the features into the row `row` gives,
 * the label into *y. A message starts with where `at`'s last record is
 * (tfr_reader_where), formatted only then. */
CTRAIN_NODISCARD ctrain_err tfr_decode(const data_format *fmt, const uint8_t *rec, size_t len,
                                       data_set *shape, tfr_row_fn row, void *arg, int32_t *y,
                                       const tfr_reader *at, char *errbuf, size_t errlen);

#endif
