/* test_lnode_hosts.c - /etc/hosts rendering for pods of one subdomain. */
#include <stdlib.h>
#include <string.h>

#include "ctrain/lnode_hosts.h"
#include "test.h"

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = hay; (p = strstr(p, needle)); p++)
    n++;
  return n;
}

TEST(same_subdomain_and_namespace_only) {
  lnode_host_entry all[] = {
      {"10.88.0.3", "w-1", "job", "ns"},
      {"10.88.0.2", "w-0", "job", "ns"},
      {"10.88.0.4", "w-2", "other", "ns"},
      {"10.88.0.5", "w-3", "job", "ns2"},
      {"", "w-4", "job", "ns"},
      {"10.88.0.7", "solo", NULL, "ns"},
  };
  char *out = NULL;
  ASSERT_OK(lnode_hosts_render(&all[1], all, 6, "cluster.local", &out));
  ASSERT_STR_CONTAINS(out, "127.0.0.1\tlocalhost\n");
  ASSERT_STR_CONTAINS(out, "10.88.0.2\tw-0.job.ns.svc.cluster.local w-0.job.ns.svc w-0.job w-0\n");
  ASSERT_STR_CONTAINS(out, "10.88.0.3\tw-1.job.ns.svc.cluster.local w-1.job.ns.svc w-1.job w-1\n");
  ASSERT(!strstr(out, "w-2"));
  ASSERT(!strstr(out, "w-3"));
  ASSERT(!strstr(out, "w-4")); /* no IP yet: no line */
  ASSERT(!strstr(out, "solo"));
  /* Sorted: w-0 before w-1, whichever pod renders. */
  ASSERT(strstr(out, "w-0.job") < strstr(out, "w-1.job"));
  char *other = NULL;
  ASSERT_OK(lnode_hosts_render(&all[0], all, 6, "cluster.local", &other));
  ASSERT_STR_EQ(out, other);
  free(other);
  free(out);
}

TEST(self_listed_once_even_if_absent_from_all) {
  lnode_host_entry self = {"10.1.0.9", "a", "s", "n"};
  lnode_host_entry all[] = {{"10.1.0.9", "a", "s", "n"}, {"10.1.0.8", "b", "s", "n"}};
  char *out = NULL;
  ASSERT_OK(lnode_hosts_render(&self, all, 2, "example.org", &out));
  ASSERT_EQ(count(out, "a.s.n.svc.example.org"), 1);
  ASSERT_EQ(count(out, "b.s.n.svc.example.org"), 1);
  free(out);
  ASSERT_OK(lnode_hosts_render(&self, NULL, 0, "example.org", &out));
  ASSERT_EQ(count(out, "10.1.0.9\ta.s.n.svc.example.org a.s.n.svc a.s a\n"), 1);
  free(out);
}

TEST(no_subdomain_gets_own_line) {
  lnode_host_entry self = {"10.1.0.9", "web", NULL, "n"};
  char *out = NULL;
  ASSERT_OK(lnode_hosts_render(&self, &self, 1, "cluster.local", &out));
  ASSERT_STR_CONTAINS(out, "10.1.0.9\tweb\n");
  ASSERT(!strstr(out, ".svc"));
  free(out);
}

TEST_MAIN(T(same_subdomain_and_namespace_only), T(self_listed_once_even_if_absent_from_all),
          T(no_subdomain_gets_own_line))
