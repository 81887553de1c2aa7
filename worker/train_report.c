/* train_report.c - the chief's per-epoch reports; see train_report.h. */
#include "worker/train_report.h"

#include <stdlib.h>
#include <string.h>

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

void train_report_straggler(const double *ms, int world, int epoch) {
  double *sorted = malloc((size_t)world * sizeof(double));
  int slow = 0;
  for (int r = 0; r < world; r++)
    if (ms[r] > ms[slow])
      slow = r;
  if (!sorted) /* the median is a nicety */
    return;
  memcpy(sorted, ms, (size_t)world * sizeof(double));
  qsort(sorted, (size_t)world, sizeof(double), cmp_double);
  LOG_INFO("epoch %d: slowest worker rank %d computes %.2f ms/step, median %.2f ms/step", epoch,
           slow, ms[slow], sorted[world / 2]);
  free(sorted);
}
