/* jobtoken.c - per-attempt job tokens from the controller's key; see
 * controller/jobtoken.h. */
#include "controller/jobtoken.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "ctrain/json.h"
#include "ctrain/util.h"

/* hex of the first `nbytes` (<= 32) bytes of HMAC-SHA256(key, msg[0, n))
 * into hex (2 * nbytes + 1). */
static ctrain_err hmac_hex(const jobtoken_key *k, const char *msg, int n, size_t nbytes,
                           char *hex) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int maclen = 0;
  if (n < 0 || (size_t)n >= 256)
    return CTRAIN_E_INVAL;
  if (!HMAC(EVP_sha256(), k->key, (int)k->len, (const unsigned char *)msg, (size_t)n, mac,
            &maclen) ||
      maclen != 32)
    return CTRAIN_E_NOMEM;
  for (size_t i = 0; i < nbytes; i++)
    snprintf(hex + 2 * i, 3, "%02x", mac[i]);
  OPENSSL_cleanse(mac, sizeof(mac));
  return CTRAIN_OK;
}

static int key_ok(const jobtoken_key *k) {
  return k && k->len >= JOBTOKEN_KEY_MIN && k->len <= JOBTOKEN_KEY_MAX;
}

ctrain_err jobtoken_derive(const jobtoken_key *k, const char *uid, int attempt, char *hex,
                           size_t len) {
  char msg[256];
  if (!key_ok(k) || !uid || !*uid || attempt < 1 || !hex || len < JOBTOKEN_HEX_SIZE)
    return CTRAIN_E_INVAL;
  return hmac_hex(k, msg, snprintf(msg, sizeof(msg), "%s/%d", uid, attempt), 32, hex);
}

ctrain_err jobtoken_name_tag(const jobtoken_key *k, const char *uid, char *tag, size_t len) {
  char msg[256];
  if (!key_ok(k) || !uid || !*uid || !tag || len < JOBTOKEN_TAG_SIZE)
    return CTRAIN_E_INVAL;
  return hmac_hex(k, msg, snprintf(msg, sizeof(msg), "name-tag/%s", uid),
                  (JOBTOKEN_TAG_SIZE - 1) / 2, tag);
}

ctrain_err jobtoken_fn(void *ctx, const char *uid, int attempt, char *hex, size_t len) {
  return jobtoken_derive(ctx, uid, attempt, hex, len);
}

ctrain_err jobtoken_key_from_secret(const cJSON *secret, jobtoken_key *k, char *err,
                                    size_t errlen) {
  const char *b64 = ctrain_json_str(ctrain_json_get(secret, "data"), JOBTOKEN_KEY_FIELD);
  char *raw = NULL;
  size_t n = 0;
  ctrain_err result = CTRAIN_OK;
  if (!b64) {
    snprintf(err, errlen, "data." JOBTOKEN_KEY_FIELD " is missing");
    return CTRAIN_E_CONFIG;
  }
  if (ctrain_b64_decode(b64, strlen(b64), &raw, &n)) {
    snprintf(err, errlen, "data." JOBTOKEN_KEY_FIELD " is not base64");
    return CTRAIN_E_CONFIG;
  }
  if (n < JOBTOKEN_KEY_MIN || n > JOBTOKEN_KEY_MAX) {
    snprintf(err, errlen, "data." JOBTOKEN_KEY_FIELD " holds %zu bytes, not %d..%d", n,
             JOBTOKEN_KEY_MIN, JOBTOKEN_KEY_MAX);
    result = CTRAIN_E_CONFIG;
  } else {
    memcpy(k->key, raw, n);
    k->len = n;
  }
  OPENSSL_cleanse(raw, n);
  free(raw);
  return result;
}

ctrain_err jobtoken_key_secret(const char *ns, const char *name, cJSON **out) {
  unsigned char raw[JOBTOKEN_KEY_BYTES];
  char hex[2 * JOBTOKEN_KEY_BYTES + 1];
  cJSON *s = NULL, *md = NULL, *sd = NULL, *labels = NULL;
  *out = NULL;
  if (RAND_bytes(raw, sizeof(raw)) != 1)
    return CTRAIN_E_IO;
  for (size_t i = 0; i < sizeof(raw); i++)
    snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  OPENSSL_cleanse(raw, sizeof(raw));
  if (!(s = cJSON_CreateObject()) || !cJSON_AddStringToObject(s, "apiVersion", "v1") ||
      !cJSON_AddStringToObject(s, "kind", "Secret") ||
      !cJSON_AddStringToObject(s, "type", "Opaque") ||
      !(md = cJSON_AddObjectToObject(s, "metadata")) ||
      !cJSON_AddStringToObject(md, "name", name) || !cJSON_AddStringToObject(md, "namespace", ns) ||
      !(labels = cJSON_AddObjectToObject(md, "labels")) ||
      !cJSON_AddStringToObject(labels, "app.kubernetes.io/name", "ctrain") ||
      !(sd = cJSON_AddObjectToObject(s, "stringData")) ||
      !cJSON_AddStringToObject(sd, JOBTOKEN_KEY_FIELD, hex)) {
    OPENSSL_cleanse(hex, sizeof(hex));
    cJSON_Delete(s);
    return CTRAIN_E_NOMEM;
  }
  OPENSSL_cleanse(hex, sizeof(hex));
  *out = s;
  return CTRAIN_OK;
}

ctrain_err jobtoken_key_load(kube_client *c, const char *ns, const char *name, jobtoken_key *k,
                             char *err, size_t errlen) {
  cJSON *s = NULL, *got = NULL;
  kube_status st;
  char why[160] = "";
  ctrain_err result = jobtoken_key_secret(ns, name, &s);
  if (result) {
    snprintf(err, errlen, "key Secret %s/%s: %s", ns, name, ctrain_strerror(result));
    goto out;
  }
  /* Create first: the first replica to start makes the key; everyone
   * else (a create conflict) reads what it made. */
  result = kube_client_create(c, &KUBE_GVR_SECRETS, ns, s, NULL, NULL, &st);
  if (result && result != CTRAIN_E_CONFLICT) {
    snprintf(err, errlen, "create secret %s/%s: %s (HTTP %d %s: %s)", ns, name,
             ctrain_strerror(result), st.http_code, st.reason, st.message);
    goto out;
  }
  result = kube_client_get(c, &KUBE_GVR_SECRETS, ns, name, &got, &st);
  if (result) {
    snprintf(err, errlen, "get secret %s/%s: %s (HTTP %d %s: %s)", ns, name,
             ctrain_strerror(result), st.http_code, st.reason, st.message);
    goto out;
  }
  result = jobtoken_key_from_secret(got, k, why, sizeof(why));
  if (result)
    snprintf(err, errlen, "secret %s/%s: %s", ns, name, why);
out:
  if (s) {
    /* Scrub the key material the JSON held before freeing it. */
    cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "stringData"),
                                                JOBTOKEN_KEY_FIELD);
    if (cJSON_IsString(v) && v->valuestring)
      OPENSSL_cleanse(v->valuestring, strlen(v->valuestring));
  }
  cJSON_Delete(s);
  cJSON_Delete(got);
  return result;
}
