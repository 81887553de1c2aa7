/* fuzz_result_message.c - the controller's reading of a chief's termination
 * message into status.result (recon_result_from_message,
 * controller/recon_internal.h) on arbitrary bytes: the message is whatever
 * the tenant's container wrote. Never crashes; the result is NULL or an
 * object with only the known fields, strings where strings go (the error cut
 * at RECON_RESULT_ERROR_MAX), finite numbers, whole counts. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controller/recon_internal.h"

static int is_one_of(const char *s, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(s, names[i]))
      return 1;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const strings[] = {"state", "model", "error"};
  static const char *const reals[] = {"accuracy", "loss", "valAccuracy", "valLoss",
                                      "samplesPerSec"};
  static const char *const counts[] = {"epochs", "steps", "replicasInSync"};
  char *msg = malloc(size + 1);
  if (!msg)
    return 0;
  memcpy(msg, data, size);
  msg[size] = '\0';
  int nomem = -1;
  cJSON *res = recon_result_from_message(msg, &nomem);
  free(msg);
  if (nomem)
    abort();
  if (!res)
    return 0;
  if (!cJSON_IsObject(res))
    abort();
  const cJSON *it;
  cJSON_ArrayForEach(it, res) {
    const char *k = it->string;
    if (!k)
      abort();
    if (is_one_of(k, strings, 3)) {
      if (!cJSON_IsString(it))
        abort();
      /* state is copied as written (even ""); model and error only when set. */
      if (strcmp(k, "state") && !it->valuestring[0])
        abort();
      if (!strcmp(k, "error") && strlen(it->valuestring) > RECON_RESULT_ERROR_MAX)
        abort();
    } else if (is_one_of(k, reals, 5) || is_one_of(k, counts, 3)) {
      if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
        abort();
      if (is_one_of(k, counts, 3) && it->valuedouble != floor(it->valuedouble))
        abort();
    } else {
      abort(); /* a field the chief may not set */
    }
  }
  cJSON_Delete(res);
  return 0;
}
