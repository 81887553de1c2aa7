/* test_lnode_env.c - container environment: values, $(VAR) expansion,
 * fieldRef, Secret/ConfigMap keys through the lookup, optional refs. */
#include <stdlib.h>
#include <string.h>

#include "ctrain/lnode_env.h"
#include "test.h"

static const char *POD = "{\"metadata\":{\"name\":\"w-0\",\"namespace\":\"ns1\",\"uid\":\"u-1\","
                         "\"labels\":{\"app\":\"train\"},\"annotations\":{\"a.b/c\":\"v\"}},"
                         "\"spec\":{\"nodeName\":\"n1\",\"serviceAccountName\":\"sa\"}}";

static int lookups;

static ctrain_err fake_lookup(void *ud, lnode_ref_kind kind, const char *ns, const char *name,
                              cJSON **out) {
  (void)ud;
  lookups++;
  ASSERT_STR_EQ(ns, "ns1");
  if (kind == LNODE_REF_SECRET && !strcmp(name, "tok")) {
    /* "s3cr3t" and "a b" base64-encoded, as the API returns Secret data. */
    *out = cJSON_Parse("{\"data\":{\"token\":\"czNjcjN0\",\"sp\":\"YSBi\"}}");
    return CTRAIN_OK;
  }
  if (kind == LNODE_REF_CONFIGMAP && !strcmp(name, "cfg")) {
    *out = cJSON_Parse("{\"data\":{\"mode\":\"fast\",\"K2\":\"v2\"}}");
    return CTRAIN_OK;
  }
  return CTRAIN_E_NOTFOUND;
}

static void build(const char *container, lnode_env *e, ctrain_err want, char *err, size_t n) {
  cJSON *pod = cJSON_Parse(POD);
  cJSON *c = cJSON_Parse(container);
  ASSERT_NOT_NULL(pod);
  ASSERT_NOT_NULL(c);
  lnode_env_ctx ctx = {pod, "10.88.0.5", "10.88.0.1", NULL, "/bin", "w-0", fake_lookup, NULL};
  ASSERT_EQ(lnode_env_build(&ctx, c, e, err, n), want);
  cJSON_Delete(pod);
  cJSON_Delete(c);
}

TEST(values_and_expansion) {
  lnode_env e = {0};
  char err[256] = "";
  build("{\"env\":[{\"name\":\"A\",\"value\":\"x\"},{\"name\":\"B\",\"value\":\"$(A)-$(NOPE)-$$(A)"
        "\"},"
        "{\"name\":\"A\",\"value\":\"y\"}]}",
        &e, CTRAIN_OK, err, sizeof(err));
  ASSERT_STR_EQ(lnode_env_get(&e, "PATH"), "/bin");
  ASSERT_STR_EQ(lnode_env_get(&e, "HOSTNAME"), "w-0");
  ASSERT_STR_EQ(lnode_env_get(&e, "B"), "x-$(NOPE)-$(A)");
  ASSERT_STR_EQ(lnode_env_get(&e, "A"), "y"); /* later entry wins */
  ASSERT_EQ(e.n, 4);
  ASSERT_NULL(e.kv[e.n]);
  lnode_env_free(&e);
}

TEST(field_refs) {
  lnode_env e = {0};
  char err[256] = "";
  build(
      "{\"env\":["
      "{\"name\":\"N\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"metadata.name\"}}},"
      "{\"name\":\"NS\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"metadata.namespace\"}}},"
      "{\"name\":\"IP\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"status.podIP\"}}},"
      "{\"name\":\"HIP\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"status.hostIP\"}}},"
      "{\"name\":\"NODE\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"spec.nodeName\"}}},"
      "{\"name\":\"SA\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"spec.serviceAccountName\"}}},"
      "{\"name\":\"L\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"metadata.labels['app']\"}}},"
      "{\"name\":\"AN\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"metadata.annotations['a.b/"
      "c']\"}}},"
      "{\"name\":\"URL\",\"value\":\"http://$(IP):80/$(N)\"}]}",
      &e, CTRAIN_OK, err, sizeof(err));
  ASSERT_STR_EQ(lnode_env_get(&e, "N"), "w-0");
  ASSERT_STR_EQ(lnode_env_get(&e, "NS"), "ns1");
  ASSERT_STR_EQ(lnode_env_get(&e, "IP"), "10.88.0.5");
  ASSERT_STR_EQ(lnode_env_get(&e, "HIP"), "10.88.0.1");
  ASSERT_STR_EQ(lnode_env_get(&e, "NODE"), "n1");
  ASSERT_STR_EQ(lnode_env_get(&e, "SA"), "sa");
  ASSERT_STR_EQ(lnode_env_get(&e, "L"), "train");
  ASSERT_STR_EQ(lnode_env_get(&e, "AN"), "v");
  ASSERT_STR_EQ(lnode_env_get(&e, "URL"), "http://10.88.0.5:80/w-0");
  lnode_env_free(&e);
}

TEST(unsupported_field_fails_with_name) {
  lnode_env e = {0};
  char err[256] = "";
  build("{\"env\":[{\"name\":\"X\",\"valueFrom\":{\"fieldRef\":{\"fieldPath\":\"spec.bogus\"}}}]}",
        &e, CTRAIN_E_UNSUPPORTED, err, sizeof(err));
  ASSERT_STR_CONTAINS(err, "X");
  ASSERT_STR_CONTAINS(err, "spec.bogus");
  ASSERT_NULL(e.kv);
}

TEST(secret_and_configmap_keys) {
  lnode_env e = {0};
  char err[256] = "";
  lookups = 0;
  build("{\"env\":["
        "{\"name\":\"T\",\"valueFrom\":{\"secretKeyRef\":{\"name\":\"tok\",\"key\":\"token\"}}},"
        "{\"name\":\"M\",\"valueFrom\":{\"configMapKeyRef\":{\"name\":\"cfg\",\"key\":\"mode\"}}},"
        "{\"name\":\"O1\",\"valueFrom\":{\"secretKeyRef\":{\"name\":\"none\",\"key\":\"k\","
        "\"optional\":true}}},"
        "{\"name\":\"O2\",\"valueFrom\":{\"secretKeyRef\":{\"name\":\"tok\",\"key\":\"nokey\","
        "\"optional\":true}}}],"
        "\"envFrom\":[{\"prefix\":\"C_\",\"configMapRef\":{\"name\":\"cfg\"}},"
        "{\"secretRef\":{\"name\":\"tok\"}}]}",
        &e, CTRAIN_OK, err, sizeof(err));
  ASSERT_STR_EQ(lnode_env_get(&e, "T"), "s3cr3t");
  ASSERT_STR_EQ(lnode_env_get(&e, "M"), "fast");
  ASSERT_STR_EQ(lnode_env_get(&e, "C_K2"), "v2");
  ASSERT_STR_EQ(lnode_env_get(&e, "sp"), "a b");
  ASSERT_NULL(lnode_env_get(&e, "O1"));
  ASSERT_NULL(lnode_env_get(&e, "O2"));
  ASSERT_EQ(lookups, 6);
  lnode_env_free(&e);
}

TEST(missing_secret_is_config_error) {
  lnode_env e = {0};
  char err[256] = "";
  build("{\"env\":[{\"name\":\"T\",\"valueFrom\":{\"secretKeyRef\":{\"name\":\"gone\","
        "\"key\":\"k\"}}}]}",
        &e, CTRAIN_E_NOTFOUND, err, sizeof(err));
  ASSERT_STR_CONTAINS(err, "secret \"gone\" not found");
  build("{\"env\":[{\"name\":\"T\",\"valueFrom\":{\"secretKeyRef\":{\"name\":\"tok\","
        "\"key\":\"nokey\"}}}]}",
        &e, CTRAIN_E_NOTFOUND, err, sizeof(err));
  ASSERT_STR_CONTAINS(err, "couldn't find key nokey");
}

TEST(expand_edge_cases) {
  lnode_env e = {0};
  char *kv[] = {"A=1", "LONG=abc", NULL};
  e.kv = kv;
  e.n = 2;
  const char *cases[][2] = {{"$(A)", "1"},          {"$$", "$"},      {"$(", "$("},
                            {"$()", "$()"},         {"x$(A", "x$(A"}, {"$(LONG)$(A)", "abc1"},
                            {"$$(A)$(A)", "$(A)1"}, {"", ""},         {"$A", "$A"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *s = lnode_env_expand(&e, cases[i][0]);
    ASSERT_STR_EQ(s, cases[i][1]);
    free(s);
  }
}

TEST_MAIN(T(values_and_expansion), T(field_refs), T(unsupported_field_fails_with_name),
          T(secret_and_configmap_keys), T(missing_secret_is_config_error), T(expand_edge_cases))
