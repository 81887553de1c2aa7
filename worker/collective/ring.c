/* ring.c - TCP collective: rendezvous with an HMAC handshake, a framed
 * non-blocking progress engine with heartbeats, ring all-reduce. */
#include "ctrain/clock.h"
#include "worker/collective/ring.h"

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
#include "ctrain/tfconfig.h"

#define ABORT_MAX  512
#define HDR_LEN    RING_FRAME_HDR_LEN
#define NONCE_LEN  RING_HS_NONCE_LEN
#define MAC_LEN    RING_HS_MAC_LEN
#define JOB_MAX    RING_JOB_MAX
#define HS_SIGNED  36 /* hello bytes the MACs cover: magic .. nonce_c */
#define HS_LABEL_C "ctrain-client"
#define HS_LABEL_S "ctrain-server"
/* New connections a listening rank admits per poll round: it reads the
 * pending hellos between rounds, so a flood of connects sheds a real peer's
 * connection only after RING_HS_PENDING_MAX newer ones, several rounds on. */
#define HS_ACCEPT_BATCH 8
/* No pending connection is shed for a newcomer before it has had this long
 * to answer its challenge: a live peer does in a round trip, even on a busy
 * node, so a flood of connects cannot shed it before it can; newcomers wait
 * in the kernel's accept queue meanwhile, which still drains at
 * RING_HS_PENDING_MAX / HS_SHED_MIN_AGE_S connections a second. */
#define HS_SHED_MIN_AGE_S 0.05
/* Accept queue: deep, so that a burst of connects does not drop the real
 * peer's SYN (and cost it a 1 s retransmit); the kernel caps it at
 * net.core.somaxconn. */
#define HS_BACKLOG SOMAXCONN
/* Refusals a rendezvous logs one by one; the rest are counted in a summary,
 * so connections without the token cannot flood the log. */
#define HS_LOG_MAX 16
/* How long a client waits for the challenge on one connection. A server
 * still connecting to its own lower ranks accepts late, and reconnecting
 * sooner would only fill its backlog; a server that vanished without a reset
 * is given up on after this and resolved again. */
#define HS_CHALLENGE_WAIT_S 10.0

typedef struct {
  int fd;
  int rank;
  char addr[TFCONFIG_ADDR_MAX + 1];
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
 * Blocking-with-deadline I/O used by the client side of the handshake and by
 * the orderly goodbyes.
 * ------------------------------------------------------------------------- */

/* Moves len bytes, polling until `deadline`. CTRAIN_OK when all moved;
 * CTRAIN_E_TIMEOUT; CTRAIN_E_PEER when the peer closed its end (reading);
 * CTRAIN_E_NET on a socket error (a reset). *done (may be NULL) says how
 * many bytes moved either way. */
static ctrain_err io_xfer(int fd, void *buf, size_t len, double deadline, int writing,
                          size_t *done_out) {
  uint8_t *p = buf;
  size_t done = 0;
  ctrain_err result = CTRAIN_OK;
  while (done < len) {
    double left = deadline - ctrain_mono_s();
    if (left <= 0) {
      result = CTRAIN_E_TIMEOUT;
      goto out;
    }
    struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
    int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR)
      continue;
    if (pr < 0) {
      result = CTRAIN_E_NET;
      goto out;
    }
    if (pr == 0)
      continue;
    ssize_t n =
        writing ? send(fd, p + done, len - done, MSG_NOSIGNAL) : recv(fd, p + done, len - done, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
      continue;
    if (n < 0) {
      result = CTRAIN_E_NET;
      goto out;
    }
    if (n == 0) {
      result = CTRAIN_E_PEER;
      goto out;
    }
    done += (size_t)n;
  }
out:
  if (done_out)
    *done_out = done;
  return result;
}

static ctrain_err io_full(int fd, void *buf, size_t len, double deadline, int writing) {
  return io_xfer(fd, buf, len, deadline, writing, NULL);
}

/* ---------------------------------------------------------------------------
 * Handshake messages (format in ring.h)
 * ------------------------------------------------------------------------- */

static int hs_cfg_ok(const ring_config *cfg) {
  return cfg && cfg->job && strlen(cfg->job) <= JOB_MAX && cfg->token && cfg->token[0];
}

/* out = HMAC-SHA256(token, label | u32 len(job) | job | u32 server rank |
 * nonce_s | signed[0, HS_SIGNED)). The job is at most JOB_MAX (hs_cfg_ok). */
static void hs_mac(const ring_config *cfg, const char *label, uint32_t server_rank,
                   const uint8_t *nonce_s, const uint8_t *signed_part, uint8_t out[MAC_LEN]) {
  uint8_t msg[16 + 4 + JOB_MAX + 4 + NONCE_LEN + HS_SIGNED];
  size_t off = 0, ll = strlen(label), jl = strlen(cfg->job);
  memcpy(msg + off, label, ll);
  off += ll;
  put32(msg + off, (uint32_t)jl);
  off += 4;
  memcpy(msg + off, cfg->job, jl);
  off += jl;
  put32(msg + off, server_rank);
  off += 4;
  memcpy(msg + off, nonce_s, NONCE_LEN);
  off += NONCE_LEN;
  memcpy(msg + off, signed_part, HS_SIGNED);
  off += HS_SIGNED;
  unsigned int mlen = MAC_LEN;
  HMAC(EVP_sha256(), cfg->token, (int)strlen(cfg->token), msg, off, out, &mlen);
}

ctrain_err ring_hs_hello_encode(const ring_config *cfg, int server_rank,
                                const uint8_t nonce_s[RING_HS_NONCE_LEN],
                                const uint8_t nonce_c[RING_HS_NONCE_LEN],
                                uint8_t out[RING_HS_HELLO_LEN]) {
  if (!hs_cfg_ok(cfg) || server_rank < 0)
    return CTRAIN_E_INVAL;
  memcpy(out, "CTRH", 4);
  put32(out + 4, RING_HS_VERSION);
  put32(out + 8, cfg->attempt);
  put32(out + 12, (uint32_t)cfg->rank);
  put32(out + 16, (uint32_t)cfg->world);
  memcpy(out + 20, nonce_c, NONCE_LEN);
  hs_mac(cfg, HS_LABEL_C, (uint32_t)server_rank, nonce_s, out, out + HS_SIGNED);
  return CTRAIN_OK;
}

ctrain_err ring_hs_hello_check(const ring_config *cfg, const uint8_t nonce_s[RING_HS_NONCE_LEN],
                               const uint8_t *buf, size_t len, ring_hs_hello *out, char *why,
                               size_t whylen) {
  uint8_t mac[MAC_LEN];
  memset(out, 0, sizeof(*out));
  if (!hs_cfg_ok(cfg)) {
    snprintf(why, whylen, "bad ring config");
    return CTRAIN_E_INVAL;
  }
  if (len != RING_HS_HELLO_LEN) {
    snprintf(why, whylen, "hello of %zu bytes, expected %d", len, RING_HS_HELLO_LEN);
    return CTRAIN_E_AUTH;
  }
  if (memcmp(buf, "CTRH", 4)) {
    snprintf(why, whylen, "not a ctrain peer (bad magic)");
    return CTRAIN_E_AUTH;
  }
  if (get32(buf + 4) != RING_HS_VERSION) {
    snprintf(why, whylen, "handshake version %u, expected %u", get32(buf + 4), RING_HS_VERSION);
    return CTRAIN_E_AUTH;
  }
  /* Nothing the client claims means anything until its MAC checks out. */
  hs_mac(cfg, HS_LABEL_C, (uint32_t)cfg->rank, nonce_s, buf, mac);
  if (CRYPTO_memcmp(mac, buf + HS_SIGNED, MAC_LEN)) {
    snprintf(why, whylen,
             "HMAC mismatch (wrong CTRAIN_JOB_TOKEN or job name, or not meant for rank %d)",
             cfg->rank);
    return CTRAIN_E_AUTH;
  }
  out->version = get32(buf + 4);
  out->attempt = get32(buf + 8);
  out->rank = get32(buf + 12);
  out->world = get32(buf + 16);
  memcpy(out->nonce, buf + 20, NONCE_LEN);
  if (out->attempt != cfg->attempt) {
    snprintf(why, whylen, "claims rank %u: attempt %u, expected %u", out->rank, out->attempt,
             cfg->attempt);
    return CTRAIN_E_AUTH;
  }
  if (out->world != (uint32_t)cfg->world || out->rank <= (uint32_t)cfg->rank ||
      out->rank >= out->world) {
    snprintf(why, whylen,
             "claims rank %u of %u: rank or world size mismatch (we are rank %d of %d)", out->rank,
             out->world, cfg->rank, cfg->world);
    return CTRAIN_E_AUTH;
  }
  return CTRAIN_OK;
}

ctrain_err ring_hs_proof_check(const ring_config *cfg, int server_rank,
                               const uint8_t nonce_s[RING_HS_NONCE_LEN],
                               const uint8_t hello[RING_HS_HELLO_LEN], const uint8_t *buf,
                               size_t len) {
  uint8_t mac[MAC_LEN];
  if (!hs_cfg_ok(cfg) || server_rank < 0)
    return CTRAIN_E_INVAL;
  if (len != RING_HS_PROOF_LEN || memcmp(buf, "CTRS", 4))
    return CTRAIN_E_AUTH;
  hs_mac(cfg, HS_LABEL_S, (uint32_t)server_rank, nonce_s, hello, mac);
  return CRYPTO_memcmp(mac, buf + 4, MAC_LEN) ? CTRAIN_E_AUTH : CTRAIN_OK;
}

ctrain_err ring_frame_header_parse(const uint8_t *hdr, size_t len, uint32_t *type, uint64_t *length,
                                   char *why, size_t whylen) {
  *type = 0;
  *length = 0;
  if (len != HDR_LEN) {
    snprintf(why, whylen, "protocol error: frame header of %zu bytes", len);
    return CTRAIN_E_PARSE;
  }
  uint32_t t = get32(hdr + 4);
  uint64_t l = get64(hdr + 8);
  if (get32(hdr) != RING_FRAME_MAGIC) {
    snprintf(why, whylen, "protocol error: bad frame magic");
    return CTRAIN_E_PARSE;
  }
  if (t != RING_FRAME_DATA && t != RING_FRAME_HEARTBEAT && t != RING_FRAME_BYE &&
      t != RING_FRAME_ABORT) {
    snprintf(why, whylen, "protocol error: unknown frame type %u", t);
    return CTRAIN_E_PARSE;
  }
  if ((t == RING_FRAME_HEARTBEAT || t == RING_FRAME_BYE) && l) {
    snprintf(why, whylen, "protocol error: control frame with a payload of %llu bytes",
             (unsigned long long)l);
    return CTRAIN_E_PARSE;
  }
  *type = t;
  *length = l;
  return CTRAIN_OK;
}

/* Client side of the handshake on a connected socket to `server_rank`: the
 * challenge within HS_CHALLENGE_WAIT_S (or `deadline`, if sooner), then the
 * rest within RING_HS_TIMEOUT_S. CTRAIN_OK: both sides proved the token.
 * CTRAIN_E_AUTH: refused, not a ctrain rank, or its proof failed: final.
 * Anything else (no challenge, shed as busy, reset, no answer): worth a new
 * connection. The reason is in errbuf either way. */
static ctrain_err hs_client(const ring_config *cfg, int fd, int server_rank, double deadline,
                            char *errbuf, size_t errlen) {
  uint8_t chal[RING_HS_CHALLENGE_LEN], hello[RING_HS_HELLO_LEN], ans[RING_HS_PROOF_LEN],
      nc[NONCE_LEN];
  const char *addr = cfg->addrs[server_rank];
  size_t got = 0;
  double t = ctrain_mono_s();
  double cd = t + HS_CHALLENGE_WAIT_S < deadline ? t + HS_CHALLENGE_WAIT_S : deadline;
  ctrain_err result = io_full(fd, chal, sizeof(chal), cd, 0);
  if (result) {
    snprintf(errbuf, errlen, "rank %d (%s) sent no handshake challenge: %s", server_rank, addr,
             result == CTRAIN_E_PEER ? "connection closed" : ctrain_strerror(result));
    return result;
  }
  if (memcmp(chal, "CTRN", 4) || get32(chal + 4) != RING_HS_VERSION) {
    snprintf(errbuf, errlen, "rank %d (%s) is not a ctrain rank speaking handshake version %u",
             server_rank, addr, RING_HS_VERSION);
    return CTRAIN_E_AUTH;
  }
  if (RAND_bytes(nc, NONCE_LEN) != 1) {
    snprintf(errbuf, errlen, "RAND_bytes failed");
    return CTRAIN_E_AUTH;
  }
  ring_hs_hello_encode(cfg, server_rank, chal + 8, nc, hello);
  t = ctrain_mono_s();
  double hd = t + RING_HS_TIMEOUT_S < deadline ? t + RING_HS_TIMEOUT_S : deadline;
  result = io_full(fd, hello, sizeof(hello), hd, 1);
  if (!result)
    result = io_xfer(fd, ans, sizeof(ans), hd, 0, &got);
  if (got >= 4 && !memcmp(ans, "CTRB", 4)) {
    snprintf(errbuf, errlen, "rank %d (%s) shed our handshake (busy with other connections)",
             server_rank, addr);
    return CTRAIN_E_TIMEOUT;
  }
  if (result == CTRAIN_E_PEER && got == 0) {
    /* The server says nothing to a client it refuses, so this is all we
     * learn; its log has the reason. */
    snprintf(errbuf, errlen,
             "rank %d (%s) refused our handshake: closed after our hello (HMAC mismatch: "
             "wrong CTRAIN_JOB_TOKEN, job name or attempt, or a rank it does not expect)",
             server_rank, addr);
    return CTRAIN_E_AUTH;
  }
  if (result) {
    snprintf(errbuf, errlen, "handshake with rank %d (%s): %s", server_rank, addr,
             result == CTRAIN_E_PEER ? "connection closed" : ctrain_strerror(result));
    return result;
  }
  if (ring_hs_proof_check(cfg, server_rank, chal + 8, hello, ans, sizeof(ans))) {
    snprintf(errbuf, errlen,
             "rank %d (%s) failed authentication: HMAC mismatch (wrong CTRAIN_JOB_TOKEN)",
             server_rank, addr);
    return CTRAIN_E_AUTH;
  }
  return CTRAIN_OK;
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
      double left = deadline - ctrain_mono_s();
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
  char host[TFCONFIG_HOST_MAX + 1], port[TFCONFIG_PORT_MAX + 1];
  struct addrinfo hints = {.ai_family = AF_UNSPEC,
                           .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_PASSIVE},
                  *res = NULL;
  int fd = -1, one = 1, rc;
  if (tfconfig_split_hostport(cfg->addrs[cfg->rank], host, sizeof(host), port, sizeof(port), errbuf,
                              errlen))
    return -1;
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
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, HS_BACKLOG)) {
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
  put32(p->txhdr, RING_FRAME_MAGIC);
  put32(p->txhdr + 4, type);
  put64(p->txhdr + 8, len);
  p->txbuf = buf;
  p->txlen = len;
  p->txoff = 0;
  p->tx_active = 1;
  p->tx_data = type == RING_FRAME_DATA;
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
    uint32_t type;
    uint64_t len;
    char bad[96];
    if (ring_frame_header_parse(p->rxhdr, HDR_LEN, &type, &len, bad, sizeof(bad)))
      return lost(c, p, bad);
    if (type == RING_FRAME_HEARTBEAT)
      continue;
    if (type == RING_FRAME_BYE) {
      p->closed = 1;
      return CTRAIN_OK;
    }
    if (type == RING_FRAME_ABORT) {
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
    p->rx_pending = 1; /* RING_FRAME_DATA, the only type left */
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
    double now = ctrain_mono_s();
    int busy = 0, np = 0;
    for (int i = 0; i < r->world; i++) {
      peer *p = &r->peers[i];
      if (i == r->rank)
        continue;
      if (!p->tx_active && p->send_queued && !p->sent_frame) {
        start_frame(p, RING_FRAME_DATA, p->send_buf, p->send_len);
      } else if (!p->tx_active && now - p->last_tx >= r->hb_interval && !p->closed) {
        start_frame(p, RING_FRAME_HEARTBEAT, NULL, 0);
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
    now = ctrain_mono_s();
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

/* N-1 ring steps: in step s rank r passes slot (r-s) on to r+1 and takes
 * slot (r-s-1) from r-1, so every slot travels the ring once. */
static ctrain_err ring_allgather_bytes(coll_t *c, const void *in, size_t bytes, void *out) {
  ring_t *r = c->impl;
  ctrain_err result = CTRAIN_OK;
  int W = r->world, next = (r->rank + 1) % W, prev = (r->rank + W - 1) % W;
  uint8_t *o = out;
  if (bytes)
    memmove(o + (size_t)r->rank * bytes, in, bytes);
  if (W == 1)
    return r->failed;
  pthread_mutex_lock(&r->mu);
  for (int s = 0; s < W - 1; s++) {
    int sc = ((r->rank - s) % W + W) % W, rc = ((r->rank - s - 1) % W + W) % W;
    result = exchange(c, next, o + (size_t)sc * bytes, bytes, prev, o + (size_t)rc * bytes, bytes);
    if (result)
      break;
  }
  pthread_mutex_unlock(&r->mu);
  return result;
}

/* An all-gather of one 4-byte word per rank (the frames it has always sent). */
static ctrain_err ring_barrier(coll_t *c) {
  ring_t *r = c->impl;
  float one = 1.0f, *all = calloc((size_t)r->world, sizeof(float));
  ctrain_err result;
  if (!all)
    return CTRAIN_E_NOMEM;
  result = ring_allgather_bytes(c, &one, sizeof(one), all);
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
        put32(bye, RING_FRAME_MAGIC);
        put32(bye + 4, RING_FRAME_BYE);
        put64(bye + 8, 0);
        io_full(p->fd, bye, sizeof(bye), ctrain_mono_s() + 1.0, 1);
      } else if (r->failed && !p->tx_active) {
        /* Failed: tell the others why (best effort, short deadline), so they
         * blame the peer we lost and not our own exit. */
        uint8_t msg[HDR_LEN + ABORT_MAX];
        size_t n = strnlen(c->err, ABORT_MAX);
        put32(msg, RING_FRAME_MAGIC);
        put32(msg + 4, RING_FRAME_ABORT);
        put64(msg + 8, n);
        memcpy(msg + HDR_LEN, c->err, n);
        io_full(p->fd, msg, HDR_LEN + n, ctrain_mono_s() + 0.2, 1);
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
    .allgather_bytes = ring_allgather_bytes,
    .destroy = ring_destroy,
};

/* ---------------------------------------------------------------------------
 * Rendezvous
 * ------------------------------------------------------------------------- */

static void sleep_100ms(void) {
  struct timespec ts = {0, 100 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

/* Connects to every lower rank. A rank that does not answer yet (not
 * listening, DNS lagging pod start, busy shedding other connections, silent)
 * is tried again with a new connection until the deadline; a refusal is
 * final. */
static ctrain_err connect_lower(const ring_config *cfg, ring_t *r, double start, double deadline,
                                char *errbuf, size_t errlen) {
  for (int j = 0; j < cfg->rank; j++) {
    char host[TFCONFIG_HOST_MAX + 1], port[TFCONFIG_PORT_MAX + 1], last[320] = "";
    int tries = 0;
    ctrain_err parsed = tfconfig_split_hostport(cfg->addrs[j], host, sizeof(host), port,
                                                sizeof(port), errbuf, errlen);
    if (parsed)
      return parsed;
    for (;;) {
      double t = ctrain_mono_s();
      if (t >= deadline) {
        snprintf(errbuf, errlen, "rendezvous: rank %d (%s) %s after %.1f s and %d attempts%s%s", j,
                 cfg->addrs[j], last[0] ? "not joined" : "not reachable", t - start, tries,
                 last[0] ? "; last: " : "", last);
        return CTRAIN_E_TIMEOUT;
      }
      tries++;
      double cd = t + 2.0 < deadline ? t + 2.0 : deadline;
      int fd = try_connect(host, port, cd);
      if (fd < 0) {
        if (tries == 1 || tries % 20 == 0)
          LOG_INFO("rendezvous: waiting for rank %d (%s)", j, cfg->addrs[j]);
        sleep_100ms();
        continue;
      }
      tune_socket(fd);
      ctrain_err result = hs_client(cfg, fd, j, deadline, last, sizeof(last));
      if (!result) {
        r->peers[j].fd = fd;
        LOG_DEBUG("rendezvous: connected to rank %d (%s)", j, cfg->addrs[j]);
        break;
      }
      close(fd);
      if (result == CTRAIN_E_AUTH) {
        snprintf(errbuf, errlen, "%s", last);
        return result;
      }
      LOG_DEBUG("rendezvous: %s; trying again", last);
      sleep_100ms();
    }
  }
  return CTRAIN_OK;
}

/* An accepted connection that has not authenticated yet. */
typedef struct {
  int fd;       /* -1: a free slot */
  double since; /* accepted at: its deadline, and the order in which to shed */
  size_t got;   /* bytes of the hello so far */
  uint8_t hello[RING_HS_HELLO_LEN];
  uint8_t nonce[NONCE_LEN]; /* our challenge */
  char who[192];            /* "host:port" of the remote end, for the log */
} hs_pending;

typedef struct {
  unsigned refused, timed_out, shed, gone;
} hs_stats;

/* Closes a pending connection that proved nothing wrong (out of time, or
 * shed for a newcomer) with "CTRB", so that a real peer retries. What it
 * sent is drained first (never past the hello) so the close is a FIN, not a
 * reset that could swallow the marker. */
static void hs_shed(hs_pending *h) {
  uint8_t sink[RING_HS_HELLO_LEN];
  (void)recv(h->fd, sink, RING_HS_HELLO_LEN - h->got, MSG_DONTWAIT);
  (void)send(h->fd, "CTRB", 4, MSG_NOSIGNAL | MSG_DONTWAIT);
  close(h->fd);
  h->fd = -1;
}

static void hs_drop(hs_pending *h) {
  close(h->fd);
  h->fd = -1;
}

/* A free slot, else the oldest pending connection's. */
static hs_pending *hs_slot(hs_pending *pend) {
  hs_pending *oldest = &pend[0];
  for (int i = 0; i < RING_HS_PENDING_MAX; i++) {
    if (pend[i].fd < 0)
      return &pend[i];
    if (pend[i].since < oldest->since)
      oldest = &pend[i];
  }
  return oldest;
}

/* Whether a newcomer may be admitted now: a free slot, or an oldest
 * pending connection that has had HS_SHED_MIN_AGE_S. If not, *when says
 * when it may. */
static int hs_can_admit(hs_pending *pend, double now, double *when) {
  hs_pending *h = hs_slot(pend);
  *when = h->fd < 0 ? now : h->since + HS_SHED_MIN_AGE_S;
  return *when <= now;
}

/* Accepts up to HS_ACCEPT_BATCH new connections and sends each a fresh
 * challenge. When every slot is taken the oldest pending connection is shed
 * for the newcomer: the real peer answers its challenge within a round trip,
 * so only the slow and the idle are ever the oldest. */
static void hs_admit(int lfd, hs_pending *pend, hs_stats *st) {
  double when;
  for (int b = 0; b < HS_ACCEPT_BATCH && hs_can_admit(pend, ctrain_mono_s(), &when); b++) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE) && hs_slot(pend)->fd >= 0) {
      /* Out of descriptors: make room so the backlog keeps draining. */
      hs_shed(hs_slot(pend));
      st->shed++;
      continue;
    }
    if (fd < 0)
      return; /* EAGAIN: drained; anything else: next round */
    hs_pending *h = hs_slot(pend);
    if (h->fd >= 0) {
      LOG_DEBUG("rendezvous: shedding %s (%zu of %d hello bytes in %.1f s) for a newer connection",
                h->who, h->got, RING_HS_HELLO_LEN, ctrain_mono_s() - h->since);
      hs_shed(h);
      st->shed++;
    }
    char host[128] = "?", serv[32] = "?";
    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
                NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(h->who, sizeof(h->who), "%s:%s", host, serv);
    h->fd = fd;
    h->since = ctrain_mono_s();
    h->got = 0;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint8_t chal[RING_HS_CHALLENGE_LEN];
    memcpy(chal, "CTRN", 4);
    put32(chal + 4, RING_HS_VERSION);
    if (RAND_bytes(h->nonce, NONCE_LEN) != 1) {
      LOG_WARN("rendezvous: RAND_bytes failed; dropping %s", h->who);
      hs_drop(h);
      continue;
    }
    memcpy(chal + 8, h->nonce, NONCE_LEN);
    /* A fresh socket's send buffer takes 24 bytes whole. */
    if (send(fd, chal, sizeof(chal), MSG_NOSIGNAL) != (ssize_t)sizeof(chal)) {
      hs_drop(h);
      st->gone++;
    }
  }
}

/* Reads what pending connection h has sent, never past the hello, and once
 * the hello is whole checks it; a client that fails is closed with nothing
 * said. Returns the rank it proved (the proof is sent; the caller takes the
 * socket), 0 while the hello is incomplete, -1 when h was closed. */
static int hs_serve(const ring_config *cfg, const ring_t *r, hs_pending *h, hs_stats *st) {
  char why[256];
  ring_hs_hello hi;
  ssize_t n = recv(h->fd, h->hello + h->got, RING_HS_HELLO_LEN - h->got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return 0;
  if (n <= 0) {
    LOG_DEBUG("rendezvous: %s went away after %zu of %d hello bytes", h->who, h->got,
              RING_HS_HELLO_LEN);
    hs_drop(h);
    st->gone++;
    return -1;
  }
  h->got += (size_t)n;
  if (h->got < RING_HS_HELLO_LEN)
    return 0;
  ctrain_err result = ring_hs_hello_check(cfg, h->nonce, h->hello, h->got, &hi, why, sizeof(why));
  if (!result && r->peers[hi.rank].fd >= 0) {
    snprintf(why, sizeof(why), "claims rank %u, which is already connected", hi.rank);
    result = CTRAIN_E_AUTH;
  }
  if (result) {
    if (st->refused++ < HS_LOG_MAX)
      LOG_WARN("rendezvous: refused connection from %s (%s)", h->who, why);
    else
      LOG_DEBUG("rendezvous: refused connection from %s (%s)", h->who, why);
    hs_drop(h);
    return -1;
  }
  uint8_t proof[RING_HS_PROOF_LEN];
  memcpy(proof, "CTRS", 4);
  hs_mac(cfg, HS_LABEL_S, (uint32_t)cfg->rank, h->nonce, h->hello, proof + 4);
  if (send(h->fd, proof, sizeof(proof), MSG_NOSIGNAL) != (ssize_t)sizeof(proof)) {
    LOG_WARN("rendezvous: rank %u (%s) went away during its handshake", hi.rank, h->who);
    hs_drop(h);
    st->gone++;
    return -1;
  }
  return (int)hi.rank;
}

/* Accepts every higher rank. All pending connections are handshaken at once
 * (one poll over them, non-blocking); see ring.h for the limits that keep
 * connections without the token from holding the real peers up. */
static ctrain_err accept_higher(const ring_config *cfg, ring_t *r, int lfd, double deadline,
                                char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  hs_pending *pend = NULL;
  struct pollfd pfd[RING_HS_PENDING_MAX + 1];
  int idx[RING_HS_PENDING_MAX + 1];
  hs_stats st = {0, 0, 0, 0};
  int have = 0, need = cfg->world - 1 - cfg->rank;
  pend = calloc(RING_HS_PENDING_MAX, sizeof(*pend));
  if (!pend) {
    result = CTRAIN_E_NOMEM;
    goto out;
  }
  for (int i = 0; i < RING_HS_PENDING_MAX; i++)
    pend[i].fd = -1;
  while (have < need) {
    double now = ctrain_mono_s(), wake = deadline;
    if (now >= deadline) {
      int missing = -1;
      for (int j = cfg->rank + 1; j < cfg->world && missing < 0; j++)
        if (r->peers[j].fd < 0)
          missing = j;
      snprintf(errbuf, errlen, "rendezvous: rank %d (%s) did not connect within %.1f s", missing,
               cfg->addrs[missing], cfg->rendezvous_timeout);
      result = CTRAIN_E_TIMEOUT;
      goto out;
    }
    int np = 1; /* pfd[0]: the listener, below */
    for (int i = 0; i < RING_HS_PENDING_MAX; i++) {
      hs_pending *h = &pend[i];
      if (h->fd < 0)
        continue;
      if (now - h->since >= RING_HS_TIMEOUT_S) {
        LOG_DEBUG("rendezvous: %s sent %zu of %d hello bytes in %.1f s; closing", h->who, h->got,
                  RING_HS_HELLO_LEN, RING_HS_TIMEOUT_S);
        hs_shed(h);
        st.timed_out++;
        continue;
      }
      if (h->since + RING_HS_TIMEOUT_S < wake)
        wake = h->since + RING_HS_TIMEOUT_S;
      pfd[np].fd = h->fd;
      pfd[np].events = POLLIN;
      idx[np++] = i;
    }
    /* The listener is polled only while a newcomer may be admitted. */
    double admit_at;
    int admit = hs_can_admit(pend, now, &admit_at);
    pfd[0].fd = admit ? lfd : -1;
    pfd[0].events = POLLIN;
    idx[0] = -1;
    if (!admit && admit_at < wake)
      wake = admit_at;
    int pr = poll(pfd, (nfds_t)np, (int)((wake - now) * 1000) + 1);
    if (pr < 0 && errno != EINTR) {
      snprintf(errbuf, errlen, "rendezvous: poll: %s", strerror(errno));
      result = CTRAIN_E_NET;
      goto out;
    }
    /* Hellos first, then newcomers: a newcomer may shed the oldest pending. */
    for (int k = 1; pr > 0 && k < np; k++) {
      if (!pfd[k].revents)
        continue;
      hs_pending *h = &pend[idx[k]];
      int crank = hs_serve(cfg, r, h, &st);
      if (crank > 0) {
        r->peers[crank].fd = h->fd;
        h->fd = -1;
        tune_socket(r->peers[crank].fd);
        have++;
        LOG_DEBUG("rendezvous: accepted rank %d (%s) from %s", crank, cfg->addrs[crank], h->who);
      }
    }
    if (pr > 0 && pfd[0].revents)
      hs_admit(lfd, pend, &st);
  }
out:
  for (int i = 0; pend && i < RING_HS_PENDING_MAX; i++)
    if (pend[i].fd >= 0)
      hs_drop(&pend[i]);
  free(pend);
  if (st.timed_out || st.shed || st.refused > HS_LOG_MAX)
    LOG_WARN("rendezvous: closed connections that did not authenticate: %u refused, %u without a "
             "hello within %.1f s, %u shed for newer ones (more than %d pending)",
             st.refused, st.timed_out, RING_HS_TIMEOUT_S, st.shed, RING_HS_PENDING_MAX);
  return result;
}

ctrain_err ring_create(const ring_config *cfg, coll_t **out, char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  coll_t *c = NULL;
  ring_t *r = NULL;
  int lfd = -1;
  double start = ctrain_mono_s(), deadline = start + cfg->rendezvous_timeout;
  *out = NULL;
  if (cfg->world < 1 || cfg->rank < 0 || cfg->rank >= cfg->world || !hs_cfg_ok(cfg)) {
    snprintf(errbuf, errlen, "ring: bad config (rank %d of %d, job and token required)", cfg->rank,
             cfg->world);
    return CTRAIN_E_INVAL;
  }
  /* Every address parses (port in range) before anything is opened: a bad
   * one is a config error (78), never a failed listen (75). */
  for (int j = 0; j < cfg->world; j++) {
    char h[TFCONFIG_HOST_MAX + 1], p[TFCONFIG_PORT_MAX + 1], why[384];
    if (tfconfig_split_hostport(cfg->addrs[j], h, sizeof(h), p, sizeof(p), why, sizeof(why))) {
      snprintf(errbuf, errlen, "ring: rank %d%s: %s", j, j == cfg->rank ? " (own address)" : "",
               why);
      return CTRAIN_E_CONFIG;
    }
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
  result = connect_lower(cfg, r, start, deadline, errbuf, errlen);
  if (!result && lfd >= 0)
    result = accept_higher(cfg, r, lfd, deadline, errbuf, errlen);
  if (result)
    goto out;
done : {
  double t = ctrain_mono_s();
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
  LOG_INFO("rendezvous: rank %d of %d connected in %.2f s", cfg->rank, cfg->world,
           ctrain_mono_s() - start);
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
