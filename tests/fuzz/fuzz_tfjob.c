/* fuzz_tfjob.c - the TFJob mapping and validation (controller/tfjob.h,
 * recon_validate) on arbitrary JSON: tfjob_to_job, then recon_validate of
 * the mapped job, and the status both ways. Never crashes nor leaks; a
 * mapping that says the spec is valid has replica counts that are whole
 * numbers in 0..INT32_MAX and a port in 1..65535; a message is terminated. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controller/reconcile.h"
#include "controller/tfjob.h"

static void check_count(const cJSON *v, double lo, double hi) {
  if (v && (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
            v->valuedouble > hi))
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  cJSON *tf = cJSON_ParseWithLength((const char *)data, size);
  if (!tf)
    return 0;
  tfjob_view v;
  if (tfjob_to_job(tf, &v) == CTRAIN_OK) {
    if (!memchr(v.invalid, '\0', sizeof(v.invalid)))
      abort();
    const cJSON *spec = cJSON_GetObjectItemCaseSensitive(v.job, "spec");
    if (!v.invalid[0]) {
      const cJSON *rs;
      cJSON_ArrayForEach(rs, cJSON_GetObjectItemCaseSensitive(spec, "replicaSpecs")) {
        check_count(cJSON_GetObjectItemCaseSensitive(rs, "replicas"), 0, 2147483647.0);
      }
      check_count(cJSON_GetObjectItemCaseSensitive(spec, "port"), 1, 65535);
      check_count(cJSON_GetObjectItemCaseSensitive(spec, "backoffLimit"), 0, 2147483647.0);
      check_count(cJSON_GetObjectItemCaseSensitive(spec, "activeDeadlineSeconds"), 1, 2147483647.0);
      char msg[1024];
      if (recon_validate(v.job, msg, sizeof(msg)) && !memchr(msg, '\0', sizeof(msg)))
        abort();
    }
    cJSON *st = NULL, *back = NULL;
    if (tfjob_status_from_tf(tf, &st) == CTRAIN_OK &&
        tfjob_status_to_tf(tf, st, &back) == CTRAIN_OK)
      cJSON_Delete(back);
    cJSON_Delete(st);
    tfjob_view_free(&v);
  }
  cJSON_Delete(tf);
  return 0;
}
