/* test_ctl_jobkind.c - the table of job kinds (controller/jobkind.h): which
 * ownerReference names which kind, which options serve it, each kind's
 * view; and the work queue's typed keys: their one string per key, read
 * back the same, never one string for two keys. */
#include "test.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "controller/jobkind.h"

static const ctl_kind *TJ = &ctl_kinds[CTL_KIND_TRAININGJOB];
static const ctl_kind *TF = &ctl_kinds[CTL_KIND_TFJOB];

TEST(table_names_each_kind) {
  for (int i = 0; i < CTL_NKINDS; i++)
    ASSERT_EQ((int)ctl_kinds[i].id, i);
  ASSERT_STR_EQ(TJ->kind, "TrainingJob");
  ASSERT_STR_EQ(TJ->api_version, "ctrain.dev/v1alpha1");
  ASSERT_STR_EQ(TJ->exec->gvr->resource, "trainingjobs");
  ASSERT_STR_EQ(TF->kind, "TFJob");
  ASSERT_STR_EQ(TF->api_version, "kubeflow.org/v1");
  ASSERT_STR_EQ(TF->exec->gvr->group, "kubeflow.org");
  ASSERT_STR_EQ(TF->exec->gvr->resource, "tfjobs");
  ASSERT(ctl_kind_of_owner("ctrain.dev/v1alpha1", "TrainingJob") == TJ);
  ASSERT(ctl_kind_of_owner("kubeflow.org/v1", "TFJob") == TF);
  ASSERT_NULL(ctl_kind_of_owner("kubeflow.org/v1", "TrainingJob"));
  ASSERT_NULL(ctl_kind_of_owner("apps/v1", "ReplicaSet"));
  ASSERT_NULL(ctl_kind_of_owner(NULL, "TFJob"));
  ASSERT_NULL(ctl_kind_of_owner("kubeflow.org/v1", NULL));
}

TEST(tfjob_only_with_its_flag) {
  ctl_options o = {0};
  ASSERT(ctl_kind_enabled(TJ, &o));
  ASSERT(!ctl_kind_enabled(TF, &o));
  o.enable_tfjob = 1;
  ASSERT(ctl_kind_enabled(TJ, &o));
  ASSERT(ctl_kind_enabled(TF, &o));
  ASSERT_STR_EQ(TF->flag, "--enable-tfjob");
  ASSERT_NULL(TJ->flag);
}

TEST(views) {
  cJSON *tj = cJSON_Parse("{\"metadata\":{\"name\":\"a\",\"namespace\":\"ns\"},\"spec\":{}}");
  ctl_view v;
  ASSERT_OK(TJ->view(tj, &v));
  ASSERT(v.job == tj); /* the object itself */
  ASSERT_NULL(v.invalid);
  ASSERT_EQ(v.foreign, 0);
  TJ->view_free(&v);
  cJSON *tf = cJSON_Parse("{\"apiVersion\":\"kubeflow.org/v1\",\"kind\":\"TFJob\","
                          "\"metadata\":{\"name\":\"t\",\"namespace\":\"ns\",\"uid\":\"u\"},"
                          "\"spec\":{\"tfReplicaSpecs\":{\"PS\":{\"replicas\":1}}}}");
  ASSERT_OK(TF->view(tf, &v));
  ASSERT_NOT_NULL(v.job);
  ASSERT(v.job != tf);        /* built from it */
  ASSERT_NOT_NULL(v.invalid); /* no parameter servers */
  TF->view_free(&v);
  ASSERT_NULL(v.priv);
  cJSON_Delete(tj);
  cJSON_Delete(tf);
}

/* Formats `k`, checks the string, parses it back to the same key. */
static void round_trip(const ctl_key *k, const char *want) {
  char s[CTL_KEY_MAX];
  ctl_key back;
  ASSERT_OK(ctl_key_format(k, s, sizeof(s)));
  ASSERT_STR_EQ(s, want);
  ASSERT_OK(ctl_key_parse(s, &back));
  ASSERT(back.kind == k->kind);
  ASSERT_STR_EQ(back.ns, k->ns);
  ASSERT_STR_EQ(back.name, k->name);
}

TEST(keys_round_trip) {
  ctl_key k;
  ASSERT_OK(ctl_key_make(TJ, "default", "mnist", &k));
  round_trip(&k, "default/mnist");
  ASSERT_OK(ctl_key_make(TF, "default", "mnist", &k));
  round_trip(&k, "tfjob:default/mnist");
  /* A name may look like a key of its own: it is still a name. */
  ASSERT_OK(ctl_key_make(TJ, "tfjob", "x:y", &k));
  round_trip(&k, "tfjob/x:y");
  cJSON *o = cJSON_Parse("{\"metadata\":{\"name\":\"b\",\"namespace\":\"team-1\"}}");
  ASSERT_OK(ctl_key_of(TF, o, &k));
  round_trip(&k, "tfjob:team-1/b");
  cJSON_Delete(o);
}

TEST(kinds_never_share_a_string) {
  ctl_key a, b;
  char sa[CTL_KEY_MAX], sb[CTL_KEY_MAX];
  /* Every pair of kinds, and namespaces that spell the other kind's tag. */
  const char *nss[] = {"tfjob", "default", "trainingjob"};
  for (int i = 0; i < CTL_NKINDS; i++)
    for (int j = 0; j < CTL_NKINDS; j++)
      for (size_t n = 0; n < sizeof(nss) / sizeof(nss[0]); n++)
        for (size_t m = 0; m < sizeof(nss) / sizeof(nss[0]); m++) {
          if (i == j && n == m)
            continue;
          ASSERT_OK(ctl_key_make(&ctl_kinds[i], nss[n], "j", &a));
          ASSERT_OK(ctl_key_make(&ctl_kinds[j], nss[m], "j", &b));
          ASSERT_OK(ctl_key_format(&a, sa, sizeof(sa)));
          ASSERT_OK(ctl_key_format(&b, sb, sizeof(sb)));
          ASSERT(strcmp(sa, sb) != 0);
        }
}

TEST(not_keys) {
  ctl_key k;
  const char *bad[] = {"",
                       "mnist",
                       "/mnist",
                       "default/",
                       "default/a/b",
                       "trainingjob:default/mnist", /* TrainingJob's are untagged */
                       "pytorchjob:default/mnist",
                       ":default/mnist",
                       "tfjob:/mnist",
                       "tfjob:a:b/mnist",
                       "tfjob/"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ASSERT_EQ(ctl_key_parse(bad[i], &k), CTRAIN_E_INVAL);
  char longns[CTL_KEY_NS_MAX + 8];
  memset(longns, 'n', sizeof(longns) - 1);
  longns[sizeof(longns) - 1] = '\0';
  char s[sizeof(longns) + 8];
  snprintf(s, sizeof(s), "%s/a", longns);
  ASSERT_EQ(ctl_key_parse(s, &k), CTRAIN_E_INVAL);
  ASSERT_EQ(ctl_key_make(TJ, longns, "a", &k), CTRAIN_E_TOOBIG);
  ASSERT_EQ(ctl_key_make(TJ, "", "a", &k), CTRAIN_E_INVAL);
  ASSERT_EQ(ctl_key_make(TJ, "a", NULL, &k), CTRAIN_E_INVAL);
  ASSERT_EQ(ctl_key_make(TJ, "a:b", "c", &k), CTRAIN_E_INVAL);
  ASSERT_EQ(ctl_key_make(TJ, "a", "b/c", &k), CTRAIN_E_INVAL);
  cJSON *o = cJSON_Parse("{\"metadata\":{\"name\":\"cluster-scoped\"}}");
  ASSERT_EQ(ctl_key_of(TJ, o, &k), CTRAIN_E_INVAL);
  cJSON_Delete(o);
  ASSERT_OK(ctl_key_make(TF, "default", "mnist", &k));
  ASSERT_EQ(ctl_key_format(&k, s, 8), CTRAIN_E_TOOBIG);
}

TEST_MAIN(T(table_names_each_kind), T(tfjob_only_with_its_flag), T(views), T(keys_round_trip),
          T(kinds_never_share_a_string), T(not_keys))
