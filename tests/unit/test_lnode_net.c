/* test_lnode_net.c - pod address allocation and CIDR validation (the parts
 * that need no privileges). */
#include <string.h>

#include "ctrain/lnode_net.h"
#include "test.h"

TEST(cidr_validation) {
  lnode_ipam ip;
  char err[256];
  ASSERT_OK(lnode_ipam_init(&ip, "10.88.0.0/24", err, sizeof(err)));
  lnode_ipam_free(&ip);
  ASSERT_OK(lnode_ipam_init(&ip, "192.168.7.0/28", err, sizeof(err)));
  lnode_ipam_free(&ip);
  const char *bad[] = {"8.8.8.0/24",   "10.88.0.1/24",  "10.88.0.0", "10.88.0.0/8",
                       "10.88.0.0/31", "10.88.0.0/24x", "hello/24",  "172.32.0.0/24"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ASSERT_EQ(lnode_ipam_init(&ip, bad[i], err, sizeof(err)), CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "172.32.0.0/24");
}

TEST(alloc_release_exhaust) {
  lnode_ipam ip;
  char err[256], gw[32], a[32], b[32];
  ASSERT_OK(lnode_ipam_init(&ip, "10.88.3.0/29", err, sizeof(err)));
  lnode_ipam_gateway(&ip, gw, sizeof(gw));
  ASSERT_STR_EQ(gw, "10.88.3.1");
  /* .2 .. .6 are for pods; .0, .1 (gateway) and .7 (broadcast) are not. */
  ASSERT_OK(lnode_ipam_alloc(&ip, a, sizeof(a)));
  ASSERT_STR_EQ(a, "10.88.3.2");
  ASSERT_OK(lnode_ipam_reserve(&ip, "10.88.3.4"));
  ASSERT_OK(lnode_ipam_alloc(&ip, b, sizeof(b)));
  ASSERT_STR_EQ(b, "10.88.3.3");
  ASSERT_OK(lnode_ipam_alloc(&ip, b, sizeof(b)));
  ASSERT_STR_EQ(b, "10.88.3.5");
  ASSERT_OK(lnode_ipam_alloc(&ip, b, sizeof(b)));
  ASSERT_STR_EQ(b, "10.88.3.6");
  ASSERT_EQ(lnode_ipam_alloc(&ip, b, sizeof(b)), CTRAIN_E_NOSPACE);
  lnode_ipam_release(&ip, "10.88.3.1"); /* the gateway is never freed */
  lnode_ipam_release(&ip, "10.99.0.1"); /* outside: no-op */
  ASSERT_EQ(lnode_ipam_alloc(&ip, b, sizeof(b)), CTRAIN_E_NOSPACE);
  lnode_ipam_release(&ip, a);
  ASSERT_OK(lnode_ipam_alloc(&ip, b, sizeof(b)));
  ASSERT_STR_EQ(b, "10.88.3.2");
  ASSERT_EQ(lnode_ipam_reserve(&ip, "10.88.4.1"), CTRAIN_E_INVAL);
  lnode_ipam_free(&ip);
}

TEST_MAIN(T(cidr_validation), T(alloc_release_exhaust))
