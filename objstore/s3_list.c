/* objstore/s3_list.c - the S3 client's paginated listings (see s3.h):
 * ListObjectsV2 (s3_list) and ListMultipartUploads (s3_list_uploads), one
 * page loop for both (list_pages), bounded against a server that never
 * ends a listing (pages, repeated or empty continuations, bytes kept). */
#include "s3_internal.h"

#include <stdlib.h>
#include <string.h>

#include "ctrain/s3_sign.h"

void s3_object_list_free(s3_object_list *list) {
  if (list)
    free(list->items), memset(list, 0, sizeof(*list));
}

/* What keeps a paginated listing finite against a server that never ends
 * it: at most list_max_pages pages, never the same continuation twice in a
 * row, at most S3_LIST_EMPTY_MAX truncated pages in a row without an entry
 * (and the caller's byte budget on what it keeps). */
typedef struct list_guard {
  int pages, empty;
  char prev[3100]; /* the previous page's continuation */
} list_guard;

/* Before asking for the page after one that brought `got` entries and the
 * continuation `next`: CTRAIN_OK to go on, else CTRAIN_E_HTTP, marked
 * retryable (a misbehaving server, not our configuration), with errbuf. */
static ctrain_err list_guard_next(s3_client *c, list_guard *g, const char *op, size_t got,
                                  const char *next, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  const char *why = NULL;
  char buf[160];
  if (++g->pages >= c->list_max_pages) {
    snprintf(buf, sizeof(buf), "more than %d pages", c->list_max_pages);
    why = buf;
  } else if (strcmp(next, g->prev) == 0) {
    why = "the same continuation twice in a row";
  } else if (got == 0 && ++g->empty > S3_LIST_EMPTY_MAX) {
    snprintf(buf, sizeof(buf), "%d truncated pages in a row without an entry", g->empty);
    why = buf;
  }
  if (got)
    g->empty = 0;
  snprintf(g->prev, sizeof(g->prev), "%s", next);
  if (why) {
    c->last_retryable = 1;
    CTRAIN_FAIL(CTRAIN_E_HTTP, "s3: %s %s://%s/%s: the listing does not end: %s", op, c->loc.scheme,
                c->loc.bucket, c->loc.prefix, why);
  }
out:
  return result;
}

/* Room for one more item in a listing held within list_max_bytes. */
static ctrain_err list_grow(s3_client *c, void *items, size_t *alloc, size_t n, size_t size,
                            const char *op, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  size_t max = c->list_max_bytes / size;
  if (max > S3_LIST_MAX)
    max = S3_LIST_MAX;
  if (!max)
    max = 1;
  if ((result = ctrain_grow(items, alloc, n + 1, size, 16, max))) {
    c->last_retryable = result == CTRAIN_E_TOOBIG;
    CTRAIN_FAIL(result, "s3: %s %s://%s/%s: %s", op, c->loc.scheme, c->loc.bucket, c->loc.prefix,
                result == CTRAIN_E_TOOBIG ? "answer too large: more entries than the listing's "
                                            "memory budget holds"
                                          : "out of memory");
  }
out:
  return result;
}

/* One paginated listing (ListObjectsV2, ListMultipartUploads): what differs
 * between them; list_pages does the rest (the prefix, the requests, each
 * page's entries and their keys, the end, the guard). */
typedef struct list_kind {
  const char *op;      /* the operation, in errors */
  const char *element; /* an entry's XML element */
  /* Appends the query of the next page; `marker` is "" on the first. */
  ctrain_err (*query)(ctrain_buf *q, const char *prefix, size_t prefix_len, const char *marker);
  /* Keeps the entry `inner` whose key, less the client's prefix, is `name`. */
  ctrain_err (*entry)(s3_client *c, void *list, const char *name, const char *inner, size_t ilen,
                      char *errbuf, size_t errlen);
  /* The next page's marker from a truncated answer: 1, or 0 when it has none. */
  int (*marker)(const char *body, size_t len, char *out, size_t n);
  size_t name_max; /* sizeof the entries' name */
} list_kind;

static ctrain_err list_pages(s3_client *c, const list_kind *k, const char *name_prefix, void *list,
                             char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  ctrain_buf prefix, q_str;
  s3_resp r = {0};
  char marker[3100] = "", truncated[16];
  list_guard g = {0};
  size_t strip = c->loc.prefix[0] ? strlen(c->loc.prefix) + 1 : 0;
  ctrain_buf_init(&prefix, 4096);
  ctrain_buf_init(&q_str, 16384);
  if ((result = s3_location_key(&c->loc, name_prefix ? name_prefix : "", &prefix)))
    CTRAIN_FAIL(result, "s3: %s: prefix too long", k->op);
  for (;;) {
    ctrain_buf_clear(&q_str);
    if ((result = k->query(&q_str, prefix.p, prefix.len, marker)))
      CTRAIN_FAIL(result, "s3: %s: query too long", k->op);
    s3_req q = s3_req_init(k->op, "GET", NULL);
    q.query = q_str.p;
    if ((result = s3_do(c, &q, &r, errbuf, errlen)))
      goto out;
    const char *inner;
    size_t ilen, pos = 0, got = 0;
    while (s3_xml_element(r.body.p, r.body.len, k->element, &pos, &inner, &ilen)) {
      char key[2048];
      if (s3_xml_text(inner, ilen, "Key", NULL, key, sizeof(key)) != 1)
        CTRAIN_FAIL(CTRAIN_E_PARSE, "s3: %s %s://%s: an entry without a usable Key", k->op,
                    c->loc.scheme, c->loc.bucket);
      if (strlen(key) < strip || strlen(key) - strip >= k->name_max)
        continue; /* not under our prefix (cannot happen with a correct server) */
      if ((result = k->entry(c, list, key + strip, inner, ilen, errbuf, errlen)))
        goto out;
      got++;
    }
    truncated[0] = '\0';
    s3_xml_text(r.body.p, r.body.len, "IsTruncated", NULL, truncated, sizeof(truncated));
    if (strcmp(truncated, "true") != 0)
      break;
    if (!k->marker(r.body.p, r.body.len, marker, sizeof(marker))) {
      c->last_retryable = 1;
      CTRAIN_FAIL(CTRAIN_E_PARSE, "s3: %s %s://%s: truncated without a continuation", k->op,
                  c->loc.scheme, c->loc.bucket);
    }
    if ((result = list_guard_next(c, &g, k->op, got, marker, errbuf, errlen)))
      goto out;
    s3_resp_free(&r);
  }
out:
  s3_resp_free(&r);
  ctrain_buf_free(&prefix);
  ctrain_buf_free(&q_str);
  return result;
}

/* ListObjectsV2: the marker is the continuation token. Query names in any
 * order: the signer sorts them. */
static ctrain_err objects_query(ctrain_buf *q, const char *prefix, size_t prefix_len,
                                const char *marker) {
  ctrain_err result = CTRAIN_OK;
  if (marker[0] && ((result = ctrain_buf_printf(q, "continuation-token=")) ||
                    (result = s3_uri_encode(q, marker, strlen(marker), 0)) ||
                    (result = ctrain_buf_printf(q, "&"))))
    return result;
  if ((result = ctrain_buf_printf(q, "list-type=2&max-keys=1000&prefix=")))
    return result;
  return s3_uri_encode(q, prefix, prefix_len, 0);
}

static ctrain_err objects_entry(s3_client *c, void *ud, const char *name, const char *inner,
                                size_t ilen, char *errbuf, size_t errlen) {
  s3_object_list *list = ud;
  char num[32] = "0";
  ctrain_err result = list_grow(c, &list->items, &list->alloc, list->n, sizeof(*list->items),
                                "ListObjectsV2", errbuf, errlen);
  if (result)
    return result;
  s3_object *o = &list->items[list->n++];
  memset(o, 0, sizeof(*o));
  snprintf(o->name, sizeof(o->name), "%s", name);
  s3_xml_text(inner, ilen, "Size", NULL, num, sizeof(num));
  o->size = strtoll(num, NULL, 10);
  s3_xml_text(inner, ilen, "ETag", NULL, o->etag, sizeof(o->etag));
  s3_xml_text(inner, ilen, "LastModified", NULL, o->last_modified, sizeof(o->last_modified));
  return CTRAIN_OK;
}

static int objects_marker(const char *body, size_t len, char *out, size_t n) {
  return s3_xml_text(body, len, "NextContinuationToken", NULL, out, n) == 1 && out[0];
}

static const list_kind objects_kind = {"ListObjectsV2", "Contents",
                                       objects_query,   objects_entry,
                                       objects_marker,  sizeof(((s3_object *)0)->name)};

ctrain_err s3_list(s3_client *c, const char *name_prefix, s3_object_list *list, char *errbuf,
                   size_t errlen) {
  return list_pages(c, &objects_kind, name_prefix, list, errbuf, errlen);
}

void s3_upload_list_free(s3_upload_list *list) {
  if (list)
    free(list->items), memset(list, 0, sizeof(*list));
}

/* ListMultipartUploads: the marker is "KEY\nUPLOAD-ID", both markers of the
 * answer, split at the last newline (a key may hold one; an upload ID does
 * not). */
static ctrain_err uploads_query(ctrain_buf *q, const char *prefix, size_t prefix_len,
                                const char *marker) {
  ctrain_err result = CTRAIN_OK;
  if ((result = ctrain_buf_printf(q, "uploads=&max-uploads=1000&prefix=")) ||
      (result = s3_uri_encode(q, prefix, prefix_len, 0)))
    return result;
  if (!marker[0])
    return CTRAIN_OK;
  const char *nl = strrchr(marker, '\n');
  size_t klen = nl ? (size_t)(nl - marker) : strlen(marker);
  const char *id = nl ? nl + 1 : "";
  if ((result = ctrain_buf_printf(q, "&key-marker=")) ||
      (result = s3_uri_encode(q, marker, klen, 0)) ||
      (result = ctrain_buf_printf(q, "&upload-id-marker=")))
    return result;
  return s3_uri_encode(q, id, strlen(id), 0);
}

static ctrain_err uploads_entry(s3_client *c, void *ud, const char *name, const char *inner,
                                size_t ilen, char *errbuf, size_t errlen) {
  s3_upload_list *list = ud;
  ctrain_err result = list_grow(c, &list->items, &list->alloc, list->n, sizeof(*list->items),
                                "ListMultipartUploads", errbuf, errlen);
  if (result)
    return result;
  s3_upload *u = &list->items[list->n];
  memset(u, 0, sizeof(*u));
  snprintf(u->name, sizeof(u->name), "%s", name);
  if (s3_xml_text(inner, ilen, "UploadId", NULL, u->upload_id, sizeof(u->upload_id)) != 1)
    CTRAIN_FAIL(CTRAIN_E_PARSE, "s3: ListMultipartUploads %s://%s: an entry without an UploadId",
                c->loc.scheme, c->loc.bucket);
  s3_xml_text(inner, ilen, "Initiated", NULL, u->initiated, sizeof(u->initiated));
  list->n++;
out:
  return result;
}

static int uploads_marker(const char *body, size_t len, char *out, size_t n) {
  char key[2048], id[1024] = "";
  if (s3_xml_text(body, len, "NextKeyMarker", NULL, key, sizeof(key)) != 1 || !key[0])
    return 0;
  s3_xml_text(body, len, "NextUploadIdMarker", NULL, id, sizeof(id));
  snprintf(out, n, "%s\n%s", key, id);
  return 1;
}

static const list_kind uploads_kind = {"ListMultipartUploads", "Upload",
                                       uploads_query,          uploads_entry,
                                       uploads_marker,         sizeof(((s3_upload *)0)->name)};

ctrain_err s3_list_uploads(s3_client *c, const char *name_prefix, s3_upload_list *list,
                           char *errbuf, size_t errlen) {
  return list_pages(c, &uploads_kind, name_prefix, list, errbuf, errlen);
}
