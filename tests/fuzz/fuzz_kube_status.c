/* fuzz_kube_status.c - the kube client's handling of an apiserver answer
 * (kube/kube_status.c) and of the names it puts into request paths
 * (kube/kube_rest.c), on arbitrary bytes. Byte 0 picks the HTTP code, the
 * rest is the body (kube_status_decode, and kube_status_from_object on what
 * parses); the body's first NUL-separated words serve as namespace, name
 * and query value (kube_client_path, kube_client_query_add). Never crashes;
 * every field of the Status is terminated within its buffer, the code is
 * the answer's or 100..599, Retry-After 0..86399; a path is built only from
 * valid names, has no "." or ".." segment, '?' or '%'; a query value is
 * encoded. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ctrain/kube_client.h"

#define TERMINATED(f) (memchr((f), '\0', sizeof(f)) != NULL)

/* 1 when a segment of path is "." or "..": the URL would climb. */
static int dot_segment(const char *path) {
  for (const char *s = path; s && *s;) {
    const char *seg = s + (*s == '/'), *end = strchr(seg, '/');
    size_t n = end ? (size_t)(end - seg) : strlen(seg);
    if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
      return 1;
    s = end;
  }
  return 0;
}

static void check(const kube_status *st, int code) {
  if (!TERMINATED(st->reason) || !TERMINATED(st->message) || !TERMINATED(st->details_name) ||
      !TERMINATED(st->details_group) || !TERMINATED(st->details_kind) ||
      !TERMINATED(st->details_uid) || !TERMINATED(st->details_cause))
    abort();
  if (st->http_code != code && (code || st->http_code < 100 || st->http_code >= 600))
    abort();
  if (st->retry_after_s < 0 || st->retry_after_s >= 86400)
    abort();
  if (code && (code < 200 || code >= 300) && kube_status_to_err(code) == CTRAIN_OK)
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const int codes[] = {0, 200, 201, 400, 401, 403, 404, 409, 410, 422, 429, 500, 503, 504};
  if (!size)
    return 0;
  int code = codes[data[0] % (sizeof(codes) / sizeof(codes[0]))];
  const char *body = (const char *)data + 1;
  size_t len = size - 1;
  kube_status st;
  memset(&st, 0, sizeof(st));
  kube_status_decode(body, len, code, &st);
  check(&st, code);
  cJSON *j = cJSON_ParseWithLength(body, len);
  memset(&st, 0, sizeof(st));
  kube_status_from_object(j, code, &st);
  check(&st, code);
  cJSON_Delete(j);

  /* Names and a query value from the body's first words. */
  char *copy = malloc(len + 1);
  if (!copy)
    return 0;
  memcpy(copy, body, len);
  copy[len] = '\0';
  const char *ns = copy, *name = ns + strlen(ns) + 1 <= copy + len ? ns + strlen(ns) + 1 : "";
  const char *val = name + strlen(name) + 1 <= copy + len ? name + strlen(name) + 1 : "";
  static const kube_gvr gvr = {"ctrain.dev", "v1alpha1", "trainingjobs"};
  char path[256];
  if (kube_client_path(&gvr, ns, name, "status", path, sizeof(path)) == CTRAIN_OK) {
    if (!TERMINATED(path) || dot_segment(path) || strpbrk(path, "?%#") ||
        strncmp(path, "/apis/ctrain.dev/v1alpha1/", 26))
      abort();
    if (kube_client_query_add(path, sizeof(path), "labelSelector", val) == CTRAIN_OK) {
      const char *q = strchr(path, '?');
      if (!q || strpbrk(q + 1, "?#/ &\r\n"))
        abort();
    }
    if (!TERMINATED(path))
      abort();
  }
  free(copy);
  return 0;
}
