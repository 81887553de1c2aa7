/* kube_status.c - the apiserver's metav1.Status and the HTTP-code mapping;
 * see ctrain/kube_client.h. */
#include <stdio.h>
#include <string.h>

#include "ctrain/json.h"
#include "ctrain/kube_client.h"

static void copy_str(char *dst, size_t cap, const char *src) {
  if (!src)
    src = "";
  snprintf(dst, cap, "%s", src);
}

/* Fills st from j when j is a Status; returns 0 (st reset) when it is not. */
static int status_fill(const cJSON *j, int http_code, kube_status *st) {
  int attempts = st->attempts, retry_after = st->retry_after_s, version = st->http_version;
  memset(st, 0, sizeof(*st));
  st->attempts = attempts;
  st->http_version = version;
  st->retry_after_s = retry_after;
  st->http_code = http_code;
  const char *kind = ctrain_json_str(j, "kind");
  if (!j || !kind || strcmp(kind, "Status"))
    return 0;
  copy_str(st->reason, sizeof(st->reason), ctrain_json_str(j, "reason"));
  copy_str(st->message, sizeof(st->message), ctrain_json_str(j, "message"));
  const cJSON *d = ctrain_json_get(j, "details");
  if (cJSON_IsObject(d)) {
    copy_str(st->details_name, sizeof(st->details_name), ctrain_json_str(d, "name"));
    copy_str(st->details_group, sizeof(st->details_group), ctrain_json_str(d, "group"));
    copy_str(st->details_kind, sizeof(st->details_kind), ctrain_json_str(d, "kind"));
    copy_str(st->details_uid, sizeof(st->details_uid), ctrain_json_str(d, "uid"));
    int64_t ra = ctrain_json_int(d, "retryAfterSeconds", 0);
    if (ra > 0 && ra < 86400 && !st->retry_after_s)
      st->retry_after_s = (int)ra;
    const cJSON *causes = ctrain_json_get(d, "causes");
    const cJSON *c0 = cJSON_IsArray(causes) ? cJSON_GetArrayItem(causes, 0) : NULL;
    if (cJSON_IsObject(c0)) {
      const char *f = ctrain_json_str(c0, "field"), *m = ctrain_json_str(c0, "message");
      snprintf(st->details_cause, sizeof(st->details_cause), "%s%s%s", f ? f : "", f ? ": " : "",
               m ? m : "");
    }
  }
  int64_t code = ctrain_json_int(j, "code", 0);
  if (!http_code && code >= 100 && code < 600)
    st->http_code = (int)code;
  return 1;
}

void kube_status_from_object(const cJSON *obj, int http_code, kube_status *st) {
  status_fill(obj, http_code, st);
}

void kube_status_decode(const char *body, size_t len, int http_code, kube_status *st) {
  cJSON *j = NULL;
  if (body && len)
    j = cJSON_ParseWithLength(body, len);
  if (!status_fill(j, http_code, st) && body && len && (http_code < 200 || http_code >= 300)) {
    /* Not a Status (a proxy's HTML page, say): keep its start, printable only. */
    size_t n = len < sizeof(st->message) - 1 ? len : sizeof(st->message) - 1;
    for (size_t i = 0; i < n; i++)
      st->message[i] = (body[i] >= 32 && body[i] < 127) ? body[i] : ' ';
    st->message[n] = '\0';
  }
  cJSON_Delete(j);
}

ctrain_err kube_status_to_err(int http_code) {
  if (http_code >= 200 && http_code < 300)
    return CTRAIN_OK;
  switch (http_code) {
  case 400:
  case 422:
    return CTRAIN_E_INVAL;
  case 401:
  case 403:
    return CTRAIN_E_AUTH;
  case 404:
    return CTRAIN_E_NOTFOUND;
  case 409:
    return CTRAIN_E_CONFLICT;
  case 410:
    return CTRAIN_E_GONE;
  case 504:
    return CTRAIN_E_TIMEOUT;
  default:
    return CTRAIN_E_HTTP;
  }
}
