/* stream.c - the data stream (stream.h): open (the spec, the policy, the
 * index pass), an epoch's threads, draws out of the shuffle buffer. */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/endian.h"
#include "ctrain/log.h"
#include "ctrain/thread.h"
#include "worker/data/stream_impl.h"

#define STREAM_MIN_PREFETCH ((size_t)8 << 10)
#define STREAM_RING_BYTES   ((size_t)4 << 20)   /* the decoded ring, about */
#define STREAM_RING_MAX     256                 /* samples */
#define STREAM_FRAMER_BYTES ((size_t)128 << 10) /* a framer's input buffer and inflate state */

/* The policy for nfiles files and `world` workers, as data.c's (data.h). */
static ctrain_err resolve_policy(data_stream *s, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  data_shard_policy *p = &s->policy;
  int world = s->o.world, n = s->nfiles;
  *p = s->o.policy;
  if (*p == DATA_SHARD_AUTO && world > 1 && n < world)
    LOG_WARN("%s: --shard auto: %d data file(s) for %d workers, fewer files than workers: "
             "sharding by DATA (every worker reads every file and takes one record in %d)",
             s->o.flag, n, world, world);
  if (*p == DATA_SHARD_AUTO)
    *p = world > 1 && n >= world ? DATA_SHARD_FILE : DATA_SHARD_DATA;
  if (world == 1 && *p != DATA_SHARD_OFF)
    *p = DATA_SHARD_DATA;
  if (*p == DATA_SHARD_FILE && n < world)
    CTRAIN_FAIL(CTRAIN_E_CONFIG,
                "%s: --shard file: %d data file(s) for %d workers; FILE sharding needs at least "
                "one file per worker (use --shard auto or data)",
                s->o.flag, n, world);
out:
  return result;
}

static char *dup_or_null(const char *v, int *bad) {
  char *d = v ? strdup(v) : NULL;
  *bad |= v && !d;
  return d;
}

/* s->o and s->s3 with owned copies of their strings. */
static ctrain_err copy_options(data_stream *s, const data_stream_options *o, char *errbuf,
                               size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int bad = 0;
  s->o = *o;
  s->o.spec = dup_or_null(o->spec ? o->spec : "", &bad);
  s->o.flag = dup_or_null(o->flag ? o->flag : "--data", &bad);
  s->o.cache_dir = dup_or_null(o->cache_dir, &bad);
  s->fmt = o->fmt;
  s->fmt.feature_image = dup_or_null(o->fmt.feature_image, &bad);
  s->fmt.feature_label = dup_or_null(o->fmt.feature_label, &bad);
  if (o->s3)
    s->s3 = *o->s3;
  s->s3.uri = NULL;
  s->s3.endpoint = dup_or_null(s->s3.endpoint, &bad);
  s->s3.region = dup_or_null(s->s3.region, &bad);
  s->s3.ca_file = dup_or_null(s->s3.ca_file, &bad);
  s->o.s3 = &s->s3;
  s->prefetch = o->prefetch_bytes ? o->prefetch_bytes : DATA_STREAM_PREFETCH_DEFAULT;
  if (s->prefetch < STREAM_MIN_PREFETCH)
    s->prefetch = STREAM_MIN_PREFETCH;
  s->chunk = s->prefetch / 2 < DATA_STREAM_CHUNK ? s->prefetch / 2 : DATA_STREAM_CHUNK;
  if (s->o.world < 1)
    s->o.world = 1;
  if (s->o.rank < 0 || s->o.rank >= s->o.world)
    s->o.rank = 0;
  if (bad)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", s->o.flag);
out:
  return result;
}

/* This worker's files, read once: counts, shape, the cache filled. */
static ctrain_err index_pass(data_stream *s, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  stream_client cl = {0};
  uint64_t base = 0;
  s->mine = calloc((size_t)s->nfiles, sizeof(int));
  if (!s->mine)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", s->o.flag);
  for (int i = 0; i < s->nfiles; i++)
    if (s->policy != DATA_SHARD_FILE || i % s->o.world == s->o.rank)
      s->mine[s->nmine++] = i;
  for (int i = 0; i < s->nmine && !result; i++)
    result = stream_index_file(s, &s->files[s->mine[i]], &cl, errbuf, errlen);
  for (int i = 0; i < s->nmine && !result; i++) {
    stream_file *f = &s->files[s->mine[i]];
    f->base = base;
    base += f->records;
    f->kept = 0;
    for (uint64_t k = 0; k < f->records; k++)
      f->kept += (uint64_t)stream_keeps(s, f, k);
    s->count += f->kept;
  }
  if (!result && !s->count)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s %s: no records%s", s->o.flag, s->o.spec,
                s->policy == DATA_SHARD_FILE ? " in this worker's files" : "");
out:
  stream_client_free(&cl);
  return result;
}

/* The sizes and the arrays every epoch uses. */
static ctrain_err size_buffers(data_stream *s, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t d = (size_t)s->shape.dim, row = d * sizeof(float);
  s->sbuf = !s->o.shuffle                    ? 0
            : s->o.shuffle_buffer < s->count ? s->o.shuffle_buffer
                                             : (size_t)s->count;
  s->qcap = STREAM_RING_BYTES / (row ? row : 1);
  s->qcap = s->qcap < 2 ? 2 : s->qcap > STREAM_RING_MAX ? STREAM_RING_MAX : s->qcap;
  s->order = calloc((size_t)s->nmine, sizeof(int));
  s->first_pos = calloc((size_t)s->nmine, sizeof(uint64_t));
  s->want = calloc(s->sbuf + 1, sizeof(stream_want));
  s->slot_pos = calloc(s->sbuf + 1, sizeof(uint64_t));
  s->slot_x = calloc(s->sbuf + 1, row);
  s->slot_y = calloc(s->sbuf + 1, sizeof(int32_t));
  s->rx = calloc(s->qcap, row);
  s->ry = calloc(s->qcap, sizeof(int32_t));
  s->rpos = calloc(s->qcap, sizeof(uint64_t));
  if (!s->order || !s->first_pos || !s->want || !s->slot_pos || !s->slot_x || !s->slot_y ||
      !s->rx || !s->ry || !s->rpos)
    CTRAIN_FAIL(CTRAIN_E_NOMEM,
                "%s: out of memory for a shuffle buffer of %zu records of %zu "
                "features",
                s->o.flag, s->sbuf, d);
out:
  return result;
}

ctrain_err data_stream_open(const data_stream_options *o, data_stream **out, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  data_stream *s = calloc(1, sizeof(*s));
  *out = NULL;
  if (!s)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", o->flag ? o->flag : "--data");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  result = copy_options(s, o, errbuf, errlen);
  if (!result && !s->o.spec[0])
    CTRAIN_FAIL(CTRAIN_E_INVAL, "%s: no data given", s->o.flag);
  if (!result)
    result = stream_expand(s, errbuf, errlen);
  if (!result)
    result = resolve_policy(s, errbuf, errlen);
  if (!result)
    result = index_pass(s, errbuf, errlen);
  if (!result)
    result = size_buffers(s, errbuf, errlen);
  if (result)
    goto out;
  *out = s;
  s = NULL;
out:
  data_stream_free(s);
  return result;
}

uint64_t data_stream_count(const data_stream *s) {
  return s->count;
}

void data_stream_describe(const data_stream *s, data_set *ds) {
  memset(ds, 0, sizeof(*ds));
  ds->n = (size_t)s->count;
  ds->dim = s->shape.dim;
  ds->rank = s->shape.rank;
  memcpy(ds->shape, s->shape.shape, sizeof(ds->shape));
  ds->max_label = s->shape.max_label;
  ds->format = s->format;
  ds->policy = s->policy;
  ds->shard_rank = s->policy == DATA_SHARD_DATA ? s->o.rank : 0;
  ds->shard_world = s->policy == DATA_SHARD_DATA ? s->o.world : 1;
}

static void hash_u64(EVP_MD_CTX *md, uint64_t v) {
  uint8_t b[8];
  ctrain_put_le64(b, v);
  EVP_DigestUpdate(md, b, 8);
}

void data_stream_identity(const data_stream *s, uint8_t out[32]) {
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  unsigned n = 0;
  memset(out, 0, 32);
  if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1)
    goto out;
  for (int i = 0; i < s->nmine; i++) {
    const stream_file *f = &s->files[s->mine[i]];
    EVP_DigestUpdate(md, f->name, strlen(f->name) + 1);
    hash_u64(md, (uint64_t)f->size);
    EVP_DigestUpdate(md, f->etag, strlen(f->etag) + 1);
    hash_u64(md, f->records);
  }
  hash_u64(md, (uint64_t)s->policy);
  hash_u64(md, (uint64_t)s->o.shuffle);
  hash_u64(md, (uint64_t)s->o.shuffle_buffer);
  EVP_DigestFinal_ex(md, out, &n);
out:
  EVP_MD_CTX_free(md);
}

size_t data_stream_budget_bytes(const data_stream *s) {
  size_t per = (size_t)s->shape.dim * sizeof(float) + sizeof(int32_t) + sizeof(uint64_t);
  size_t b = s->prefetch + (s->sbuf + 1) * (per + sizeof(stream_want)) + s->qcap * per;
  /* the framer's record buffer doubles from 64 KiB to the largest record */
  size_t rec = s->max_record * 2 > ((size_t)64 << 10) ? s->max_record * 2 : (size_t)64 << 10;
  b += STREAM_FRAMER_BYTES + rec + (size_t)s->shape.dim * sizeof(float);
  if (s->format == DATA_FMT_NUMPY) /* a shard's bytes and its samples as floats */
    b += 5 * s->max_shard;
  return b;
}

size_t data_stream_peak_bytes(const data_stream *s) {
  return s->peak_held;
}

void data_stream_end(data_stream *s) {
  if (!s || !s->running)
    return;
  ctrain_mutex_lock(&s->mu);
  s->stop = 1;
  ctrain_cond_broadcast(&s->cv);
  ctrain_mutex_unlock(&s->mu);
  if (s->have_fetcher)
    pthread_join(s->fetcher, NULL);
  if (s->have_decoder)
    pthread_join(s->decoder, NULL);
  s->have_fetcher = s->have_decoder = 0;
  while (s->qhead) {
    stream_chunk *c = s->qhead;
    s->qhead = c->next;
    free(c);
  }
  free(s->cur);
  s->cur = NULL;
  s->qtail = NULL;
  s->held = 0;
  s->running = 0;
}

void data_stream_free(data_stream *s) {
  if (!s)
    return;
  data_stream_end(s);
  stream_files_free(s);
  free((char *)s->o.spec);
  free((char *)s->o.flag);
  free((char *)s->o.cache_dir);
  free((char *)s->fmt.feature_image);
  free((char *)s->fmt.feature_label);
  free((char *)s->s3.endpoint);
  free((char *)s->s3.region);
  free((char *)s->s3.ca_file);
  free(s->mine);
  free(s->order);
  free(s->first_pos);
  free(s->want);
  free(s->slot_pos);
  free(s->slot_x);
  free(s->slot_y);
  free(s->rx);
  free(s->ry);
  free(s->rpos);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
