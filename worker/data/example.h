/* worker/data/example.h - one feature of a tf.train.Example, decoded from the
 * protobuf wire format by hand.
 *
 * The schema (tensorflow/core/example/{example,feature}.proto) is four small
 * messages: Example {Features features = 1}, Features {map<string, Feature>
 * feature = 1}, Feature {oneof: BytesList bytes_list = 1, FloatList
 * float_list = 2, Int64List int64_list = 3}, each list {repeated value = 1}
 * (floats and int64s packed or not). A hand decoder of these is about 150
 * lines with every length checked against the record, needs no generated
 * code, and is fuzzed (tests/fuzz/fuzz_tfrecord.c); protobuf-c would bring a
 * library and generated sources for the same four messages.
 *
 * Protobuf's merge rules hold: a message field repeated is merged (features
 * of every `features` field count), a map key given twice keeps the last
 * entry, a oneof keeps the member set last (repeats of that member
 * concatenate), unknown fields are skipped. Groups (wire types 3, 4) are
 * malformed, as in proto3. */
#ifndef CTRAIN_DATA_EXAMPLE_H
#define CTRAIN_DATA_EXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"

typedef enum {
  EXAMPLE_NONE = 0, /* absent, or a Feature with no list set */
  EXAMPLE_BYTES = 1,
  EXAMPLE_FLOAT = 2,
  EXAMPLE_INT64 = 3
} example_kind;

typedef struct {
  example_kind kind;
  size_t count;         /* values in the list */
  const uint8_t *bytes; /* BYTES: the last value (borrowed from the record) */
  size_t bytes_len;
  const uint8_t *from, *end; /* the Feature's fields of this list (borrowed) */
} example_feature;

/* Finds the feature `name` in the serialized Example rec[0..len): f->kind is
 * EXAMPLE_NONE when the Example has no such feature. CTRAIN_E_DATA on
 * malformed wire data, the reason (and the field) in errbuf. f borrows rec. */
CTRAIN_NODISCARD ctrain_err example_find(const uint8_t *rec, size_t len, const char *name,
                                         example_feature *f, char *errbuf, size_t errlen);

/* The f->count values of a FLOAT feature into dst (in the order given). */
void example_floats(const example_feature *f, float *dst);

/* The f->count values of an INT64 feature into dst. */
void example_int64s(const example_feature *f, int64_t *dst);

#endif
