/* ctrain/lnode_hosts.h - a pod's /etc/hosts, standing in for cluster DNS.
 *
 * A pod with a subdomain gets one line per pod of the same subdomain and
 * namespace on this node (itself included), each naming
 * <host>.<sub>.<ns>.svc.<domain> <host>.<sub>.<ns>.svc <host>.<sub> <host>,
 * which is what the headless Service's DNS records would answer. A pod
 * without a subdomain gets its own "<ip> <host>" line, as the kubelet
 * writes it. */
#ifndef CTRAIN_LNODE_HOSTS_H
#define CTRAIN_LNODE_HOSTS_H

#include <stddef.h>

#include "ctrain/err.h"

typedef struct lnode_host_entry {
  const char *ip;        /* "" or NULL: not known yet, no line */
  const char *hostname;  /* spec.hostname, or the pod name */
  const char *subdomain; /* spec.subdomain or NULL */
  const char *ns;
} lnode_host_entry;

/* Renders the hosts file of `self` given all pods of the node (`all` may
 * include self; entries are borrowed). `domain` is the cluster domain
 * ("cluster.local"). *out is owned by the caller. Lines are sorted by
 * hostname so that equal inputs give equal files. */
ctrain_err lnode_hosts_render(const lnode_host_entry *self, const lnode_host_entry *all, size_t n,
                              const char *domain, char **out);

#endif
