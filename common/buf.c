/* buf.c - growable buffers; see ctrain/buf.h. */
#include "ctrain/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ctrain_buf_init(ctrain_buf *b, size_t cap) {
  memset(b, 0, sizeof(*b));
  b->cap = cap ? cap : SIZE_MAX / 2;
}

ctrain_err ctrain_buf_reserve(ctrain_buf *b, size_t extra) {
  if (extra > b->cap || b->len > b->cap - extra)
    return CTRAIN_E_TOOBIG;
  size_t need = b->len + extra + 1; /* + NUL */
  if (b->p && need <= b->alloc)
    return CTRAIN_OK;
  size_t want = b->alloc ? b->alloc : 4096;
  while (want < need)
    want = want > SIZE_MAX / 2 ? need : want * 2;
  if (want > b->cap + 1)
    want = b->cap + 1 >= need ? b->cap + 1 : need;
  char *np = realloc(b->p, want);
  if (!np)
    return CTRAIN_E_NOMEM;
  if (!b->p)
    np[0] = '\0';
  b->p = np;
  b->alloc = want;
  return CTRAIN_OK;
}

ctrain_err ctrain_buf_append(ctrain_buf *b, const void *data, size_t n) {
  ctrain_err e = ctrain_buf_reserve(b, n);
  if (e)
    return e;
  if (n)
    memcpy(b->p + b->len, data, n);
  b->len += n;
  b->p[b->len] = '\0';
  return CTRAIN_OK;
}

ctrain_err ctrain_buf_printf(ctrain_buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0)
    return CTRAIN_E_INVAL;
  ctrain_err e = ctrain_buf_reserve(b, (size_t)n);
  if (e)
    return e;
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
  return CTRAIN_OK;
}

char *ctrain_buf_take(ctrain_buf *b, size_t *len) {
  char *p = b->p;
  if (!p && !(p = calloc(1, 1)))
    return NULL;
  if (len)
    *len = b->len;
  size_t cap = b->cap;
  memset(b, 0, sizeof(*b));
  b->cap = cap;
  return p;
}

void ctrain_buf_clear(ctrain_buf *b) {
  b->len = 0;
  if (b->p)
    b->p[0] = '\0';
}

void ctrain_buf_free(ctrain_buf *b) {
  size_t cap = b->cap;
  free(b->p);
  memset(b, 0, sizeof(*b));
  b->cap = cap;
}

ctrain_err ctrain_grow(void *items, size_t *alloc, size_t need, size_t size, size_t min,
                       size_t max) {
  void **pp = (void **)items;
  if (need <= *alloc && *pp)
    return CTRAIN_OK;
  if ((max && need > max) || size == 0 || need > SIZE_MAX / size)
    return CTRAIN_E_TOOBIG;
  size_t want = *alloc ? *alloc : (min ? min : 8);
  while (want < need)
    want = want > SIZE_MAX / 2 / size ? need : want * 2;
  if (max && want > max)
    want = max;
  void *np = realloc(*pp, want * size);
  if (!np)
    return CTRAIN_E_NOMEM;
  *pp = np;
  *alloc = want;
  return CTRAIN_OK;
}
