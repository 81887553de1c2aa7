/* stream_decode.c - the index pass over a file and the decoder thread:
 * the one TFRecord framer (tfrecord.h) over the byte queue, or a NumPy
 * shard read whole, into the decoded ring (stream_impl.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data/stream_impl.h"
#include "worker/data/tfrecord.h"

#include "ctrain/thread.h"

int stream_keeps(const data_stream *s, const stream_file *f, uint64_t k) {
  return s->policy != DATA_SHARD_DATA ||
         (f->base + k) % (uint64_t)s->o.world == (uint64_t)s->o.rank;
}

/* ---- The index pass ---- */

/* A file's bytes through a buffer of one chunk (a ranged GET each). */
typedef struct {
  stream_src src;
  uint8_t *buf;
  size_t len, off;
  float *row; /* scratch for one sample */
  int dim;
} index_ctx;

static ctrain_err index_read(void *arg, void *buf, size_t n, size_t *got, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  index_ctx *c = arg;
  if (c->off == c->len) {
    result = stream_src_read(&c->src, c->buf, c->src.s->chunk, &c->len, errbuf, errlen);
    c->off = 0;
    if (result)
      c->len = 0;
  }
  *got = c->len - c->off < n ? c->len - c->off : n;
  memcpy(buf, c->buf + c->off, *got);
  c->off += *got;
  return result;
}

static ctrain_err index_row(void *arg, int dim, float **x, const char *w, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  index_ctx *c = arg;
  if (c->dim != dim) {
    float *r = realloc(c->row, (size_t)dim * sizeof(float));
    if (!r)
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: out of memory", w);
    c->row = r;
    c->dim = dim;
  }
  *x = c->row;
out:
  return result;
}

/* Counts and checks the records of a TFRecord file, filling the cache. */
static ctrain_err index_tfr(data_stream *s, stream_file *f, stream_client *cl, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  index_ctx c = {0};
  tfr_reader *r = NULL;
  const uint8_t *rec = NULL;
  size_t len = 0;
  int end = 0;
  result = stream_src_open(s, f, cl, 1, &c.src, errbuf, errlen);
  if (!result && !(c.buf = malloc(s->chunk)))
    result = CTRAIN_E_NOMEM;
  if (!result)
    result = tfr_reader_open(f->name, s->fmt.compression, index_read, &c, &r, errbuf, errlen);
  for (f->records = 0; !result;) {
    int32_t y = 0;
    result = tfr_reader_next(r, &rec, &len, &end, errbuf, errlen);
    if (result || end)
      break;
    result = tfr_decode(&s->fmt, rec, len, &s->shape, index_row, &c, &y, r, errbuf, errlen);
    f->records++;
    if (y > s->shape.max_label)
      s->shape.max_label = y;
    if (len > s->max_record)
      s->max_record = len;
  }
  if (result == CTRAIN_E_NOMEM && !c.buf)
    snprintf(errbuf, errlen, "%s: out of memory", f->name);
  ctrain_err closed = stream_src_close(&c.src, !result, errbuf, result ? 0 : errlen);
  result = result ? result : closed;
  tfr_reader_close(r);
  free(c.buf);
  free(c.row);
  return result;
}

static ctrain_err index_npy(data_stream *s, stream_file *f, stream_client *cl, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  data_set ds;
  result = stream_npy_read(s, f, cl, &ds, errbuf, errlen);
  if (result)
    goto out;
  if (s->shape.dim && s->shape.dim != ds.dim)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s: samples of %d features, earlier files have %d", f->name, ds.dim,
                s->shape.dim);
  if (!s->shape.dim) {
    s->shape.dim = ds.dim;
    s->shape.rank = ds.rank;
    memcpy(s->shape.shape, ds.shape, sizeof(ds.shape));
  }
  if (ds.max_label > s->shape.max_label)
    s->shape.max_label = ds.max_label;
  f->records = ds.n;
  if ((size_t)f->size > s->max_shard)
    s->max_shard = (size_t)f->size;
out:
  data_free(&ds);
  return result;
}

/* Messages start with the flag (stream.h); the framer's name the file. */
static void name_flag(const data_stream *s, char *errbuf, size_t errlen) {
  size_t k = strlen(s->o.flag), n = strlen(errbuf);
  if (!errlen || !strncmp(errbuf, s->o.flag, k) || n + k + 2 > errlen)
    return;
  memmove(errbuf + k + 1, errbuf, n + 1);
  memcpy(errbuf, s->o.flag, k);
  errbuf[k] = ' ';
}

static ctrain_err index_file(data_stream *s, stream_file *f, stream_client *cl, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (f->key && s->o.cache_dir)
    result = stream_cache_lookup(s->o.cache_dir, f->name, f->size, f->etag, &f->cache_path, errbuf,
                                 errlen);
  if (result)
    return result;
  if (s->format == DATA_FMT_NUMPY)
    return index_npy(s, f, cl, errbuf, errlen);
  result = index_tfr(s, f, cl, errbuf, errlen);
  if (!result && f->key && s->o.cache_dir && !f->cache_path)
    result = stream_cache_lookup(s->o.cache_dir, f->name, f->size, f->etag, &f->cache_path, errbuf,
                                 errlen);
  return result;
}

ctrain_err stream_index_file(data_stream *s, stream_file *f, stream_client *cl, char *errbuf,
                             size_t errlen) {
  ctrain_err result = index_file(s, f, cl, errbuf, errlen);
  if (result)
    name_flag(s, errbuf, errlen);
  return result;
}

/* ---- The decoder thread ---- */

typedef struct {
  data_stream *s;
  uint64_t pos; /* the next kept record's position */
  size_t iw;    /* wanted positions met */
  int at_end;   /* the current file's end was read */
  data_set shape;
  stream_client cl; /* NumPy objects */
} dec_ctx;

/* The byte queue as the framer's source. */
static ctrain_err queue_read(void *arg, void *buf, size_t n, size_t *got, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  dec_ctx *d = arg;
  data_stream *s = d->s;
  *got = 0;
  ctrain_mutex_lock(&s->mu);
  while (*got < n && !d->at_end && !result) {
    if (!s->cur) {
      while (!s->qhead && !s->stop && !s->fetch_done)
        ctrain_cond_wait(&s->cv, &s->mu);
      if (s->stop) {
        result = CTRAIN_E_CANCELLED;
        break;
      }
      if (!s->qhead) {
        snprintf(errbuf, errlen, "%s: the read-ahead ended early", s->o.flag);
        result = CTRAIN_E_DATA;
        break;
      }
      s->cur = s->qhead;
      s->qhead = s->cur->next;
      if (!s->qhead)
        s->qtail = NULL;
      s->cur_off = 0;
      if (s->cur->err) {
        snprintf(errbuf, errlen, "%s", s->cur->msg);
        result = s->cur->err;
      }
      d->at_end = s->cur->eof;
    }
    size_t k = s->cur->len - s->cur_off < n - *got ? s->cur->len - s->cur_off : n - *got;
    memcpy((uint8_t *)buf + *got, s->cur->data + s->cur_off, k);
    *got += k;
    s->cur_off += k;
    if (s->cur_off == s->cur->len) {
      s->held -= s->cur->len;
      free(s->cur);
      s->cur = NULL;
      ctrain_cond_broadcast(&s->cv);
    }
  }
  ctrain_mutex_unlock(&s->mu);
  return result;
}

/* The next free slot of the ring (waits for room). */
static ctrain_err ring_row(void *arg, int dim, float **x, const char *w, char *errbuf,
                           size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  dec_ctx *d = arg;
  data_stream *s = d->s;
  ctrain_mutex_lock(&s->mu);
  while (s->rn == s->qcap && !s->stop)
    ctrain_cond_wait(&s->cv, &s->mu);
  if (s->stop)
    result = CTRAIN_E_CANCELLED;
  else
    *x = s->rx + ((s->rhead + s->rn) % s->qcap) * (size_t)dim;
  ctrain_mutex_unlock(&s->mu);
  (void)w, (void)errbuf, (void)errlen;
  return result;
}

/* Publishes the slot ring_row gave as position d->pos. */
static void ring_commit(dec_ctx *d, int32_t y) {
  data_stream *s = d->s;
  ctrain_mutex_lock(&s->mu);
  size_t i = (s->rhead + s->rn) % s->qcap;
  s->ry[i] = y;
  s->rpos[i] = d->pos;
  s->rn++;
  ctrain_cond_broadcast(&s->cv);
  ctrain_mutex_unlock(&s->mu);
}

/* Whether position d->pos goes to the ring (a resume skips those drawn). */
static int wanted(dec_ctx *d) {
  const data_stream *s = d->s;
  if (d->pos >= s->catch_end)
    return 1;
  if (d->iw < s->nwant && s->want[d->iw].pos == d->pos) {
    d->iw++;
    return 1;
  }
  return 0;
}

static ctrain_err counted(const data_stream *s, const stream_file *f, uint64_t k, char *errbuf,
                          size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (k != f->records)
    CTRAIN_FAIL(CTRAIN_E_DATA, "%s %s: %llu records, %llu when it was counted (it changed)",
                s->o.flag, f->name, (unsigned long long)k, (unsigned long long)f->records);
out:
  return result;
}

static ctrain_err decode_tfr(dec_ctx *d, const stream_file *f, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  data_stream *s = d->s;
  tfr_reader *r = NULL;
  const uint8_t *rec = NULL;
  size_t len = 0;
  uint64_t k = 0;
  int end = 0;
  d->at_end = 0;
  result = tfr_reader_open(f->name, s->fmt.compression, queue_read, d, &r, errbuf, errlen);
  for (; !result; k++) {
    int32_t y = 0;
    result = tfr_reader_next(r, &rec, &len, &end, errbuf, errlen);
    if (result || end)
      break;
    if (!stream_keeps(s, f, k))
      continue;
    if (wanted(d)) {
      result = tfr_decode(&s->fmt, rec, len, &d->shape, ring_row, d, &y, r, errbuf, errlen);
      if (!result)
        ring_commit(d, y);
    }
    d->pos++;
  }
  tfr_reader_close(r);
  return result ? result : counted(s, f, k, errbuf, errlen);
}

static ctrain_err decode_npy(dec_ctx *d, stream_file *f, char *errbuf, size_t errlen) {
  data_stream *s = d->s;
  data_set ds;
  float *x = NULL;
  ctrain_err result = stream_npy_read(s, f, &d->cl, &ds, errbuf, errlen);
  if (!result && ds.dim != s->shape.dim) {
    snprintf(errbuf, errlen, "%s %s: %d features, %d when it was counted (it changed)", s->o.flag,
             f->name, ds.dim, s->shape.dim);
    result = CTRAIN_E_DATA;
  }
  if (!result)
    result = counted(s, f, ds.n, errbuf, errlen);
  for (uint64_t k = 0; k < ds.n && !result; k++) {
    if (!stream_keeps(s, f, k))
      continue;
    if (wanted(d) && !(result = ring_row(d, ds.dim, &x, f->name, errbuf, errlen))) {
      memcpy(x, ds.x + k * (size_t)ds.dim, (size_t)ds.dim * sizeof(float));
      ring_commit(d, ds.y[k]);
    }
    d->pos++;
  }
  data_free(&ds);
  return result;
}

void *stream_decode_main(void *arg) {
  data_stream *s = arg;
  dec_ctx d = {.s = s, .shape = s->shape};
  ctrain_err result = CTRAIN_OK;
  char msg[STREAM_MSG] = "";
  d.pos = s->start < s->nmine ? s->first_pos[s->start] : s->count;
  for (int i = s->start; i < s->nmine && !result; i++) {
    stream_file *f = &s->files[s->order[i]];
    result = s->format == DATA_FMT_NUMPY ? decode_npy(&d, f, msg, sizeof(msg))
                                         : decode_tfr(&d, f, msg, sizeof(msg));
  }
  stream_client_free(&d.cl);
  name_flag(s, msg, sizeof(msg));
  ctrain_mutex_lock(&s->mu);
  if (result && result != CTRAIN_E_CANCELLED) {
    s->rerr = result;
    snprintf(s->rmsg, sizeof(s->rmsg), "%s", msg);
  }
  s->dec_done = 1;
  ctrain_cond_broadcast(&s->cv);
  ctrain_mutex_unlock(&s->mu);
  return NULL;
}
