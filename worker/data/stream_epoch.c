/* stream_epoch.c - an epoch of the data stream (stream.h): its threads,
 * draws out of the shuffle buffer, and data_stream_load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data/stream_impl.h"

#include "ctrain/thread.h"

/* Starts the fetcher (TFRecord) and the decoder from s->start. */
static ctrain_err start_threads(data_stream *s, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s->stop = s->dec_done = 0;
  s->fetch_done = s->format != DATA_FMT_TFRECORD || s->start >= s->nmine;
  s->held = 0;
  s->rhead = s->rn = 0;
  s->rerr = CTRAIN_OK;
  s->rmsg[0] = 0;
  s->running = 1;
  if (!s->fetch_done) {
    if (pthread_create(&s->fetcher, NULL, stream_fetch_main, s))
      CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: cannot start the fetcher thread", s->o.flag);
    s->have_fetcher = 1;
  }
  if (s->start >= s->nmine) {
    s->dec_done = 1;
    goto out;
  }
  if (pthread_create(&s->decoder, NULL, stream_decode_main, s))
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "%s: cannot start the decoder thread", s->o.flag);
  s->have_decoder = 1;
out:
  return result;
}

ctrain_err data_stream_begin(data_stream *s, int epoch, uint64_t skip, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  data_stream_end(s);
  result = stream_plan(s, epoch, skip, errbuf, errlen);
  if (!result)
    result = start_threads(s, errbuf, errlen);
  if (result)
    data_stream_end(s);
  return result;
}

/* The decoded sample at the head of the ring into x, y; its position in
 * *pos. A background failure is returned here, in order. */
static ctrain_err take(data_stream *s, float *x, int32_t *y, uint64_t *pos, char *errbuf,
                       size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t d = (size_t)s->shape.dim;
  ctrain_mutex_lock(&s->mu);
  while (!s->rn && !s->dec_done)
    ctrain_cond_wait(&s->cv, &s->mu);
  if (!s->rn) {
    result = s->rerr ? s->rerr : CTRAIN_E_DATA;
    snprintf(errbuf, errlen, "%s", s->rerr ? s->rmsg : "the data ended before the epoch's count");
  } else {
    memcpy(x, s->rx + s->rhead * d, d * sizeof(float));
    *y = s->ry[s->rhead];
    *pos = s->rpos[s->rhead];
    s->rhead = (s->rhead + 1) % s->qcap;
    s->rn--;
    ctrain_cond_broadcast(&s->cv);
  }
  ctrain_mutex_unlock(&s->mu);
  return result;
}

/* take() of the record at position `want` (the decoder's order). */
static ctrain_err take_at(data_stream *s, uint64_t want, float *x, int32_t *y, char *errbuf,
                          size_t errlen) {
  uint64_t pos = 0;
  ctrain_err result = take(s, x, y, &pos, errbuf, errlen);
  if (!result && pos != want) {
    snprintf(errbuf, errlen, "%s: the stream gave record %llu where %llu was due", s->o.flag,
             (unsigned long long)pos, (unsigned long long)want);
    result = CTRAIN_E_DATA;
  }
  return result;
}

/* The buffer's slots the resume (or the first fill) still waits for. */
static ctrain_err catch_up(data_stream *s, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t d = (size_t)s->shape.dim;
  while (s->iwant < s->nwant && !result) {
    const stream_want *w = &s->want[s->iwant];
    result = take_at(s, w->pos, s->slot_x + w->slot * d, &s->slot_y[w->slot], errbuf, errlen);
    s->iwant += !result;
  }
  return result;
}

/* One draw into x, y. */
static ctrain_err draw_one(data_stream *s, float *x, int32_t *y, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t d = (size_t)s->shape.dim;
  int refill = 0;
  if (!s->sbuf) {
    result = take_at(s, s->next_in, x, y, errbuf, errlen);
    s->next_in += !result;
    return result;
  }
  result = catch_up(s, errbuf, errlen);
  if (result)
    return result;
  uint64_t in = s->next_in;
  size_t j = stream_draw(s, &refill);
  memcpy(x, s->slot_x + j * d, d * sizeof(float));
  *y = s->slot_y[j];
  if (refill)
    return take_at(s, in, s->slot_x + j * d, &s->slot_y[j], errbuf, errlen);
  if (j != s->size) { /* the last slot moves into the drawn one */
    memcpy(s->slot_x + j * d, s->slot_x + s->size * d, d * sizeof(float));
    s->slot_y[j] = s->slot_y[s->size];
  }
  return result;
}

ctrain_err data_stream_next(data_stream *s, size_t n, float *x, int32_t *y, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t d = (size_t)s->shape.dim;
  if (!s->running)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "%s: no epoch begun (data_stream_begin)", s->o.flag);
  if (n > s->count - s->drawn)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "%s: %zu records asked, %llu left of the epoch's %llu", s->o.flag,
                n, (unsigned long long)(s->count - s->drawn), (unsigned long long)s->count);
  for (size_t i = 0; i < n && !result; i++) {
    result = draw_one(s, x + i * d, y + i, errbuf, errlen);
    s->drawn += !result;
  }
out:
  return result;
}

ctrain_err data_stream_load(const data_stream_options *o, data_set *ds, char *errbuf,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  data_stream_options all = *o;
  data_stream *s = NULL;
  memset(ds, 0, sizeof(*ds));
  all.policy = DATA_SHARD_OFF;
  all.rank = 0;
  all.world = 1;
  all.shuffle = 0;
  all.shuffle_buffer = 0;
  result = data_stream_open(&all, &s, errbuf, errlen);
  if (!result)
    result = data_stream_begin(s, 0, 0, errbuf, errlen);
  if (!result)
    result = data_grow(ds, s->count, (uint64_t)s->shape.dim, s->o.flag, errbuf, errlen);
  if (!result)
    result = data_stream_next(s, (size_t)s->count, ds->x, ds->y, errbuf, errlen);
  if (result)
    goto out;
  float *x = ds->x;
  int32_t *y = ds->y;
  data_stream_describe(s, ds);
  ds->x = x;
  ds->y = y;
  ds->policy = DATA_SHARD_DATA;
  ds->shard_world = o->world > 1 ? o->world : 1;
  ds->shard_rank = o->rank >= 0 && o->rank < ds->shard_world ? o->rank : 0;
out:
  data_stream_free(s);
  if (result)
    data_free(ds);
  return result;
}
