/* ring.c - TCP collective: rendezvous with an HMAC handshake, a framed
 * non-blocking progress engine with heartbeats, ring all-reduce. */
#include "ctrain/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "ctrain/log.h"

#define RING_VERSION    1u
#define FRAME_MAGIC     0x43545246u /* "CTRF" */
#define FRAME_DATA      1u
#define FRAME_HEARTBEAT 2u
#define FRAME_BYE       3u
#define FRAME_ABORT     4u /* payload: why the sender gave up (its error message) */
#define ABORT_MAX       512
#define HDR_LEN         16
#define NONCE_LEN       16
#define MAC_LEN         32
#define JOB_MAX         253

enum { HS_OK = 0, HS_BAD_JOB, HS_BAD_ATTEMPT, HS_BAD_RANK, HS_BAD_MAC, HS_BAD_VERSION };

static const char *const hs_reason[] = {"ok",
                                        "job name mismatch",
                                        "attempt mismatch",
                                        "rank or world size mismatch",
                                        "HMAC mismatch (wrong CTRAIN_JOB_TOKEN)",
                                        "protocol version mismatch"};

typedef struct {
  int fd;
  int rank;
  char addr[256];
  int closed; /* BYE received: an orderly end */
  double last_rx, last_tx;
  /* receive side: a frame header, then the payload into `dst` when wanted */
  uint8_t rxhdr[HDR_LEN];
  size_t rxhdr_got;
  int rx_pending; /* header of a DATA frame parsed, payload not read */
  uint64_t rx_len;
  uint8_t *dst; /* where the wanted DATA payload goes */
  size_t dst_len, dst_got;
  int want, got_frame;
  /* send side: one frame at a time */
  uint8_t txhdr[HDR_LEN];
  const uint8_t *txbuf;
  size_t txlen, txoff; /* txoff counts header + payload */
  int tx_active, tx_data, sent_frame;
  const uint8_t *send_buf; /* data queued by the current operation */
  size_t send_len;
  int send_queued;
} peer;

typedef struct {
  int world, rank;
  peer *peers; /* (world), peers[rank] unused */
  double peer_timeout, hb_interval;
  pthread_mutex_t mu;
  pthread_t hb_thread;
  int hb_started, stop;
  ctrain_err failed;
  float *tmp; /* reduce-scatter receive buffer */
  size_t tmp_cap;
} ring_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)(v >> 32));
  put32(p + 4, (uint32_t)v);
}

static uint64_t get64(const uint8_t *p) {
  return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* ---------------------------------------------------------------------------
 * Blocking-with-deadline I/O used by the handshake.
 * ------------------------------------------------------------------------- */

static ctrain_err io_full(int fd, void *buf, size_t len, double deadline, int writing) {
  uint8_t *p = buf;
  size_t done = 0;
  while (done < len) {
    double left = deadline - now_s();
    if (left <= 0)
      return CTRAIN_E_TIMEOUT;
    struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
    int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0)
      return CTRAIN_E_NET;
    if (pr == 0)
      continue;
    ssize_t n =
        writing ? send(fd, p + done, len - done, MSG_NOSIGNAL) : recv(fd, p + done, len - done, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      continue;
    if (n <= 0)
      return CTRAIN_E_PEER;
    done += (size_t)n;
  }
  return CTRAIN_OK;
}

static void hs_mac(const char *token, const char *label, const char *job, uint32_t attempt,
                   uint32_t client_rank, uint32_t server_rank, const uint8_t *nc, const uint8_t *ns,
                   uint8_t out[MAC_LEN]) {
  uint8_t msg[64 + JOB_MAX + 2 * NONCE_LEN];
  size_t off = 0, ll = strlen(label), jl = strlen(job);
  memcpy(msg + off, label, ll);
  off += ll;
  put32(msg + off, (uint32_t)jl);
  off += 4;
  memcpy(msg + off, job, jl);
  off += jl;
  put32(msg + off, attempt);
  put32(msg + off + 4, client_rank);
  put32(msg + off + 8, server_rank);
  off += 12;
  memcpy(msg + off, nc, NONCE_LEN);
  memcpy(msg + off + NONCE_LEN, ns, NONCE_LEN);
  off += 2 * NONCE_LEN;
  unsigned int mlen = MAC_LEN;
  HMAC(EVP_sha256(), token, (int)strlen(token), msg, off, out, &mlen);
}

/* Client side of the handshake on a connected socket to `server_rank`. */
static ctrain_err hs_client(const ring_config *cfg, int fd, int server_rank, double deadline,
                            char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  uint8_t hello[24 + NONCE_LEN + JOB_MAX], reply[12 + NONCE_LEN + MAC_LEN], fin[8],
      conf[4 + MAC_LEN], nc[NONCE_LEN], mac[MAC_LEN];
  size_t jl = strlen(cfg->job);
  if (RAND_bytes(nc, NONCE_LEN) != 1) {
    snprintf(errbuf, errlen, "RAND_bytes failed");
    return CTRAIN_E_AUTH;
  }
  memcpy(hello, "CTRH", 4);
  put32(hello + 4, RING_VERSION);
  put32(hello + 8, cfg->attempt);
  put32(hello + 12, (uint32_t)cfg->rank);
  put32(hello + 16, (uint32_t)cfg->world);
  memcpy(hello + 20, nc, NONCE_LEN);
  put32(hello + 20 + NONCE_LEN, (uint32_t)jl);
  memcpy(hello + 24 + NONCE_LEN, cfg->job, jl);
  result = io_full(fd, hello, 24 + NONCE_LEN + jl, deadline, 1);
  if (!result)
    result = io_full(fd, reply, sizeof(reply), deadline, 0);
  if (result) {
    snprintf(errbuf, errlen, "handshake with rank %d (%s): %s", server_rank,
             cfg->addrs[server_rank], ctrain_strerror(result));
    return result;
  }
  uint32_t status = get32(reply + 4);
  if (memcmp(reply, "CTRS", 4) || status != HS_OK) {
    snprintf(errbuf, errlen, "rank %d (%s) refused our handshake: %s", server_rank,
             cfg->addrs[server_rank],
             status < sizeof(hs_reason) / sizeof(hs_reason[0]) ? hs_reason[status] : "protocol");
    return CTRAIN_E_AUTH;
  }
  if (get32(reply + 8) != (uint32_t)server_rank) {
    snprintf(errbuf, errlen, "%s answered as rank %u, expected rank %d", cfg->addrs[server_rank],
             get32(reply + 8), server_rank);
    return CTRAIN_E_AUTH;
  }
  const uint8_t *ns = reply + 12;
  hs_mac(cfg->token, "ctrain-server", cfg->job, cfg->attempt, (uint32_t)cfg->rank,
         (uint32_t)server_rank, nc, ns, mac);
  /* Our proof goes out even if the server's failed, so that the server can
   * log the mismatch too; it reveals nothing about the token. */
  memcpy(conf, "CTRC", 4);
  hs_mac(cfg->token, "ctrain-client", cfg->job, cfg->attempt, (uint32_t)cfg->rank,
         (uint32_t)server_rank, nc, ns, conf + 4);
  result = io_full(fd, conf, sizeof(conf), deadline, 1);
  if (CRYPTO_memcmp(mac, reply + 12 + NONCE_LEN, MAC_LEN)) {
    snprintf(errbuf, errlen, "rank %d (%s) failed authentication: %s", server_rank,
             cfg->addrs[server_rank], hs_reason[HS_BAD_MAC]);
    return CTRAIN_E_AUTH;
  }
  if (!result)
    result = io_full(fd, fin, sizeof(fin), deadline, 0);
  if (result) {
    snprintf(errbuf, errlen, "handshake with rank %d (%s): %s", server_rank,
             cfg->addrs[server_rank], ctrain_strerror(result));
    return result;
  }
  status = get32(fin + 4);
  if (memcmp(fin, "CTRK", 4) || status != HS_OK) {
    snprintf(errbuf, errlen, "rank %d (%s) refused our handshake: %s", server_rank,
             cfg->addrs[server_rank],
             status < sizeof(hs_reason) / sizeof(hs_reason[0]) ? hs_reason[status] : "protocol");
    return CTRAIN_E_AUTH;
  }
  return CTRAIN_OK;
}

/* Server side: returns the authenticated client's rank in *client_rank, or
 * an error after telling the client why (logged by the caller). */
static ctrain_err hs_server(const ring_config *cfg, int fd, const peer *peers, double deadline,
                            int *client_rank, char *why, size_t whylen) {
  uint8_t hello[24 + NONCE_LEN], job[JOB_MAX + 1], reply[12 + NONCE_LEN + MAC_LEN], fin[8],
      conf[4 + MAC_LEN], ns[NONCE_LEN], mac[MAC_LEN];
  uint32_t status = HS_OK;
  ctrain_err result = io_full(fd, hello, sizeof(hello), deadline, 0);
  if (result) {
    snprintf(why, whylen, "no hello: %s", ctrain_strerror(result));
    return result;
  }
  if (memcmp(hello, "CTRH", 4)) {
    snprintf(why, whylen, "not a ctrain peer (bad magic)");
    return CTRAIN_E_AUTH;
  }
  uint32_t version = get32(hello + 4), attempt = get32(hello + 8), rank = get32(hello + 12),
           world = get32(hello + 16), jl = get32(hello + 20 + NONCE_LEN);
  const uint8_t *nc = hello + 20;
  *client_rank = (int)rank;
  if (jl > JOB_MAX) {
    snprintf(why, whylen, "job name of %u bytes", jl);
    return CTRAIN_E_AUTH;
  }
  result = io_full(fd, job, jl, deadline, 0);
  if (result) {
    snprintf(why, whylen, "truncated hello: %s", ctrain_strerror(result));
    return result;
  }
  job[jl] = 0;
  if (version != RING_VERSION)
    status = HS_BAD_VERSION;
  else if (strlen(cfg->job) != jl || memcmp(job, cfg->job, jl))
    status = HS_BAD_JOB;
  else if (attempt != cfg->attempt)
    status = HS_BAD_ATTEMPT;
  else if (world != (uint32_t)cfg->world || rank <= (uint32_t)cfg->rank ||
           rank >= (uint32_t)cfg->world || peers[rank].fd >= 0)
    status = HS_BAD_RANK;
  if (RAND_bytes(ns, NONCE_LEN) != 1)
    return CTRAIN_E_AUTH;
  memcpy(reply, "CTRS", 4);
  put32(reply + 4, status);
  put32(reply + 8, (uint32_t)cfg->rank);
  memcpy(reply + 12, ns, NONCE_LEN);
  memset(reply + 12 + NONCE_LEN, 0, MAC_LEN);
  if (status == HS_OK)
    hs_mac(cfg->token, "ctrain-server", cfg->job, attempt, rank, (uint32_t)cfg->rank, nc, ns,
           reply + 12 + NONCE_LEN);
  result = io_full(fd, reply, sizeof(reply), deadline, 1);
  if (status != HS_OK) {
    if (status == HS_BAD_JOB)
      snprintf(why, whylen, "claims rank %u: job '%s', expected '%s'", rank, (char *)job, cfg->job);
    else if (status == HS_BAD_ATTEMPT)
      snprintf(why, whylen, "claims rank %u: attempt %u, expected %u", rank, attempt, cfg->attempt);
    else
      snprintf(why, whylen, "claims rank %u of %u: %s", rank, world, hs_reason[status]);
    return CTRAIN_E_AUTH;
  }
  if (!result)
    result = io_full(fd, conf, sizeof(conf), deadline, 0);
  if (result) {
    snprintf(why, whylen, "claims rank %u: handshake cut short: %s", rank, ctrain_strerror(result));
    return result;
  }
  hs_mac(cfg->token, "ctrain-client", cfg->job, attempt, rank, (uint32_t)cfg->rank, nc, ns, mac);
  if (memcmp(conf, "CTRC", 4) || CRYPTO_memcmp(mac, conf + 4, MAC_LEN))
    status = HS_BAD_MAC;
  memcpy(fin, "CTRK", 4);
  put32(fin + 4, status);
  result = io_full(fd, fin, sizeof(fin), deadline, 1);
  if (status != HS_OK) {
    snprintf(why, whylen, "claims rank %u: %s", rank, hs_reason[status]);
    return CTRAIN_E_AUTH;
  }
  if (result)
    snprintf(why, whylen, "claims rank %u: handshake cut short: %s", rank, ctrain_strerror(result));
  return result;
}

/* Splits "host:port" or "[v6]:port". */
static int split_addr(const char *addr, char *host, size_t hlen, char *port, size_t plen) {
  const char *colon = strrchr(addr, ':');
  if (!colon || !colon[1] || strlen(colon + 1) >= plen)
    return -1;
  const char *h = addr;
  size_t n = (size_t)(colon - addr);
  if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
    h++;
    n -= 2;
  }
  if (n >= hlen)
    return -1;
  memcpy(host, h, n);
  host[n] = 0;
  memcpy(port, colon + 1, strlen(colon + 1) + 1);
  return 0;
}

/* One resolve + connect attempt with a short deadline; -1 on failure. */
static int try_connect(const char *host, const char *port, double deadline) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int fd = -1;
  if (getaddrinfo(host, port, &hints, &res))
    return -1;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
      continue;
    set_nonblock(fd);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
      break;
    if (errno == EINPROGRESS) {
      struct pollfd pfd = {.fd = fd, .events = POLLOUT};
      double left = deadline - now_s();
      int err = 0;
      socklen_t el = sizeof(err);
      if (left > 0 && poll(&pfd, 1, (int)(left * 1000) + 1) == 1 &&
          !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) && err == 0)
        break;
    }
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

static int make_listener(const ring_config *cfg, char *errbuf, size_t errlen) {
  char host[256], port[32];
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE},
                  *res = NULL;
  int fd = -1, one = 1, rc;
  if (split_addr(cfg->addrs[cfg->rank], host, sizeof(host), port, sizeof(port))) {
    snprintf(errbuf, errlen, "own address '%s' is not host:port", cfg->addrs[cfg->rank]);
    return -1;
  }
  if (!cfg->bind_host)
    hints.ai_family = AF_INET6; /* dual-stack any-address */
  rc = getaddrinfo(cfg->bind_host, port, &hints, &res);
  if (rc && !cfg->bind_host) {
    hints.ai_family = AF_INET;
    rc = getaddrinfo(NULL, port, &hints, &res);
  }
  if (rc) {
    snprintf(errbuf, errlen, "listen address for port %s: %s", port, gai_strerror(rc));
    return -1;
  }
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
      continue;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) {
      int zero = 0;
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
      snprintf(errbuf, errlen, "listen on port %s: %s", port, strerror(errno));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0)
    set_nonblock(fd);
  return fd;
}

static void tune_socket(int fd) {
  int one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  set_nonblock(fd);
}

/* ---------------------------------------------------------------------------
 * Progress engine
 * ------------------------------------------------------------------------- */

static ctrain_err lost(coll_t *c, peer *p, const char *what) {
  ring_t *r = c->impl;
  snprintf(c->err, sizeof(c->err), "peer rank %d (%s) lost: %s", p->rank, p->addr, what);
  r->failed = CTRAIN_E_PEER;
  return CTRAIN_E_PEER;
}

static void start_frame(peer *p, uint32_t type, const void *buf, size_t len) {
  put32(p->txhdr, FRAME_MAGIC);
  put32(p->txhdr + 4, type);
  put64(p->txhdr + 8, len);
  p->txbuf = buf;
  p->txlen = len;
  p->txoff = 0;
  p->tx_active = 1;
  p->tx_data = type == FRAME_DATA;
}

static ctrain_err do_send(coll_t *c, peer *p, double now) {
  while (p->tx_active) {
    struct iovec iov[2];
    int n = 0;
    if (p->txoff < HDR_LEN) {
      iov[n].iov_base = p->txhdr + p->txoff;
      iov[n++].iov_len = HDR_LEN - p->txoff;
      if (p->txlen) {
        iov[n].iov_base = (void *)p->txbuf;
        iov[n++].iov_len = p->txlen;
      }
    } else {
      iov[n].iov_base = (void *)(p->txbuf + (p->txoff - HDR_LEN));
      iov[n++].iov_len = p->txlen - (p->txoff - HDR_LEN);
    }
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(p->fd, &mh, MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return CTRAIN_OK;
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      char what[128];
      snprintf(what, sizeof(what), "send: %s", strerror(errno));
      return lost(c, p, what);
    }
    p->txoff += (size_t)w;
    p->last_tx = now;
    if (p->txoff == HDR_LEN + p->txlen) {
      p->tx_active = 0;
      if (p->tx_data)
        p->sent_frame = 1;
    }
  }
  return CTRAIN_OK;
}

/* Whether the engine may read from p now: not while an unwanted DATA frame
 * waits for the operation that will take it. */
static int can_read(const peer *p) {
  return !p->closed && (!p->rx_pending || (p->want && !p->got_frame));
}

static ctrain_err do_recv(coll_t *c, peer *p, double now) {
  for (;;) {
    if (!can_read(p))
      return CTRAIN_OK;
    ssize_t n;
    if (!p->rx_pending) {
      n = recv(p->fd, p->rxhdr + p->rxhdr_got, HDR_LEN - p->rxhdr_got, 0);
    } else {
      size_t left = p->dst_len - p->dst_got;
      if (left == 0) {
        p->rx_pending = 0;
        p->got_frame = 1;
        continue;
      }
      n = recv(p->fd, p->dst + p->dst_got, left, 0);
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return CTRAIN_OK;
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      char what[160];
      snprintf(what, sizeof(what), "recv: %s%s", strerror(errno),
               errno == ECONNRESET ? " (process died?)" : "");
      return lost(c, p, what);
    }
    if (n == 0)
      return lost(c, p, "connection closed without an orderly shutdown (process died?)");
    p->last_rx = now;
    if (p->rx_pending) {
      p->dst_got += (size_t)n;
      if (p->dst_got == p->dst_len) {
        p->rx_pending = 0;
        p->got_frame = 1;
      }
      continue;
    }
    p->rxhdr_got += (size_t)n;
    if (p->rxhdr_got < HDR_LEN)
      continue;
    p->rxhdr_got = 0;
    uint32_t magic = get32(p->rxhdr), type = get32(p->rxhdr + 4);
    uint64_t len = get64(p->rxhdr + 8);
    if (magic != FRAME_MAGIC)
      return lost(c, p, "protocol error: bad frame magic");
    if (type == FRAME_HEARTBEAT)
      continue;
    if (type == FRAME_BYE) {
      p->closed = 1;
      return CTRAIN_OK;
    }
    if (type == FRAME_ABORT) {
      /* A peer that lost someone else says whom before it exits, so this
       * rank names the dead peer rather than the messenger. */
      char why[ABORT_MAX + 1] = "";
      size_t n_why = len < ABORT_MAX ? (size_t)len : ABORT_MAX;
      if (io_full(p->fd, why, n_why, now + 1.0, 0))
        n_why = 0;
      why[n_why] = '\0';
      ring_t *r = c->impl;
      snprintf(c->err, sizeof(c->err), "%.380s (reported by peer rank %d, %.64s)",
               n_why ? why : "a peer gave up without a reason", p->rank, p->addr);
      r->failed = CTRAIN_E_PEER;
      return CTRAIN_E_PEER;
    }
    if (type != FRAME_DATA)
      return lost(c, p, "protocol error: unknown frame type");
    p->rx_pending = 1;
    p->rx_len = len;
    if (p->want && !p->got_frame && len != p->dst_len) {
      char what[128];
      snprintf(what, sizeof(what), "protocol error: frame of %llu bytes, expected %zu",
               (unsigned long long)len, p->dst_len);
      return lost(c, p, what);
    }
  }
}

/* Runs until every peer with send_queued has sent and every peer with want
 * has received its frame. once: a single non-blocking pass (heartbeat thread). */
static ctrain_err progress(coll_t *c, int once) {
  ring_t *r = c->impl;
  struct pollfd *pfd = NULL;
  int *idx = NULL;
  ctrain_err result = CTRAIN_OK;
  if (r->failed)
    return r->failed;
  pfd = calloc((size_t)r->world, sizeof(*pfd));
  idx = calloc((size_t)r->world, sizeof(*idx));
  if (!pfd || !idx) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (;;) {
    double now = now_s();
    int busy = 0, np = 0;
    for (int i = 0; i < r->world; i++) {
      peer *p = &r->peers[i];
      if (i == r->rank)
        continue;
      if (!p->tx_active && p->send_queued && !p->sent_frame) {
        start_frame(p, FRAME_DATA, p->send_buf, p->send_len);
      } else if (!p->tx_active && now - p->last_tx >= r->hb_interval && !p->closed) {
        start_frame(p, FRAME_HEARTBEAT, NULL, 0);
      }
      if (p->tx_active) {
        result = do_send(c, p, now);
        if (result)
          goto out;
      }
      if (p->want && !p->got_frame && p->closed) {
        result = lost(c, p, "closed its end of the collective while we still expect data");
        goto out;
      }
      if ((p->send_queued && !p->sent_frame) || (p->want && !p->got_frame))
        busy = 1;
      short ev = (short)((p->tx_active ? POLLOUT : 0) | (can_read(p) ? POLLIN : 0));
      if (ev) {
        pfd[np].fd = p->fd;
        pfd[np].events = ev;
        idx[np++] = i;
      }
      /* Silence: data waiting unread proves the peer alive. */
      if (!p->closed && !p->rx_pending && now - p->last_rx > r->peer_timeout) {
        char what[128];
        snprintf(what, sizeof(what), "silent for %.1f s (peer timeout %.1f s)", now - p->last_rx,
                 r->peer_timeout);
        result = lost(c, p, what);
        goto out;
      }
    }
    if (!busy && !once)
      break;
    int timeout_ms = once ? 0 : (int)(r->hb_interval * 500) + 1;
    int pr = poll(pfd, (nfds_t)np, timeout_ms);
    if (pr < 0 && errno != EINTR) {
      snprintf(c->err, sizeof(c->err), "poll: %s", strerror(errno));
      result = r->failed = CTRAIN_E_NET;
      goto out;
    }
    now = now_s();
    for (int k = 0; pr > 0 && k < np; k++) {
      peer *p = &r->peers[idx[k]];
      if (pfd[k].revents & (POLLOUT | POLLERR | POLLHUP)) {
        result = do_send(c, p, now);
        if (result)
          goto out;
      }
      if (pfd[k].revents & (POLLIN | POLLERR | POLLHUP)) {
        result = do_recv(c, p, now);
        if (result)
          goto out;
      }
    }
    if (once)
      break;
  }
out:
  free(pfd);
  free(idx);
  return result;
}

/* One exchange: send `sbuf` to `to` (or -1) and receive into `rbuf` from
 * `from` (or -1), concurrently. */
static ctrain_err exchange(coll_t *c, int to, const void *sbuf, size_t slen, int from, void *rbuf,
                           size_t rlen) {
  ring_t *r = c->impl;
  for (int i = 0; i < r->world; i++) {
    peer *p = &r->peers[i];
    p->send_queued = p->sent_frame = p->want = p->got_frame = 0;
  }
  if (to >= 0) {
    peer *p = &r->peers[to];
    p->send_queued = 1;
    p->send_buf = sbuf;
    p->send_len = slen;
  }
  if (from >= 0) {
    peer *p = &r->peers[from];
    p->want = 1;
    p->dst = rbuf;
    p->dst_len = rlen;
    p->dst_got = 0;
    if (p->rx_pending && p->rx_len != rlen)
      return lost(c, p, "protocol error: frame size mismatch");
  }
  return progress(c, 0);
}

/* ---------------------------------------------------------------------------
 * Collectives
 * ------------------------------------------------------------------------- */

static void chunk(size_t n, int world, int c, size_t *off, size_t *len) {
  size_t base = n / (size_t)world, rem = n % (size_t)world, uc = (size_t)c;
  *off = uc * base + (uc < rem ? uc : rem);
  *len = base + (uc < rem ? 1 : 0);
}

/* Ring all-reduce: N-1 reduce-scatter steps, then N-1 all-gather steps. In
 * reduce-scatter step s rank r sends chunk (r-s) to r+1 and adds chunk
 * (r-s-1) received from r-1, so chunk k is summed in the fixed order
 * k, k+1, ..., k-1: deterministic, and the all-gather hands every rank the
 * same bits. */
static ctrain_err ring_allreduce(coll_t *c, float *buf, size_t n) {
  ring_t *r = c->impl;
  ctrain_err result = CTRAIN_OK;
  int W = r->world, next = (r->rank + 1) % W, prev = (r->rank + W - 1) % W;
  if (n == 0 || W == 1)
    return r->failed;
  pthread_mutex_lock(&r->mu);
  size_t maxc = n / (size_t)W + 1;
  if (r->tmp_cap < maxc) {
    float *t = realloc(r->tmp, maxc * sizeof(float));
    if (!t) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    r->tmp = t;
    r->tmp_cap = maxc;
  }
  for (int s = 0; s < W - 1; s++) {
    size_t so, sl, ro, rl;
    chunk(n, W, ((r->rank - s) % W + W) % W, &so, &sl);
    chunk(n, W, ((r->rank - s - 1) % W + W) % W, &ro, &rl);
    result = exchange(c, next, buf + so, sl * sizeof(float), prev, r->tmp, rl * sizeof(float));
    if (result)
      goto out;
    float *d = buf + ro;
    for (size_t i = 0; i < rl; i++)
      d[i] = r->tmp[i] + d[i];
  }
  for (int s = 0; s < W - 1; s++) {
    size_t so, sl, ro, rl;
    chunk(n, W, ((r->rank + 1 - s) % W + W) % W, &so, &sl);
    chunk(n, W, ((r->rank - s) % W + W) % W, &ro, &rl);
    result = exchange(c, next, buf + so, sl * sizeof(float), prev, buf + ro, rl * sizeof(float));
    if (result)
      goto out;
  }
out:
  pthread_mutex_unlock(&r->mu);
  return result;
}

/* Broadcast along the ring (root -> root+1 -> ...): each rank receives, then
 * forwards, so the root's bandwidth is not divided by N. */
static ctrain_err ring_broadcast(coll_t *c, void *buf, size_t bytes, int root) {
  ring_t *r = c->impl;
  ctrain_err result = CTRAIN_OK;
  int W = r->world, next = (r->rank + 1) % W, prev = (r->rank + W - 1) % W;
  if (W == 1)
    return r->failed;
  pthread_mutex_lock(&r->mu);
  if (r->rank != root) {
    result = exchange(c, -1, NULL, 0, prev, buf, bytes);
    if (result)
      goto out;
  }
  if (next != root)
    result = exchange(c, next, buf, bytes, -1, NULL, 0);
out:
  pthread_mutex_unlock(&r->mu);
  return result;
}

/* Small vectors: N-1 ring steps passing each rank's slot along. */
static ctrain_err ring_allgather(coll_t *c, const float *in, size_t n, float *out) {
  ring_t *r = c->impl;
  ctrain_err result = CTRAIN_OK;
  int W = r->world, next = (r->rank + 1) % W, prev = (r->rank + W - 1) % W;
  memmove(out + (size_t)r->rank * n, in, n * sizeof(float));
  if (W == 1)
    return r->failed;
  pthread_mutex_lock(&r->mu);
  for (int s = 0; s < W - 1; s++) {
    int sc = ((r->rank - s) % W + W) % W, rc = ((r->rank - s - 1) % W + W) % W;
    result = exchange(c, next, out + (size_t)sc * n, n * sizeof(float), prev, out + (size_t)rc * n,
                      n * sizeof(float));
    if (result)
      break;
  }
  pthread_mutex_unlock(&r->mu);
  return result;
}

static ctrain_err ring_barrier(coll_t *c) {
  ring_t *r = c->impl;
  float one = 1.0f, *all = calloc((size_t)r->world, sizeof(float));
  ctrain_err result;
  if (!all)
    return CTRAIN_E_NOMEM;
  result = ring_allgather(c, &one, 1, all);
  free(all);
  return result;
}

static void *hb_main(void *arg) {
  coll_t *c = arg;
  ring_t *r = c->impl;
  for (;;) {
    struct timespec ts = {.tv_sec = (time_t)(r->hb_interval / 2),
                          .tv_nsec =
                              (long)(((r->hb_interval / 2) - (time_t)(r->hb_interval / 2)) * 1e9)};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&r->mu);
    if (r->stop) {
      pthread_mutex_unlock(&r->mu);
      break;
    }
    if (!r->failed && progress(c, 1) && r->failed)
      LOG_DEBUG("collective: %s (noticed between operations)", c->err);
    pthread_mutex_unlock(&r->mu);
  }
  return NULL;
}

static void ring_destroy(coll_t *c) {
  ring_t *r = c->impl;
  if (r) {
    if (r->hb_started) {
      pthread_mutex_lock(&r->mu);
      r->stop = 1;
      pthread_mutex_unlock(&r->mu);
      pthread_join(r->hb_thread, NULL);
    }
    for (int i = 0; r->peers && i < r->world; i++) {
      peer *p = &r->peers[i];
      if (p->fd < 0)
        continue;
      if (!r->failed && !p->tx_active) {
        /* Orderly end: BYE, so the peer does not take our exit for a crash. */
        uint8_t bye[HDR_LEN];
        put32(bye, FRAME_MAGIC);
        put32(bye + 4, FRAME_BYE);
        put64(bye + 8, 0);
        io_full(p->fd, bye, sizeof(bye), now_s() + 1.0, 1);
      } else if (r->failed && !p->tx_active) {
        /* Failed: tell the others why (best effort, short deadline), so they
         * blame the peer we lost and not our own exit. */
        uint8_t msg[HDR_LEN + ABORT_MAX];
        size_t n = strnlen(c->err, ABORT_MAX);
        put32(msg, FRAME_MAGIC);
        put32(msg + 4, FRAME_ABORT);
        put64(msg + 8, n);
        memcpy(msg + HDR_LEN, c->err, n);
        io_full(p->fd, msg, HDR_LEN + n, now_s() + 0.2, 1);
      }
      close(p->fd);
    }
    free(r->peers);
    free(r->tmp);
    pthread_mutex_destroy(&r->mu);
    free(r);
  }
  free(c);
}

static const coll_ops ring_ops = {
    .name = "ring",
    .allreduce_sum = ring_allreduce,
    .broadcast = ring_broadcast,
    .barrier = ring_barrier,
    .allgather = ring_allgather,
    .destroy = ring_destroy,
};

/* ---------------------------------------------------------------------------
 * Rendezvous
 * ------------------------------------------------------------------------- */

ctrain_err ring_create(const ring_config *cfg, coll_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  coll_t *c = NULL;
  ring_t *r = NULL;
  int lfd = -1;
  double start = now_s(), deadline = start + cfg->rendezvous_timeout;
  *out = NULL;
  if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world || !cfg->job ||
      strlen(cfg->job) > JOB_MAX || !cfg->token || !cfg->token[0]) {
    snprintf(errbuf, errlen, "ring: bad config (rank %d of %d, job and token required)", cfg->rank,
             cfg->world);
    return CTRAIN_E_INVAL;
  }
  c = calloc(1, sizeof(*c));
  r = calloc(1, sizeof(*r));
  if (!c || !r) {
    free(c);
    free(r);
    return CTRAIN_E_NOMEM;
  }
  c->ops = &ring_ops;
  c->impl = r;
  c->rank = cfg->rank;
  c->world = cfg->world;
  r->rank = cfg->rank;
  r->world = cfg->world;
  r->peer_timeout = cfg->peer_timeout;
  r->hb_interval = cfg->peer_timeout / 5;
  if (r->hb_interval > 2.0)
    r->hb_interval = 2.0;
  if (r->hb_interval < 0.01)
    r->hb_interval = 0.01;
  pthread_mutex_init(&r->mu, NULL);
  r->peers = calloc((size_t)cfg->world, sizeof(peer));
  if (!r->peers) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (int i = 0; i < cfg->world; i++) {
    r->peers[i].fd = -1;
    r->peers[i].rank = i;
    snprintf(r->peers[i].addr, sizeof(r->peers[i].addr), "%s", cfg->addrs[i]);
  }
  if (cfg->world == 1)
    goto done;
  if (cfg->rank < cfg->world - 1) {
    lfd = make_listener(cfg, errbuf, errlen);
    if (lfd < 0) {
      result = CTRAIN_E_NET;
      goto out;
    }
  }
  /* Connect to every lower rank, retrying until the deadline. */
  for (int j = 0; j < cfg->rank; j++) {
    char host[256], port[32];
    int tries = 0;
    if (split_addr(cfg->addrs[j], host, sizeof(host), port, sizeof(port))) {
      snprintf(errbuf, errlen, "rank %d address '%s' is not host:port", j, cfg->addrs[j]);
      result = CTRAIN_E_CONFIG;
      goto out;
    }
    for (;;) {
      double t = now_s();
      if (t >= deadline) {
        snprintf(errbuf, errlen,
                 "rendezvous: rank %d (%s) not reachable after %.1f s and %d attempts", j,
                 cfg->addrs[j], t - start, tries);
        result = CTRAIN_E_TIMEOUT;
        goto out;
      }
      tries++;
      double cd = t + 2.0 < deadline ? t + 2.0 : deadline;
      int fd = try_connect(host, port, cd);
      if (fd < 0) {
        if (tries == 1 || tries % 20 == 0)
          LOG_INFO("rendezvous: waiting for rank %d (%s)", j, cfg->addrs[j]);
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
        continue;
      }
      tune_socket(fd);
      result = hs_client(cfg, fd, j, deadline, errbuf, errlen);
      if (result) {
        close(fd);
        goto out;
      }
      r->peers[j].fd = fd;
      LOG_DEBUG("rendezvous: connected to rank %d (%s)", j, cfg->addrs[j]);
      break;
    }
  }
  /* Accept every higher rank; refuse and log anyone else. */
  for (int have = 0; have < cfg->world - 1 - cfg->rank;) {
    double left = deadline - now_s();
    if (left <= 0) {
      int missing = -1;
      for (int j = cfg->rank + 1; j < cfg->world && missing < 0; j++)
        if (r->peers[j].fd < 0)
          missing = j;
      snprintf(errbuf, errlen, "rendezvous: rank %d (%s) did not connect within %.1f s", missing,
               cfg->addrs[missing], cfg->rendezvous_timeout);
      result = CTRAIN_E_TIMEOUT;
      goto out;
    }
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    if (poll(&pfd, 1, (int)(left * 1000) + 1) <= 0)
      continue;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0)
      continue;
    char who[128] = "?", serv[32] = "?", why[640] = "";
    getnameinfo((struct sockaddr *)&ss, sl, who, sizeof(who), serv, sizeof(serv),
                NI_NUMERICHOST | NI_NUMERICSERV);
    tune_socket(fd);
    int crank = -1;
    double hd = now_s() + 10.0 < deadline ? now_s() + 10.0 : deadline;
    if (hs_server(cfg, fd, r->peers, hd, &crank, why, sizeof(why))) {
      LOG_WARN("rendezvous: refused connection from %s:%s (%s)", who, serv, why);
      close(fd);
      continue;
    }
    r->peers[crank].fd = fd;
    have++;
    LOG_DEBUG("rendezvous: accepted rank %d (%s) from %s", crank, cfg->addrs[crank], who);
  }
done : {
  double t = now_s();
  for (int i = 0; i < cfg->world; i++)
    r->peers[i].last_rx = r->peers[i].last_tx = t;
}
  if (cfg->world > 1) {
    if (pthread_create(&r->hb_thread, NULL, hb_main, c)) {
      result = CTRAIN_E_NOMEM;
      goto out;
    }
    r->hb_started = 1;
  }
  LOG_INFO("rendezvous: rank %d of %d connected in %.2f s", cfg->rank, cfg->world, now_s() - start);
  *out = c;
  c = NULL;
out:
  if (lfd >= 0)
    close(lfd);
  if (c) {
    r->failed = result; /* no BYE on a failed setup */
    ring_destroy(c);
  }
  return result;
}
