/* fuzz_kube_watch.c - the watch stream path: the first byte picks a line cap
 * and a chunk size, the rest is fed to the line splitter in chunks and every
 * line goes through the event parser, as kube_watch does with a stream. */
#include <stdint.h>
#include <string.h>

#include "ctrain/kube_watch.h"

static ctrain_err on_line(void *ud, const char *line, size_t len) {
  kube_watch_event ev;
  (void)ud;
  if (kube_watch_event_parse(line, len, &ev) == CTRAIN_OK) {
    if (ev.type == KUBE_WATCH_ERROR) {
      kube_status st = {0};
      kube_status_from_object(ev.object, 0, &st);
    }
    kube_watch_event_clear(&ev);
  }
  return CTRAIN_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  size_t cap = 64u << (data[0] & 7); /* 64 B .. 8 KiB */
  size_t chunk = 1 + (data[0] >> 3); /* 1 .. 32 bytes */
  kube_lines ls;
  kube_lines_init(&ls, cap);
  const char *p = (const char *)data + 1;
  size_t left = size - 1;
  while (left) {
    size_t n = left < chunk ? left : chunk;
    if (kube_lines_feed(&ls, p, n, on_line, NULL))
      kube_lines_reset(&ls);
    p += n;
    left -= n;
  }
  kube_lines_free(&ls);
  /* And the whole input as one Status body. */
  kube_status st = {0};
  kube_status_decode((const char *)data, size, 500, &st);
  return 0;
}
