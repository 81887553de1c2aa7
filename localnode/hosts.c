/* hosts.c - /etc/hosts rendering (see ctrain/lnode_hosts.h). */
#include "ctrain/lnode_hosts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int same(const char *a, const char *b) {
  return a && b && !strcmp(a, b);
}

static int by_hostname(const void *a, const void *b) {
  const lnode_host_entry *x = *(const lnode_host_entry *const *)a;
  const lnode_host_entry *y = *(const lnode_host_entry *const *)b;
  int c = strcmp(x->hostname, y->hostname);
  return c ? c : strcmp(x->ip, y->ip);
}

ctrain_err lnode_hosts_render(const lnode_host_entry *self, const lnode_host_entry *all, size_t n,
                              const char *domain, char **out) {
  ctrain_err result = CTRAIN_OK;
  const lnode_host_entry **sel = NULL;
  size_t k = 0;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f)
    return CTRAIN_E_NOMEM;
  fputs("# Kubernetes-managed hosts file (written by ctrain-localnode).\n"
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::0\tip6-localnet\n"
        "fe00::1\tip6-allnodes\n"
        "fe00::2\tip6-allrouters\n",
        f);
  int has_sub = self->subdomain && *self->subdomain;
  if (!has_sub) {
    if (self->ip && *self->ip)
      fprintf(f, "%s\t%s\n", self->ip, self->hostname);
    goto done;
  }
  sel = calloc(n + 1, sizeof(*sel));
  if (!sel) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  int self_listed = 0;
  for (size_t i = 0; i < n; i++) {
    const lnode_host_entry *e = &all[i];
    if (!e->ip || !*e->ip || !e->hostname || !same(e->subdomain, self->subdomain) ||
        !same(e->ns, self->ns))
      continue;
    if (same(e->hostname, self->hostname) && same(e->ip, self->ip))
      self_listed = 1;
    sel[k++] = e;
  }
  if (!self_listed && self->ip && *self->ip)
    sel[k++] = self;
  qsort(sel, k, sizeof(*sel), by_hostname);
  for (size_t i = 0; i < k; i++) {
    const lnode_host_entry *e = sel[i];
    fprintf(f, "%s\t%s.%s.%s.svc.%s %s.%s.%s.svc %s.%s %s\n", e->ip, e->hostname, e->subdomain,
            e->ns, domain, e->hostname, e->subdomain, e->ns, e->hostname, e->subdomain,
            e->hostname);
  }
done:
  if (fclose(f)) {
    f = NULL;
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  f = NULL;
  *out = buf;
  buf = NULL;
out:
  if (f)
    fclose(f);
  free(buf);
  free(sel);
  return result;
}
