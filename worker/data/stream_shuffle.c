/* stream_shuffle.c - the epoch's file order and the shuffle buffer's index
 * replay (stream_impl.h). */
#include <stdlib.h>
#include <string.h>

#include "ctrain/rng.h"
#include "worker/data/stream_impl.h"

#define STREAM_FILE_SEED   0x46494c4500000000ull /* "FILE" */
#define STREAM_BUFFER_SEED 0x5342554600000000ull /* "SBUF" */

/* The epoch's order of this worker's files: the natural one, or a
 * Fisher-Yates shuffle seeded by (seed, epoch) (FILE: and the rank, every
 * worker its own files). */
static void file_order(data_stream *s, int epoch) {
  for (int i = 0; i < s->nmine; i++)
    s->order[i] = s->mine[i];
  if (!s->o.shuffle)
    return;
  rng_t r;
  uint64_t rank = s->policy == DATA_SHARD_FILE ? (uint64_t)s->o.rank : 0;
  rng_seed(&r, s->o.seed, STREAM_FILE_SEED + ((uint64_t)epoch << 16) + rank);
  for (int i = s->nmine; i > 1; i--) {
    int j = (int)rng_below(&r, (uint64_t)i);
    int t = s->order[i - 1];
    s->order[i - 1] = s->order[j];
    s->order[j] = t;
  }
}

void stream_buffer_rng(rng_t *r, uint64_t seed, int epoch, int rank) {
  rng_seed(r, seed, STREAM_BUFFER_SEED + ((uint64_t)epoch << 16) + (uint64_t)rank);
}

size_t stream_draw(data_stream *s, int *refill) {
  size_t j = (size_t)rng_below(&s->rng, s->size);
  *refill = s->next_in < s->count;
  if (*refill) {
    s->slot_pos[j] = s->next_in++;
  } else {
    s->slot_pos[j] = s->slot_pos[s->size - 1];
    s->size--;
  }
  return j;
}

static int by_pos(const void *a, const void *b) {
  const stream_want *x = a, *y = b;
  return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Replays `skip` draws on positions alone; the live slots are what the
 * decoder must bring back (want, sorted). */
static void replay(data_stream *s, uint64_t skip) {
  size_t S = s->sbuf;
  s->size = S;
  s->next_in = S;
  for (size_t j = 0; j < S; j++)
    s->slot_pos[j] = j;
  for (uint64_t d = 0; d < skip; d++) {
    int refill = 0;
    stream_draw(s, &refill);
  }
  for (size_t j = 0; j < s->size; j++) {
    s->want[j].pos = s->slot_pos[j];
    s->want[j].slot = j;
  }
  s->nwant = s->size;
  qsort(s->want, s->nwant, sizeof(*s->want), by_pos);
  s->catch_end = s->next_in;
}

/* The order index of the file holding position p (nmine when p is past
 * the epoch's records). */
static int file_of(const data_stream *s, uint64_t p) {
  for (int i = 0; i < s->nmine; i++)
    if (p < s->first_pos[i] + s->files[s->order[i]].kept)
      return i;
  return s->nmine;
}

ctrain_err stream_plan(data_stream *s, int epoch, uint64_t skip, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint64_t p = 0;
  if (skip > s->count)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "%s: resume after %llu records, the epoch has %llu", s->o.flag,
                (unsigned long long)skip, (unsigned long long)s->count);
  file_order(s, epoch);
  for (int i = 0; i < s->nmine; i++) {
    s->first_pos[i] = p;
    p += s->files[s->order[i]].kept;
  }
  stream_buffer_rng(&s->rng, s->o.seed, epoch, s->o.rank);
  s->epoch = epoch;
  s->drawn = skip;
  s->iwant = 0;
  if (s->sbuf) {
    replay(s, skip);
  } else {
    s->size = 0;
    s->nwant = 0;
    s->next_in = skip;
    s->catch_end = skip;
  }
  s->start = file_of(s, s->nwant ? s->want[0].pos : s->catch_end);
out:
  return result;
}
