/* example.c - tf.train.Example features from the protobuf wire format. */
#include "worker/data/example.h"

#include <stdio.h>
#include <string.h>

typedef struct {
  const uint8_t *p, *end;
} pb_reader;

typedef struct {
  uint32_t num; /* field number */
  int wt;       /* wire type: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32 */
  uint64_t v;   /* wt 0: the value */
  const uint8_t *data;
  size_t len; /* wt 1, 2, 5: the bytes */
} pb_field;

/* A base-128 varint of at most 10 bytes; -1 when truncated or longer. */
static int pb_varint(pb_reader *r, uint64_t *v) {
  uint64_t x = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (r->p == r->end)
      return -1;
    uint8_t b = *r->p++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return -1;
}

/* The next field: 1, 0 at the end of the message, -1 when malformed (the
 * reason in *why). Every length is checked against what is left. */
static int pb_next(pb_reader *r, pb_field *f, const char **why) {
  uint64_t key, n;
  if (r->p == r->end)
    return 0;
  if (pb_varint(r, &key)) {
    *why = "truncated field key";
    return -1;
  }
  f->num = (uint32_t)(key >> 3);
  f->wt = (int)(key & 7);
  if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff) {
    *why = "field number out of range";
    return -1;
  }
  switch (f->wt) {
  case 0:
    if (pb_varint(r, &f->v)) {
      *why = "truncated varint";
      return -1;
    }
    return 1;
  case 1:
  case 5:
    n = f->wt == 1 ? 8 : 4;
    break;
  case 2:
    if (pb_varint(r, &n)) {
      *why = "truncated length";
      return -1;
    }
    break;
  default:
    *why = "groups and wire types 6, 7 are not valid here";
    return -1;
  }
  if (n > (uint64_t)(r->end - r->p)) {
    *why = "length past the end of the message";
    return -1;
  }
  f->data = r->p;
  f->len = (size_t)n;
  r->p += n;
  return 1;
}

/* Counts the values of one occurrence of a list message (kind says which)
 * into f. */
static int count_list(const pb_field *lf, example_feature *f, const char **why) {
  pb_reader r = {lf->data, lf->data + lf->len};
  pb_field v = {0};
  int rc;
  while ((rc = pb_next(&r, &v, why)) > 0) {
    if (v.num != 1)
      continue;
    if (f->kind == EXAMPLE_BYTES && v.wt == 2) {
      f->bytes = v.data;
      f->bytes_len = v.len;
      f->count++;
    } else if (f->kind == EXAMPLE_FLOAT && (v.wt == 2 || v.wt == 5)) {
      if (v.len % 4) {
        *why = "packed float_list of a length not a multiple of 4";
        return -1;
      }
      f->count += v.len / 4;
    } else if (f->kind == EXAMPLE_INT64 && v.wt == 0) {
      f->count++;
    } else if (f->kind == EXAMPLE_INT64 && v.wt == 2) {
      pb_reader pr = {v.data, v.data + v.len};
      uint64_t x;
      while (pr.p < pr.end) {
        if (pb_varint(&pr, &x)) {
          *why = "truncated varint in a packed int64_list";
          return -1;
        }
        f->count++;
      }
    } else {
      *why = "list value of the wrong wire type";
      return -1;
    }
  }
  return rc;
}

/* Decodes a Feature message into f: the list set last wins; its repeats
 * concatenate (f->from marks where the winning run starts). */
static int decode_feature(const uint8_t *p, size_t len, example_feature *f, const char **why) {
  pb_reader r = {p, p + len};
  pb_field lf = {0};
  int rc;
  memset(f, 0, sizeof(*f));
  f->end = p + len;
  const uint8_t *at = r.p;
  while ((rc = pb_next(&r, &lf, why)) > 0) {
    if (lf.num >= 1 && lf.num <= 3) {
      if (lf.wt != 2) {
        *why = "Feature list of the wrong wire type";
        return -1;
      }
      if ((int)lf.num != (int)f->kind) {
        f->kind = (example_kind)lf.num;
        f->count = 0;
        f->bytes = NULL;
        f->bytes_len = 0;
        f->from = at;
      }
      if (count_list(&lf, f, why))
        return -1;
    }
    at = r.p;
  }
  return rc;
}

/* Walks one Features message; the Feature of the last entry keyed `name`
 * into *val (NULL when none). */
static int find_in_features(const pb_field *ff, const char *name, const uint8_t **val, size_t *vlen,
                            int *found, const char **why) {
  pb_reader r = {ff->data, ff->data + ff->len};
  pb_field ef = {0};
  size_t nlen = strlen(name);
  int rc;
  while ((rc = pb_next(&r, &ef, why)) > 0) {
    if (ef.num != 1)
      continue;
    if (ef.wt != 2) {
      *why = "Features.feature entry of the wrong wire type";
      return -1;
    }
    pb_reader er = {ef.data, ef.data + ef.len};
    pb_field kv = {0};
    const uint8_t *key = (const uint8_t *)"", *v = (const uint8_t *)"";
    size_t klen = 0, vl = 0;
    int erc;
    while ((erc = pb_next(&er, &kv, why)) > 0) {
      if ((kv.num == 1 || kv.num == 2) && kv.wt != 2) {
        *why = "map entry key or value of the wrong wire type";
        return -1;
      }
      if (kv.num == 1) {
        key = kv.data;
        klen = kv.len;
      } else if (kv.num == 2) {
        v = kv.data;
        vl = kv.len;
      }
    }
    if (erc)
      return -1;
    if (klen == nlen && !memcmp(key, name, nlen)) {
      *val = v;
      *vlen = vl;
      *found = 1;
    }
  }
  return rc;
}

ctrain_err example_find(const uint8_t *rec, size_t len, const char *name, example_feature *f,
                        char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  pb_reader r = {rec, rec + len};
  pb_field ff = {0};
  const char *why = NULL;
  const uint8_t *val = NULL;
  size_t vlen = 0;
  int rc, found = 0;
  memset(f, 0, sizeof(*f));
  while ((rc = pb_next(&r, &ff, &why)) > 0) {
    if (ff.num != 1)
      continue;
    if (ff.wt != 2)
      CTRAIN_FAIL(CTRAIN_E_DATA, "not a tf.train.Example: field 1 (features) of wire type %d",
                  ff.wt);
    if (find_in_features(&ff, name, &val, &vlen, &found, &why))
      CTRAIN_FAIL(CTRAIN_E_DATA, "malformed tf.train.Example: %s", why);
  }
  if (rc)
    CTRAIN_FAIL(CTRAIN_E_DATA, "malformed tf.train.Example: %s", why);
  if (found && decode_feature(val, vlen, f, &why))
    CTRAIN_FAIL(CTRAIN_E_DATA, "malformed tf.train.Example: feature '%s': %s", name, why);
out:
  return result;
}

static float le_float(const uint8_t *p) {
  uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* Calls back each value of the winning list of f, which decode_feature
 * has already checked, so no error can occur here. */
static void each_value(const example_feature *f, float *fd, int64_t *id) {
  pb_reader r = {f->from, f->end};
  pb_field lf = {0}, v = {0};
  const char *why;
  size_t k = 0;
  while (pb_next(&r, &lf, &why) > 0) {
    if ((int)lf.num != (int)f->kind)
      continue;
    pb_reader lr = {lf.data, lf.data + lf.len};
    while (pb_next(&lr, &v, &why) > 0) {
      if (v.num != 1)
        continue;
      if (fd) {
        for (size_t j = 0; j + 4 <= v.len && k < f->count; j += 4)
          fd[k++] = le_float(v.data + j);
      } else if (v.wt == 0 && k < f->count) {
        id[k++] = (int64_t)v.v;
      } else {
        pb_reader pr = {v.data, v.data + v.len};
        uint64_t x;
        while (k < f->count && !pb_varint(&pr, &x))
          id[k++] = (int64_t)x;
      }
    }
  }
}

void example_floats(const example_feature *f, float *dst) {
  each_value(f, dst, NULL);
}

void example_int64s(const example_feature *f, int64_t *dst) {
  each_value(f, NULL, dst);
}
