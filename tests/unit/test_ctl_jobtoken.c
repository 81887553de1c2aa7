/* test_ctl_jobtoken.c - per-attempt job tokens derived from the controller's
 * key (controller/jobtoken.h): the HMAC-SHA256 of "uid/attempt", checked
 * against openssl's command-line value, deterministic across calls (a
 * restarted controller derives the same token), different per attempt, job
 * and key; and the key Secret's decoding. */
#include "test.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "controller/jobtoken.h"
#include "controller/reconcile.h"

static void key_of(jobtoken_key *k, const char *s) {
  memset(k, 0, sizeof(*k));
  k->len = strlen(s);
  memcpy(k->key, s, k->len);
}

TEST(known_answer) {
  /* printf 'uid-1/1' | openssl dgst -sha256 -hmac 0123456789abcdef0123456789abcdef */
  jobtoken_key k;
  key_of(&k, "0123456789abcdef0123456789abcdef");
  char hex[JOBTOKEN_HEX_SIZE];
  ASSERT_OK(jobtoken_derive(&k, "uid-1", 1, hex, sizeof(hex)));
  ASSERT_EQ(strlen(hex), 64);
  ASSERT_STR_EQ(hex, "506c5ba8fd6b86f7d44b09adf71459e0efc8e816f938cb9892143257abb70c26");
}

TEST(deterministic_and_distinct) {
  jobtoken_key k, k2;
  key_of(&k, "0123456789abcdef0123456789abcdef");
  key_of(&k2, "fedcba9876543210fedcba9876543210");
  char a[JOBTOKEN_HEX_SIZE], b[JOBTOKEN_HEX_SIZE], c[JOBTOKEN_HEX_SIZE], d[JOBTOKEN_HEX_SIZE],
      e[JOBTOKEN_HEX_SIZE], f[JOBTOKEN_HEX_SIZE];
  ASSERT_OK(jobtoken_derive(&k, "uid-1", 1, a, sizeof(a)));
  ASSERT_OK(jobtoken_fn(&k, "uid-1", 1, b, sizeof(b))); /* the reconciler's callback */
  ASSERT_STR_EQ(a, b);
  ASSERT_OK(jobtoken_derive(&k, "uid-1", 2, c, sizeof(c))); /* next attempt */
  ASSERT(strcmp(a, c) != 0);
  ASSERT_OK(jobtoken_derive(&k, "uid-2", 1, d, sizeof(d))); /* another job */
  ASSERT(strcmp(a, d) != 0);
  ASSERT_OK(jobtoken_derive(&k2, "uid-1", 1, e, sizeof(e))); /* a rotated key */
  ASSERT(strcmp(a, e) != 0);
  /* "uid-1/11" vs "uid-11/1": the separator keeps them apart. */
  ASSERT_OK(jobtoken_derive(&k, "uid-1", 11, e, sizeof(e)));
  ASSERT_OK(jobtoken_derive(&k, "uid-11", 1, f, sizeof(f)));
  ASSERT(strcmp(e, f) != 0);
}

/* The name tag: 10 hex digits, the same for the same key and uid, another
 * for another uid or key, and not the token's prefix. */
TEST(name_tag) {
  jobtoken_key k, k2;
  key_of(&k, "0123456789abcdef0123456789abcdef");
  key_of(&k2, "fedcba9876543210fedcba9876543210");
  char a[JOBTOKEN_TAG_SIZE], b[JOBTOKEN_TAG_SIZE], c[JOBTOKEN_TAG_SIZE], d[JOBTOKEN_TAG_SIZE];
  char tok[JOBTOKEN_HEX_SIZE];
  ASSERT_OK(jobtoken_name_tag(&k, "uid-1", a, sizeof(a)));
  ASSERT_EQ(strlen(a), 10);
  ASSERT_EQ(strspn(a, "0123456789abcdef"), 10);
  ASSERT_OK(jobtoken_name_tag(&k, "uid-1", b, sizeof(b)));
  ASSERT_STR_EQ(a, b);
  ASSERT_OK(jobtoken_name_tag(&k, "uid-2", c, sizeof(c)));
  ASSERT(strcmp(a, c) != 0);
  ASSERT_OK(jobtoken_name_tag(&k2, "uid-1", d, sizeof(d)));
  ASSERT(strcmp(a, d) != 0);
  ASSERT_OK(jobtoken_derive(&k, "uid-1", 1, tok, sizeof(tok)));
  ASSERT(strncmp(a, tok, 10) != 0);
  ASSERT_EQ(jobtoken_name_tag(&k, "", a, sizeof(a)), CTRAIN_E_INVAL);
  ASSERT_EQ(jobtoken_name_tag(&k, "uid-1", a, 10), CTRAIN_E_INVAL);
}

TEST(bad_arguments) {
  jobtoken_key k;
  key_of(&k, "0123456789abcdef0123456789abcdef");
  char hex[JOBTOKEN_HEX_SIZE];
  ASSERT_EQ(jobtoken_derive(&k, "u", 0, hex, sizeof(hex)), CTRAIN_E_INVAL);
  ASSERT_EQ(jobtoken_derive(&k, "", 1, hex, sizeof(hex)), CTRAIN_E_INVAL);
  ASSERT_EQ(jobtoken_derive(&k, NULL, 1, hex, sizeof(hex)), CTRAIN_E_INVAL);
  ASSERT_EQ(jobtoken_derive(&k, "u", 1, hex, 64), CTRAIN_E_INVAL);
  ASSERT_EQ(jobtoken_derive(NULL, "u", 1, hex, sizeof(hex)), CTRAIN_E_INVAL);
  key_of(&k, "short");
  ASSERT_EQ(jobtoken_derive(&k, "u", 1, hex, sizeof(hex)), CTRAIN_E_INVAL);
  ASSERT(RECON_TOKEN_MAX >= JOBTOKEN_HEX_SIZE);
}

TEST(key_secret_round_trip) {
  cJSON *s = NULL;
  ASSERT_OK(jobtoken_key_secret("ctrain-system", JOBTOKEN_KEY_SECRET, &s));
  const cJSON *md = cJSON_GetObjectItemCaseSensitive(s, "metadata");
  ASSERT_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "name")),
                "ctrain-controller-key");
  ASSERT_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(md, "namespace")),
                "ctrain-system");
  const char *hex = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(s, "stringData"), JOBTOKEN_KEY_FIELD));
  ASSERT_NOT_NULL(hex);
  ASSERT_EQ(strlen(hex), 2 * JOBTOKEN_KEY_BYTES);
  cJSON *s2 = NULL;
  ASSERT_OK(jobtoken_key_secret("ctrain-system", JOBTOKEN_KEY_SECRET, &s2));
  ASSERT(strcmp(hex, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(
                         cJSON_GetObjectItemCaseSensitive(s2, "stringData"),
                         JOBTOKEN_KEY_FIELD))) != 0); /* random */
  cJSON_Delete(s);
  cJSON_Delete(s2);

  /* What the apiserver returns: data, base64. */
  jobtoken_key k;
  char err[128] = "";
  cJSON *got = cJSON_Parse("{\"data\":{\"key\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\"}}");
  ASSERT_OK(jobtoken_key_from_secret(got, &k, err, sizeof(err)));
  ASSERT_EQ(k.len, 32);
  ASSERT(!memcmp(k.key, "0123456789abcdef0123456789abcdef", 32));
  cJSON_Delete(got);
  got = cJSON_Parse("{\"data\":{\"key\":\"c2hvcnQ=\"}}");
  ASSERT_EQ(jobtoken_key_from_secret(got, &k, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "5 bytes");
  cJSON_Delete(got);
  got = cJSON_Parse("{\"data\":{}}");
  ASSERT_EQ(jobtoken_key_from_secret(got, &k, err, sizeof(err)), CTRAIN_E_CONFIG);
  ASSERT_STR_CONTAINS(err, "data.key");
  cJSON_Delete(got);
}

TEST_MAIN(T(known_answer), T(deterministic_and_distinct), T(name_tag), T(bad_arguments),
          T(key_secret_round_trip))
