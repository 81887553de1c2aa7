/* ctrain/lnode_net.h - pod networking: one bridge on the host, one network
 * namespace per pod joined to it by a veth pair.
 *
 * Addresses come from the node's pod CIDR (a private IPv4 range): the first
 * host address is the bridge's (the node's InternalIP as pods see it), the
 * others go to pods. Pods get only the connected route of the CIDR, no
 * default route and no NAT, so their traffic cannot leave the machine.
 * Interfaces are configured with `ip` (iproute2) run by fork/exec. */
#ifndef CTRAIN_LNODE_NET_H
#define CTRAIN_LNODE_NET_H

#include <stddef.h>
#include <stdint.h>

#include "ctrain/err.h"

typedef struct lnode_ipam {
  uint32_t base; /* network address, host order */
  int prefix;    /* 8..30 */
  uint32_t size; /* addresses in the range */
  uint8_t *used; /* one byte per address; owned */
  uint32_t next; /* where the next search starts (round robin) */
} lnode_ipam;

/* Parses "10.88.0.0/24" (a private range: 10/8, 172.16/12, 192.168/16) into
 * ipam; the network and broadcast addresses and the gateway (first host)
 * are reserved. CTRAIN_E_INVAL with a message for anything else. */
ctrain_err lnode_ipam_init(lnode_ipam *ipam, const char *cidr, char *err, size_t errlen);
void lnode_ipam_free(lnode_ipam *ipam);

/* The gateway (bridge) address as text. */
void lnode_ipam_gateway(const lnode_ipam *ipam, char *buf, size_t cap);

/* Takes a free address (text into buf). CTRAIN_E_NOSPACE when none. */
ctrain_err lnode_ipam_alloc(lnode_ipam *ipam, char *buf, size_t cap);
/* Marks `ip` used (a pod found after a restart); CTRAIN_E_INVAL outside. */
ctrain_err lnode_ipam_reserve(lnode_ipam *ipam, const char *ip);
/* Frees an address (outside the range or not used: no-op). */
void lnode_ipam_release(lnode_ipam *ipam, const char *ip);

/* Absolute path of `ip` found on PATH (or /sbin, /usr/sbin); *out owned.
 * CTRAIN_E_NOTFOUND when there is none. */
ctrain_err lnode_net_find_ip(char **out);

/* Runs `ip` with argv (argv[0] is ignored and replaced by the binary; the
 * list is NULL-terminated). Its stderr goes into err on failure. */
ctrain_err lnode_net_ip(const char *ip_bin, const char *const *argv, char *err, size_t errlen);

/* Creates the bridge (when missing) with the gateway address, up.
 * *created says whether this call created it. */
ctrain_err lnode_net_bridge_up(const char *ip_bin, const char *bridge, const lnode_ipam *ipam,
                               int *created, char *err, size_t errlen);
ctrain_err lnode_net_bridge_down(const char *ip_bin, const char *bridge, char *err, size_t errlen);

/* Creates netns `netns`, a veth pair `veth` (host side, on the bridge) and
 * eth0 inside with `pod_ip`/prefix, lo up. */
ctrain_err lnode_net_pod_up(const char *ip_bin, const char *bridge, const char *netns,
                            const char *veth, const char *pod_ip, int prefix, char *err,
                            size_t errlen);
/* Removes the netns and the host veth (either may be gone already). */
void lnode_net_pod_down(const char *ip_bin, const char *netns, const char *veth);

#endif
