/* tests/unit/tfrecord_writer.h - the tiny TFRecord writer the data-stream
 * tests share (the library ctrain_test_tfrecord, tfrecord_writer.c): the
 * tf.train.Example of a float image and an int64 label, the TFRecord framing
 * of one record, and GZIP or ZLIB compression of a buffer. Used by
 * test_data_stream.c and test_data_stream_hostile.c. */
#ifndef CTRAIN_TEST_TFRECORD_WRITER_H
#define CTRAIN_TEST_TFRECORD_WRITER_H

#include <stddef.h>
#include <stdint.h>

/* The bytes one record's framing adds: the length (le64), its masked CRC
 * (le32) and the data's masked CRC (le32). */
#define TFW_FRAME_OVERHEAD 16

/* The most bytes tfw_example writes for `dim` floats and `pad` bytes of
 * noise: the values plus the keys, tags and lengths around them. */
size_t tfw_example_bound(int dim, size_t pad);

/* Encodes into out (tfw_example_bound(dim, pad) bytes) the Example
 * {"image": float_list of image[0..dim), "label": int64_list {label}} and,
 * with pad > 0, "pad": bytes_list of one value, `pad` bytes of xorshift noise
 * seeded from noise_seed (a feature no reader asks for, which makes the
 * record larger). Returns the Example's length. */
size_t tfw_example(uint8_t *out, const float *image, int dim, int64_t label, size_t pad,
                   uint32_t noise_seed);

/* Frames record rec[0..len) as TFRecord into out (len + TFW_FRAME_OVERHEAD
 * bytes): its length and that length's masked CRC32C, the data, then the
 * data's masked CRC32C, with one bit flipped when bad_crc (a record the
 * reader must reject as corrupt). Returns len + TFW_FRAME_OVERHEAD. */
size_t tfw_frame(uint8_t *out, const uint8_t *rec, size_t len, int bad_crc);

/* The container of tfw_compress: one GZIP member or one ZLIB stream. */
typedef enum tfw_format { TFW_GZIP, TFW_ZLIB } tfw_format;

/* Compresses d[0..len) at zlib `level` (Z_BEST_SPEED..Z_BEST_COMPRESSION, or
 * Z_DEFAULT_COMPRESSION) as `fmt`; returns the malloc'd bytes, their length
 * in *out_len. Asserts on failure. */
uint8_t *tfw_compress(const uint8_t *d, size_t len, tfw_format fmt, int level, size_t *out_len);

#endif
