/* net.c - bridge, veth and netns set-up, pod address allocation (see
 * ctrain/lnode_net.h). */
#include "ctrain/lnode_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctrain/lnode_cmd.h"
#include "ctrain/lnode_util.h"

static int is_private(uint32_t a, int prefix) {
  if ((a >> 24) == 10 && prefix >= 8)
    return 1;
  if ((a >> 20) == ((172u << 4) | 1u) && prefix >= 12)
    return 1;
  if ((a >> 16) == ((192u << 8) | 168u) && prefix >= 16)
    return 1;
  return 0;
}

ctrain_err lnode_ipam_init(lnode_ipam *ipam, const char *cidr, char *err, size_t errlen) {
  char addr[32];
  memset(ipam, 0, sizeof(*ipam));
  const char *slash = strchr(cidr, '/');
  if (!slash || (size_t)(slash - cidr) >= sizeof(addr))
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "pod CIDR '%s' is not a.b.c.d/n", cidr);
  memcpy(addr, cidr, (size_t)(slash - cidr));
  addr[slash - cidr] = '\0';
  char *end = NULL;
  long prefix = strtol(slash + 1, &end, 10);
  struct in_addr in;
  if (!*(slash + 1) || *end || prefix < 16 || prefix > 30 || inet_pton(AF_INET, addr, &in) != 1)
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen,
                       "pod CIDR '%s' is not a.b.c.d/n with 16 <= n <= 30", cidr);
  uint32_t a = ntohl(in.s_addr);
  uint32_t mask = prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
  if (a & ~mask)
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen, "pod CIDR '%s' has host bits set", cidr);
  if (!is_private(a, (int)prefix))
    return ctrain_errf(CTRAIN_E_INVAL, err, errlen,
                       "pod CIDR '%s' is not a private range (10/8, 172.16/12, 192.168/16)", cidr);
  ipam->base = a;
  ipam->prefix = (int)prefix;
  ipam->size = 1u << (32 - prefix);
  ipam->used = calloc(ipam->size, 1);
  if (!ipam->used)
    return CTRAIN_E_NOMEM;
  ipam->used[0] = ipam->used[1] = ipam->used[ipam->size - 1] = 1;
  ipam->next = 2;
  return CTRAIN_OK;
}

void lnode_ipam_free(lnode_ipam *ipam) {
  free(ipam->used);
  ipam->used = NULL;
}

static void fmt_ip(uint32_t a, char *buf, size_t cap) {
  struct in_addr in = {.s_addr = htonl(a)};
  inet_ntop(AF_INET, &in, buf, (socklen_t)cap);
}

void lnode_ipam_gateway(const lnode_ipam *ipam, char *buf, size_t cap) {
  fmt_ip(ipam->base + 1, buf, cap);
}

ctrain_err lnode_ipam_alloc(lnode_ipam *ipam, char *buf, size_t cap) {
  for (uint32_t k = 0; k < ipam->size; k++) {
    uint32_t i = (ipam->next + k) % ipam->size;
    if (!ipam->used[i]) {
      ipam->used[i] = 1;
      ipam->next = (i + 1) % ipam->size;
      fmt_ip(ipam->base + i, buf, cap);
      return CTRAIN_OK;
    }
  }
  return CTRAIN_E_NOSPACE;
}

static int ip_index(const lnode_ipam *ipam, const char *ip, uint32_t *idx) {
  struct in_addr in;
  if (!ip || inet_pton(AF_INET, ip, &in) != 1)
    return 0;
  uint32_t a = ntohl(in.s_addr);
  if (a < ipam->base || a - ipam->base >= ipam->size)
    return 0;
  *idx = a - ipam->base;
  return 1;
}

ctrain_err lnode_ipam_reserve(lnode_ipam *ipam, const char *ip) {
  uint32_t i;
  if (!ip_index(ipam, ip, &i))
    return CTRAIN_E_INVAL;
  ipam->used[i] = 1;
  return CTRAIN_OK;
}

void lnode_ipam_release(lnode_ipam *ipam, const char *ip) {
  uint32_t i;
  if (ip_index(ipam, ip, &i) && i > 1 && i < ipam->size - 1)
    ipam->used[i] = 0;
}

ctrain_err lnode_net_find_ip(char **out) {
  const char *path = getenv("PATH");
  char dirs[4096];
  if (lnode_fmt(dirs, sizeof(dirs), "%s:/usr/sbin:/sbin:/usr/bin:/bin", path ? path : ""))
    return CTRAIN_E_TOOBIG;
  return lnode_cmd_resolve("ip", NULL, dirs, out, NULL, 0);
}

ctrain_err lnode_net_ip(const char *ip_bin, const char *const *argv, char *err, size_t errlen) {
  const char *args[32];
  int n = 0;
  int pfd[2] = {-1, -1};
  args[n++] = "ip";
  for (int i = 1; argv[i] && n < 31; i++)
    args[n++] = argv[i];
  args[n] = NULL;
  if (pipe2(pfd, O_CLOEXEC))
    return ctrain_errf(CTRAIN_E_IO, err, errlen, "pipe: %s", strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    close(pfd[0]);
    close(pfd[1]);
    return ctrain_errf(CTRAIN_E_IO, err, errlen, "fork: %s", strerror(errno));
  }
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    dup2(pfd[1], 2);
    execv(ip_bin, (char *const *)args);
    _exit(127);
  }
  close(pfd[1]);
  char out[512];
  size_t len = 0;
  for (;;) {
    ssize_t r = read(pfd[0], out + len, sizeof(out) - 1 - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    len += (size_t)r;
    if (len == sizeof(out) - 1) {
      char sink[256];
      while (read(pfd[0], sink, sizeof(sink)) > 0) {
      }
      break;
    }
  }
  out[len] = '\0';
  while (len && (out[len - 1] == '\n' || out[len - 1] == ' '))
    out[--len] = '\0';
  close(pfd[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
    return CTRAIN_OK;
  char cmd[512] = "ip";
  size_t cl = 2;
  for (int i = 1; args[i] && cl < sizeof(cmd) - 1; i++) {
    int w = snprintf(cmd + cl, sizeof(cmd) - cl, " %s", args[i]);
    if (w < 0)
      break;
    cl += (size_t)w;
  }
  return ctrain_errf(CTRAIN_E_IO, err, errlen, "`%s` failed (status %d): %s", cmd,
                     WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), out);
}

#define IP(...)                                                                                    \
  do {                                                                                             \
    const char *a_[] = {"ip", __VA_ARGS__, NULL};                                                  \
    result = lnode_net_ip(ip_bin, a_, err, errlen);                                                \
    if (result)                                                                                    \
      goto out;                                                                                    \
  } while (0)

ctrain_err lnode_net_bridge_up(const char *ip_bin, const char *bridge, const lnode_ipam *ipam,
                               int *created, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char gw[64], cidr[80];
  const char *show[] = {"ip", "link", "show", "dev", bridge, NULL};
  *created = 0;
  lnode_ipam_gateway(ipam, gw, sizeof(gw));
  snprintf(cidr, sizeof(cidr), "%s/%d", gw, ipam->prefix);
  if (lnode_net_ip(ip_bin, show, NULL, 0)) {
    IP("link", "add", "name", bridge, "type", "bridge");
    *created = 1;
  }
  IP("addr", "replace", cidr, "dev", bridge);
  IP("link", "set", "dev", bridge, "up");
out:
  return result;
}

ctrain_err lnode_net_bridge_down(const char *ip_bin, const char *bridge, char *err, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  IP("link", "del", "dev", bridge);
out:
  return result;
}

ctrain_err lnode_net_pod_up(const char *ip_bin, const char *bridge, const char *netns,
                            const char *veth, const char *pod_ip, int prefix, char *err,
                            size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  char peer[32], cidr[80];
  /* The peer gets a unique temporary name on the host side, then eth0 in
   * the namespace. */
  snprintf(peer, sizeof(peer), "%.12sp", veth);
  snprintf(cidr, sizeof(cidr), "%s/%d", pod_ip, prefix);
  IP("netns", "add", netns);
  IP("link", "add", "name", veth, "type", "veth", "peer", "name", peer);
  IP("link", "set", "dev", peer, "netns", netns);
  IP("-n", netns, "link", "set", "dev", peer, "name", "eth0");
  IP("-n", netns, "addr", "add", cidr, "dev", "eth0");
  IP("-n", netns, "link", "set", "dev", "eth0", "up");
  IP("-n", netns, "link", "set", "dev", "lo", "up");
  IP("link", "set", "dev", veth, "master", bridge);
  IP("link", "set", "dev", veth, "up");
out:
  return result;
}

void lnode_net_pod_down(const char *ip_bin, const char *netns, const char *veth) {
  const char *del_ns[] = {"ip", "netns", "del", netns, NULL};
  const char *del_veth[] = {"ip", "link", "del", "dev", veth, NULL};
  lnode_net_ip(ip_bin, del_ns, NULL, 0);
  lnode_net_ip(ip_bin, del_veth, NULL, 0);
}
