/* tensorboard.c - Event protos in TFRecord framing for TensorBoard. */
#include "worker/tensorboard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "worker/data/tfrecord.h"

#define TB_MAX_EVENT 8192 /* one Event: a few scalars with short tags */

struct tb_writer {
  FILE *f;
  char path[4352];
};

/* A bounded protobuf writer: ok turns 0 when out of room. */
typedef struct {
  uint8_t *p;
  size_t len, cap;
  int ok;
} pb_out;

static void put(pb_out *o, const void *b, size_t n) {
  if (!o->ok || o->cap - o->len < n) {
    o->ok = 0;
    return;
  }
  memcpy(o->p + o->len, b, n);
  o->len += n;
}

static void varint(pb_out *o, uint64_t v) {
  uint8_t b[10];
  int n = 0;
  do {
    b[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
  put(o, b, (size_t)n);
}

static void fixed(pb_out *o, uint64_t v, int bytes) {
  uint8_t b[8];
  for (int i = 0; i < bytes; i++)
    b[i] = (uint8_t)(v >> (8 * i));
  put(o, b, (size_t)bytes);
}

static void bytes_field(pb_out *o, int num, const void *b, size_t n) {
  varint(o, (uint64_t)num << 3 | 2);
  varint(o, n);
  put(o, b, n);
}

/* Summary.Value {tag = 1, simple_value = 2 (float)} into o. */
static void summary_value(pb_out *o, const char *tag, double v) {
  uint8_t buf[512];
  pb_out val = {buf, 0, sizeof(buf), 1};
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  bytes_field(&val, 1, tag, strlen(tag));
  varint(&val, 2 << 3 | 5);
  fixed(&val, u, 4);
  if (!val.ok)
    o->ok = 0;
  else
    bytes_field(o, 1, buf, val.len); /* Summary.value = 1 */
}

size_t tb_encode_event(double wall, int64_t step, tb_event_kind kind, const char *const *tags,
                       const double *values, int n, uint8_t *out, size_t cap) {
  pb_out o = {out, 0, cap, 1};
  uint64_t w;
  memcpy(&w, &wall, 8);
  varint(&o, 1 << 3 | 1); /* wall_time, double */
  fixed(&o, w, 8);
  varint(&o, 2 << 3 | 0); /* step */
  varint(&o, (uint64_t)step);
  if (kind == TB_FILE_VERSION) {
    bytes_field(&o, 3, "brain.Event:2", strlen("brain.Event:2"));
  } else if (kind == TB_SESSION_START) {
    static const uint8_t start[] = {1 << 3 | 0, 1}; /* SessionLog.status = START */
    bytes_field(&o, 7, start, sizeof(start));       /* Event.session_log */
  } else {
    uint8_t sum[TB_MAX_EVENT];
    pb_out s = {sum, 0, sizeof(sum), 1};
    for (int i = 0; i < n; i++)
      summary_value(&s, tags[i], values[i]);
    if (!s.ok)
      return 0;
    bytes_field(&o, 5, sum, s.len); /* summary */
  }
  return o.ok ? o.len : 0;
}

static double wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One TFRecord-framed record, flushed. */
static ctrain_err write_record(tb_writer *w, const uint8_t *data, size_t n, char *errbuf,
                               size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t hdr[12], foot[4];
  uint32_t c;
  for (int i = 0; i < 8; i++)
    hdr[i] = (uint8_t)((uint64_t)n >> (8 * i));
  c = tfr_masked_crc(hdr, 8);
  for (int i = 0; i < 4; i++)
    hdr[8 + i] = (uint8_t)(c >> (8 * i));
  c = tfr_masked_crc(data, n);
  for (int i = 0; i < 4; i++)
    foot[i] = (uint8_t)(c >> (8 * i));
  if (fwrite(hdr, 1, 12, w->f) != 12 || fwrite(data, 1, n, w->f) != n ||
      fwrite(foot, 1, 4, w->f) != 4 || fflush(w->f))
    CTRAIN_FAIL(CTRAIN_E_IO, "--tensorboard-dir: %s: write: %s", w->path, strerror(errno));
out:
  return result;
}

ctrain_err tb_open(const char *dir, int64_t start_step, tb_writer **out, char *errbuf,
                   size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  tb_writer *w = calloc(1, sizeof(*w));
  char host[256] = "localhost";
  uint8_t ev[256];
  *out = NULL;
  if (!w)
    CTRAIN_FAIL(CTRAIN_E_NOMEM, "--tensorboard-dir: out of memory");
  if (mkdir(dir, 0755) && errno != EEXIST)
    CTRAIN_FAIL(CTRAIN_E_IO, "--tensorboard-dir %s: mkdir: %s", dir, strerror(errno));
  gethostname(host, sizeof(host) - 1);
  snprintf(w->path, sizeof(w->path), "%s/events.out.tfevents.%ld.%s.%ld.ctrain", dir,
           (long)time(NULL), host, (long)getpid());
  w->f = fopen(w->path, "wbx");
  if (!w->f)
    CTRAIN_FAIL(CTRAIN_E_IO, "--tensorboard-dir: %s: %s", w->path, strerror(errno));
  size_t n = tb_encode_event(wall_now(), 0, TB_FILE_VERSION, NULL, NULL, 0, ev, sizeof(ev));
  result = write_record(w, ev, n, errbuf, errlen);
  if (!result) {
    n = tb_encode_event(wall_now(), start_step, TB_SESSION_START, NULL, NULL, 0, ev, sizeof(ev));
    result = write_record(w, ev, n, errbuf, errlen);
  }
  if (result)
    goto out;
  *out = w;
  w = NULL;
out:
  tb_close(w);
  return result;
}

ctrain_err tb_scalars(tb_writer *w, int64_t step, const char *const *tags, const double *values,
                      int n, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t ev[TB_MAX_EVENT + 64];
  size_t len = tb_encode_event(wall_now(), step, TB_SCALARS, tags, values, n, ev, sizeof(ev));
  if (!len)
    CTRAIN_FAIL(CTRAIN_E_INVAL, "--tensorboard-dir: %d scalars do not fit one event", n);
  result = write_record(w, ev, len, errbuf, errlen);
out:
  return result;
}

const char *tb_path(const tb_writer *w) {
  return w->path;
}

void tb_close(tb_writer *w) {
  if (!w)
    return;
  if (w->f)
    fclose(w->f);
  free(w);
}
