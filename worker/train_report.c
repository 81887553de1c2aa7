/* train_report.c - the chief's per-epoch reports; see train_report.h. */
#include "worker/train_report.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrain/log.h"

void train_report_epoch(const train_report *r, FILE *metrics) {
  int in_sync = r->workers * r->replicas;
  double sps = (double)(r->ran * (size_t)r->global_batch) / r->seconds, per = sps / in_sync;
  char val[128] = "";
  if (r->has_val)
    snprintf(val, sizeof(val), " - val_loss: %.4f - val_accuracy: %.4f", r->val_loss,
             r->val_accuracy);
  fprintf(stderr,
          "%zu/%zu - %.1fs - loss: %.4f - accuracy: %.4f%s - %.0f samples/s (%.0f per replica, "
          "%d in sync)\n",
          r->steps, r->steps, r->seconds, r->loss, r->accuracy, val, sps, per, in_sync);
  if (!metrics)
    return;
  fprintf(metrics,
          "{\"epoch\":%d,\"steps\":%zu,\"loss\":%.6f,\"accuracy\":%.6f,"
          "\"samples_per_sec\":%.1f,\"samples_per_sec_per_replica\":%.1f,\"seconds\":%.3f,"
          "\"replicas\":%d,\"workers\":%d,\"replicas_per_worker\":%d",
          r->epoch, r->steps, r->loss, r->accuracy, sps, per, r->seconds, in_sync, r->workers,
          r->replicas);
  if (r->has_val)
    fprintf(metrics, ",\"val_loss\":%.6f,\"val_accuracy\":%.6f", r->val_loss, r->val_accuracy);
  fputs("}\n", metrics);
  fflush(metrics);
}

static int cmp_double(const void *a, const void *b) {
  double p = *(const double *)a, q = *(const double *)b;
  return (p > q) - (p < q);
}

int train_report_slowest(const double *ms, int world, double *median) {
  double *sorted = malloc((size_t)world * sizeof(double));
  int slow = 0;
  for (int r = 0; r < world; r++)
    if (ms[r] > ms[slow])
      slow = r;
  *median = NAN;
  if (!sorted) /* the median is a nicety */
    return slow;
  memcpy(sorted, ms, (size_t)world * sizeof(double));
  qsort(sorted, (size_t)world, sizeof(double), cmp_double);
  /* The lower median of an even count: with 2 workers the upper one is the
   * slowest itself, and a straggler could never stand out (ratio 1). */
  *median = sorted[(world - 1) / 2];
  free(sorted);
  return slow;
}

void train_report_straggler(const double *ms, int world, int epoch) {
  double median;
  int slow = train_report_slowest(ms, world, &median);
  if (isnan(median))
    return;
  LOG_INFO("epoch %d: slowest worker rank %d computes %.2f ms/step, median %.2f ms/step", epoch,
           slow, ms[slow], median);
}

/* snprintf at out[*pos], *pos clamped to the buffer (the caller's budget
 * keeps the message well within it; this only makes overflow impossible). */
static void add(char *out, size_t outlen, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void add(char *out, size_t outlen, size_t *pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + *pos, outlen - *pos, fmt, ap);
  va_end(ap);
  if (n > 0)
    *pos = *pos + (size_t)n < outlen ? *pos + (size_t)n : outlen - 1;
}

/* Appends s as a JSON string of at most max bytes (quotes included) to
 * out[*pos..], cutting at a character boundary; or null. */
static void put_str(char *out, size_t outlen, size_t *pos, const char *s, size_t max) {
  static const char hex[] = "0123456789abcdef";
  size_t p = *pos, used = 2;
  if (!s) {
    add(out, outlen, pos, "null");
    return;
  }
  if (max > outlen - p - 1)
    max = outlen - p - 1;
  if (max < 2)
    return;
  out[p++] = '"';
  for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
    char esc[8];
    size_t n = 0;
    if (*c == '"' || *c == '\\') {
      esc[n++] = '\\';
      esc[n++] = (char)*c;
    } else if (*c < 0x20) {
      memcpy(esc, "\\u00", 4);
      n = 4;
      esc[n++] = hex[*c >> 4];
      esc[n++] = hex[*c & 15];
    } else {
      esc[n++] = (char)*c;
    }
    /* Stop before a lead byte whose sequence might not fit (4 is UTF-8's most). */
    size_t need = (*c & 0xC0) == 0xC0 ? 4 : n;
    if (used + need > max)
      break;
    memcpy(out + p, esc, n);
    p += n;
    used += n;
  }
  out[p++] = '"';
  out[p] = '\0';
  *pos = p;
}

/* ,"key":v with `decimals` (as the metrics file prints it), in exponent
 * form past 1e9 (a diverged loss), null when not finite. */
static void put_num(char *out, size_t outlen, size_t *pos, const char *key, double v,
                    int decimals) {
  add(out, outlen, pos, ",\"%s\":", key);
  if (!isfinite(v))
    add(out, outlen, pos, "null");
  else if (fabs(v) < 1e9)
    add(out, outlen, pos, "%.*f", decimals, v);
  else
    add(out, outlen, pos, "%.6e", v);
}

size_t train_report_termination_json(const progress_snapshot *s, const char *model,
                                     const char *error, char *out, size_t outlen) {
  /* The fixed part is under 400 bytes; model and error share the rest. */
  char buf[TRAIN_REPORT_TERMINATION_MAX];
  size_t pos = 0, cap = sizeof(buf);
  int ok = s->state == PROGRESS_SUCCEEDED;
  add(buf, cap, &pos, "{\"state\":\"%s\"", ok ? "Succeeded" : "Failed");
  put_num(buf, cap, &pos, "loss", s->loss, 6);
  put_num(buf, cap, &pos, "accuracy", s->accuracy, 6);
  put_num(buf, cap, &pos, "val_loss", s->val_loss, 6);
  put_num(buf, cap, &pos, "val_accuracy", s->val_accuracy, 6);
  put_num(buf, cap, &pos, "samples_per_sec", s->samples_per_sec, 1);
  add(buf, cap, &pos, ",\"epochs\":%d,\"steps\":%llu,\"model\":", s->epoch,
      (unsigned long long)s->global_step);
  put_str(buf, cap, &pos, model, 1800);
  add(buf, cap, &pos, ",\"replicas_in_sync\":%d", s->replicas_in_sync);
  if (error) {
    add(buf, cap, &pos, ",\"error\":");
    put_str(buf, cap, &pos, error, 1500);
  }
  add(buf, cap, &pos, "}\n");
  snprintf(out, outlen, "%s", buf);
  return pos < outlen ? pos : outlen - 1;
}

ctrain_err train_report_termination(const char *path, const progress_snapshot *s, const char *model,
                                    const char *error, char *errbuf, size_t errlen) {
  char msg[TRAIN_REPORT_TERMINATION_MAX];
  size_t n = train_report_termination_json(s, model, error, msg, sizeof(msg));
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(errbuf, errlen, "--termination-log %s: %s", path, strerror(errno));
    return CTRAIN_E_IO;
  }
  ssize_t w = write(fd, msg, n);
  int e = errno;
  if (close(fd) || w != (ssize_t)n) {
    snprintf(errbuf, errlen, "--termination-log %s: write: %s", path,
             w < 0 ? strerror(e) : "short write");
    return CTRAIN_E_IO;
  }
  return CTRAIN_OK;
}
