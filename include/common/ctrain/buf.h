/* ctrain/buf.h - a growable byte buffer with a size cap, and the one
 * realloc-doubling routine for arrays.
 *
 * Every buffer that grows from input it does not control (an HTTP body, a
 * watch line, a data file, a peer's message) has a cap: growth beyond it is
 * CTRAIN_E_TOOBIG, never an unbounded allocation. The contents stay
 * NUL-terminated (one spare byte beyond len, not counted by the cap), so
 * text can be read as a C string.
 *
 *   ctrain_buf b;
 *   ctrain_buf_init(&b, 64 << 20);
 *   if (ctrain_buf_append(&b, data, n)) ...;   // TOOBIG or NOMEM
 *   char *s = ctrain_buf_take(&b, &len);        // caller owns s; b is empty
 *
 * Not thread-safe: one owner. */
#ifndef CTRAIN_BUF_H
#define CTRAIN_BUF_H

#include <stddef.h>

#include "ctrain/err.h"

typedef struct ctrain_buf {
  char *p;      /* NULL until the first append; NUL-terminated after */
  size_t len;   /* bytes held */
  size_t alloc; /* bytes allocated (len + 1 <= alloc once p is set) */
  size_t cap;   /* most bytes len may reach */
} ctrain_buf;

/* An empty buffer that may hold up to `cap` bytes (0: no cap beyond memory). */
void ctrain_buf_init(ctrain_buf *b, size_t cap);

/* Makes room for `extra` more bytes (doubling, at least 4 KiB). TOOBIG when
 * len + extra would pass the cap, NOMEM when realloc fails; b is unchanged
 * on either. */
CTRAIN_NODISCARD ctrain_err ctrain_buf_reserve(ctrain_buf *b, size_t extra);

/* Appends n bytes of data (borrowed). Errors as ctrain_buf_reserve. */
CTRAIN_NODISCARD ctrain_err ctrain_buf_append(ctrain_buf *b, const void *data, size_t n);

/* Appends formatted text. Errors as ctrain_buf_reserve, INVAL on a bad format. */
CTRAIN_NODISCARD ctrain_err ctrain_buf_printf(ctrain_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Hands the bytes to the caller (free them; never NULL on success: an empty
 * buffer gives ""), leaves b empty with the same cap. *len optional. NULL on
 * out-of-memory. */
char *ctrain_buf_take(ctrain_buf *b, size_t *len);

/* Empties b, keeping its memory. */
void ctrain_buf_clear(ctrain_buf *b);

/* Frees the memory; b is empty (same cap) and may be reused. */
void ctrain_buf_free(ctrain_buf *b);

/* Grows the array *items (of `size`-byte elements, *alloc of them allocated)
 * so that it holds at least `need` elements, doubling (at least `min`).
 * CTRAIN_E_TOOBIG past `max` elements (0: no cap) or on size overflow,
 * CTRAIN_E_NOMEM when realloc fails; *items and *alloc are unchanged on
 * error. New elements are not initialised. */
CTRAIN_NODISCARD ctrain_err ctrain_grow(void *items, size_t *alloc, size_t need, size_t size,
                                        size_t min, size_t max);

#endif
