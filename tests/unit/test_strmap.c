/* test_kube_strmap.c - the string map: put/get/replace/delete through
 * growth, NULL values, iteration and early stop. */
#include "test.h"

#include "ctrain/strmap.h"

TEST(put_get_del_grow) {
  ctrain_strmap *m = NULL;
  ASSERT_OK(ctrain_strmap_new(&m));
  char k[32];
  for (long i = 0; i < 5000; i++) {
    snprintf(k, sizeof(k), "ns/obj-%ld", i);
    ASSERT_OK(ctrain_strmap_put(m, k, (void *)(i + 1), NULL));
  }
  ASSERT_EQ(ctrain_strmap_len(m), 5000);
  for (long i = 0; i < 5000; i++) {
    snprintf(k, sizeof(k), "ns/obj-%ld", i);
    ASSERT_EQ((long)ctrain_strmap_get(m, k), i + 1);
  }
  void *old = NULL;
  ASSERT_OK(ctrain_strmap_put(m, "ns/obj-7", (void *)99L, &old));
  ASSERT_EQ((long)old, 8);
  ASSERT_EQ(ctrain_strmap_len(m), 5000);
  int found = 0;
  ASSERT_EQ((long)ctrain_strmap_del(m, "ns/obj-7", &found), 99);
  ASSERT_EQ(found, 1);
  ASSERT_NULL(ctrain_strmap_del(m, "ns/obj-7", &found));
  ASSERT_EQ(found, 0);
  ASSERT_NULL(ctrain_strmap_get(m, "ns/obj-7"));
  ASSERT_EQ(ctrain_strmap_len(m), 4999);
  ASSERT_OK(ctrain_strmap_put(m, "null", NULL, NULL));
  ASSERT(ctrain_strmap_has(m, "null"));
  ASSERT(!ctrain_strmap_has(m, "nope"));
  ctrain_strmap_free(m, NULL);
  ctrain_strmap_free(NULL, NULL);
}

static int count(void *ud, const char *key, void *val) {
  (void)key;
  (void)val;
  return ++*(int *)ud == 3;
}

TEST(each_and_free_val) {
  ctrain_strmap *m = NULL;
  ASSERT_OK(ctrain_strmap_new(&m));
  for (int i = 0; i < 10; i++) {
    char k[16];
    snprintf(k, sizeof(k), "%d", i);
    ASSERT_OK(ctrain_strmap_put(m, k, strdup(k), NULL));
  }
  int n = 0;
  ctrain_strmap_each(m, count, &n);
  ASSERT_EQ(n, 3);
  ctrain_strmap_free(m, free); /* values freed: leak checkers would see otherwise */
}

TEST_MAIN(T(put_get_del_grow), T(each_and_free_val))
