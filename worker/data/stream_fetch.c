/* stream_fetch.c - a file's bytes from the disk, the store (ranged GETs) or
 * the cache, and the fetcher thread that queues them (stream_impl.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/data/stream_impl.h"

#include "ctrain/thread.h"

void stream_client_free(stream_client *cl) {
  s3_client_free(cl->c);
  cl->c = NULL;
  cl->bucket_uri[0] = 0;
}

/* cl made for f's bucket (one client per thread, its bucket's root). */
static ctrain_err client_for(data_stream *s, const stream_file *f, stream_client *cl, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  s3_options o = s->s3;
  char why[STREAM_MSG];
  if (cl->c && !strcmp(cl->bucket_uri, f->bucket_uri))
    goto out;
  stream_client_free(cl);
  o.uri = f->bucket_uri;
  if (s3_client_new(&o, &cl->c, why, sizeof(why)))
    CTRAIN_FAIL(CTRAIN_E_CONFIG, "%s %s: %s", s->o.flag, f->name, why);
  snprintf(cl->bucket_uri, sizeof(cl->bucket_uri), "%s", f->bucket_uri);
out:
  return result;
}

ctrain_err stream_src_open(data_stream *s, stream_file *f, stream_client *cl, int fill,
                           stream_src *src, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  memset(src, 0, sizeof(*src));
  src->s = s;
  src->f = f;
  src->fd = -1;
  if (f->cache_path && (src->fd = open(f->cache_path, O_RDONLY | O_CLOEXEC)) >= 0)
    goto out;
  if (!f->key) {
    src->fd = open(f->name, O_RDONLY | O_CLOEXEC);
    if (src->fd < 0)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: cannot open: %s", f->name, strerror(errno));
    goto out;
  }
  result = client_for(s, f, cl, errbuf, errlen);
  if (!result && fill && s->o.cache_dir)
    result = stream_cache_begin(s->o.cache_dir, f->name, (stream_cache_fill **)&src->fill, errbuf,
                                errlen);
  src->cli = cl->c;
out:
  return result;
}

static ctrain_err pread_some(stream_src *src, uint8_t *buf, size_t n, size_t *got, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  *got = 0;
  while (*got < n) {
    ssize_t r = pread(src->fd, buf + *got, n - *got, (off_t)(src->off + (int64_t)*got));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      CTRAIN_FAIL(CTRAIN_E_DATA, "%s: read at offset %lld: %s", src->f->name,
                  (long long)(src->off + (int64_t)*got), strerror(errno));
    if (!r)
      break;
    *got += (size_t)r;
  }
out:
  return result;
}

/* One ranged GET: a failure the client retried to the end is
 * CTRAIN_E_NET (exit 75, whatever the last cause), a refusal of the
 * configuration stays CTRAIN_E_CONFIG, anything else (the ETag changed:
 * If-Match; the object gone) is bad data. */
static ctrain_err range_some(stream_src *src, uint8_t *buf, size_t n, size_t *got, char *errbuf,
                             size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const stream_file *f = src->f;
  const char *flag = src->s->o.flag;
  char why[STREAM_MSG];
  *got = 0;
  if (src->off >= f->size)
    goto out;
  if ((int64_t)n > f->size - src->off)
    n = (size_t)(f->size - src->off);
  ctrain_err rc = s3_get_range(src->cli, f->key, src->off, n, f->etag, buf, got, why, sizeof(why));
  if (rc && s3_client_last_retryable(src->cli))
    CTRAIN_FAIL(CTRAIN_E_NET, "%s %s: bytes at offset %lld unreadable: %s", flag, f->name,
                (long long)src->off, why);
  if (rc)
    CTRAIN_FAIL(rc == CTRAIN_E_CONFIG || rc == CTRAIN_E_NOMEM ? rc : CTRAIN_E_DATA,
                "%s %s: bytes at offset %lld: %s", flag, f->name, (long long)src->off, why);
out:
  return result;
}

ctrain_err stream_src_read(stream_src *src, void *buf, size_t n, size_t *got, char *errbuf,
                           size_t errlen) {
  ctrain_err result = src->fd >= 0 ? pread_some(src, buf, n, got, errbuf, errlen)
                                   : range_some(src, buf, n, got, errbuf, errlen);
  if (!result && src->fill && *got)
    result = stream_cache_write(src->fill, buf, *got, errbuf, errlen);
  if (!result)
    src->off += (int64_t)*got;
  return result;
}

ctrain_err stream_src_close(stream_src *src, int complete, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  if (src->fill)
    result = stream_cache_end(src->fill, complete && src->off == src->f->size, src->f->size,
                              src->f->etag, errbuf, errlen);
  src->fill = NULL;
  if (src->fd >= 0)
    close(src->fd);
  src->fd = -1;
  return result;
}

/* Queues c (NULL: nothing) and gives back the reserved bytes it does not use. */
static void push(data_stream *s, stream_chunk *c, size_t reserved) {
  ctrain_mutex_lock(&s->mu);
  s->held -= reserved - (c ? c->len : 0);
  if (c) {
    if (s->qtail)
      s->qtail->next = c;
    else
      s->qhead = c;
    s->qtail = c;
  }
  ctrain_cond_broadcast(&s->cv);
  ctrain_mutex_unlock(&s->mu);
}

/* Reserves n bytes of the read-ahead; 0 when the epoch is stopping. */
static int reserve(data_stream *s, size_t n) {
  int ok;
  ctrain_mutex_lock(&s->mu);
  while (!s->stop && !s->dec_done && s->held + n > s->prefetch)
    ctrain_cond_wait(&s->cv, &s->mu);
  ok = !s->stop && !s->dec_done;
  if (ok) {
    s->held += n;
    if (s->held > s->peak_held)
      s->peak_held = s->held;
  }
  ctrain_mutex_unlock(&s->mu);
  return ok;
}

/* Queues file f's bytes, then its end; 1 in *stopped when told to stop. */
static ctrain_err fetch_file(data_stream *s, stream_file *f, stream_client *cl, int *stopped,
                             char *errbuf, size_t errlen) {
  stream_src src;
  size_t got = 0;
  ctrain_err result = stream_src_open(s, f, cl, 0, &src, errbuf, errlen);
  while (!result && !*stopped) {
    if (!reserve(s, s->chunk)) {
      *stopped = 1;
      break;
    }
    stream_chunk *c = calloc(1, sizeof(*c) + s->chunk);
    if (!c) {
      push(s, NULL, s->chunk);
      snprintf(errbuf, errlen, "%s %s: out of memory for the read-ahead", s->o.flag, f->name);
      result = CTRAIN_E_NOMEM;
      break;
    }
    result = stream_src_read(&src, c->data, s->chunk, &got, errbuf, errlen);
    c->len = result ? 0 : got;
    if (result || !got) { /* the end goes as an empty chunk of its own */
      free(c);
      c = NULL;
    }
    push(s, c, s->chunk);
    if (!result && got < s->chunk)
      break;
  }
  /* Not complete (0): no cache entry to commit, so closing cannot fail. */
  ctrain_ignore(stream_src_close(&src, 0, errbuf, result ? 0 : errlen));
  if (!result && !*stopped) {
    stream_chunk *e = calloc(1, sizeof(*e));
    if (!e)
      return CTRAIN_E_NOMEM;
    e->eof = 1;
    push(s, e, 0);
  }
  return result;
}

void *stream_fetch_main(void *arg) {
  data_stream *s = arg;
  stream_client cl = {0};
  ctrain_err result = CTRAIN_OK;
  int stopped = 0;
  char msg[STREAM_MSG] = "";
  for (int i = s->start; i < s->nmine && !result && !stopped; i++)
    result = fetch_file(s, &s->files[s->order[i]], &cl, &stopped, msg, sizeof(msg));
  stream_client_free(&cl);
  stream_chunk *e = result ? calloc(1, sizeof(*e)) : NULL;
  if (e) {
    e->err = result;
    snprintf(e->msg, sizeof(e->msg), "%s", msg[0] ? msg : "read-ahead: out of memory");
  }
  ctrain_mutex_lock(&s->mu);
  if (e) {
    if (s->qtail)
      s->qtail->next = e;
    else
      s->qhead = e;
    s->qtail = e;
  }
  s->fetch_done = 1;
  ctrain_cond_broadcast(&s->cv);
  ctrain_mutex_unlock(&s->mu);
  return NULL;
}
