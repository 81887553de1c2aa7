/* tests/unit/test_json.h - dotted-path reads of cJSON objects for the unit
 * tests that check built objects (pods, statuses): "spec.containers.0.env"
 * (numbers index arrays). Included after "test.h". */
#ifndef CTRAIN_TEST_JSON_H
#define CTRAIN_TEST_JSON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* o at the dotted `path`, or NULL when a step is missing. Borrowed. */
static const cJSON *get(const cJSON *o, const char *path) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", path);
  const cJSON *cur = o;
  for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok && cur;
       tok = strtok_r(NULL, ".", &save)) {
    if (cJSON_IsArray(cur))
      cur = cJSON_GetArrayItem(cur, (int)strtol(tok, NULL, 10));
    else
      cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
  }
  return cur;
}

/* The string at `path`, or NULL. Borrowed. */
static const char *gets_(const cJSON *o, const char *path) {
  const cJSON *v = get(o, path);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

#endif
