/* fuzz_ctl_progress.c - the controller's reading of a chief's /progress
 * answer (ctl_progress_parse, controller/progress.h) on arbitrary bytes.
 * Never crashes; an accepted answer has only numbers within their bounds,
 * integers that print without an exponent (the schema's int64), a rank of
 * -1 or 0..CTL_PROGRESS_RANK_MAX with a finite ratio, and a refused one
 * leaves nothing and says why. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controller/progress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *p = (cJSON *)1;
  int rank = 0;
  double ratio = 0;
  char why[256];
  ctrain_err result =
      ctl_progress_parse((const char *)data, size, 1700000000, &p, &rank, &ratio, why, sizeof(why));
  if (result) {
    if (p || rank != -1 || !isnan(ratio) || !why[0] || !memchr(why, '\0', sizeof(why)))
      abort();
    return 0;
  }
  if (!p || (rank != -1 && (rank < 0 || rank > CTL_PROGRESS_RANK_MAX || !isfinite(ratio))))
    abort();
  static const char *const ints[] = {"epoch",      "epochs",         "step",      "stepsPerEpoch",
                                     "backupStep", "replicasInSync", "globalStep"};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, ints[i]);
    if (!v)
      continue;
    char *text = cJSON_PrintUnformatted(v);
    if (!cJSON_IsNumber(v) || !text || strpbrk(text, "eE.") || v->valuedouble < 0 ||
        v->valuedouble > CTL_PROGRESS_NUM_MAX)
      abort();
    cJSON_free(text);
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, p) {
    if (cJSON_IsNumber(it) && !isfinite(it->valuedouble))
      abort();
  }
  cJSON_Delete(p);
  return 0;
}
