/* ring_handshake.c - the ring's rendezvous: every rank listens, connects to
 * the lower ranks and accepts the higher ones, each connection
 * authenticated by the v2 HMAC handshake (format and limits in ring.h). */
#include "ctrain/clock.h"
#include "worker/collective/ring_internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ctrain/log.h"

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

/* ---------------------------------------------------------------------------
 * Handshake messages (format in ring.h)
 * ------------------------------------------------------------------------- */

int ring_hs_cfg_ok(const ring_config *cfg) {
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
  ctrain_put_be32(msg + off, (uint32_t)jl);
  off += 4;
  memcpy(msg + off, cfg->job, jl);
  off += jl;
  ctrain_put_be32(msg + off, server_rank);
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
  if (!ring_hs_cfg_ok(cfg) || server_rank < 0)
    return CTRAIN_E_INVAL;
  memcpy(out, "CTRH", 4);
  ctrain_put_be32(out + 4, RING_HS_VERSION);
  ctrain_put_be32(out + 8, cfg->attempt);
  ctrain_put_be32(out + 12, (uint32_t)cfg->rank);
  ctrain_put_be32(out + 16, (uint32_t)cfg->world);
  memcpy(out + 20, nonce_c, NONCE_LEN);
  hs_mac(cfg, HS_LABEL_C, (uint32_t)server_rank, nonce_s, out, out + HS_SIGNED);
  return CTRAIN_OK;
}

ctrain_err ring_hs_hello_check(const ring_config *cfg, const uint8_t nonce_s[RING_HS_NONCE_LEN],
                               const uint8_t *buf, size_t len, ring_hs_hello *out, char *why,
                               size_t whylen) {
  uint8_t mac[MAC_LEN];
  memset(out, 0, sizeof(*out));
  if (!ring_hs_cfg_ok(cfg)) {
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
  if (ctrain_get_be32(buf + 4) != RING_HS_VERSION) {
    snprintf(why, whylen, "handshake version %u, expected %u", ctrain_get_be32(buf + 4),
             RING_HS_VERSION);
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
  out->version = ctrain_get_be32(buf + 4);
  out->attempt = ctrain_get_be32(buf + 8);
  out->rank = ctrain_get_be32(buf + 12);
  out->world = ctrain_get_be32(buf + 16);
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
  if (!ring_hs_cfg_ok(cfg) || server_rank < 0)
    return CTRAIN_E_INVAL;
  if (len != RING_HS_PROOF_LEN || memcmp(buf, "CTRS", 4))
    return CTRAIN_E_AUTH;
  hs_mac(cfg, HS_LABEL_S, (uint32_t)server_rank, nonce_s, hello, mac);
  return CRYPTO_memcmp(mac, buf + 4, MAC_LEN) ? CTRAIN_E_AUTH : CTRAIN_OK;
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
  ctrain_err result = ring_io_full(fd, chal, sizeof(chal), cd, 0);
  if (result) {
    snprintf(errbuf, errlen, "rank %d (%s) sent no handshake challenge: %s", server_rank, addr,
             result == CTRAIN_E_PEER ? "connection closed" : ctrain_strerror(result));
    return result;
  }
  if (memcmp(chal, "CTRN", 4) || ctrain_get_be32(chal + 4) != RING_HS_VERSION) {
    snprintf(errbuf, errlen, "rank %d (%s) is not a ctrain rank speaking handshake version %u",
             server_rank, addr, RING_HS_VERSION);
    return CTRAIN_E_AUTH;
  }
  if (RAND_bytes(nc, NONCE_LEN) != 1) {
    snprintf(errbuf, errlen, "RAND_bytes failed");
    return CTRAIN_E_AUTH;
  }
  result = ring_hs_hello_encode(cfg, server_rank, chal + 8, nc, hello);
  if (result) {
    snprintf(errbuf, errlen, "handshake hello to rank %d (%s): the ring config is invalid",
             server_rank, addr);
    return result;
  }
  t = ctrain_mono_s();
  double hd = t + RING_HS_TIMEOUT_S < deadline ? t + RING_HS_TIMEOUT_S : deadline;
  result = ring_io_full(fd, hello, sizeof(hello), hd, 1);
  if (!result)
    result = ring_io_xfer(fd, ans, sizeof(ans), hd, 0, &got);
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

static int try_connect(const char *host, const char *port, double deadline) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int fd = -1;
  if (getaddrinfo(host, port, &hints, &res))
    return -1;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
      continue;
    ring_set_nonblock(fd);
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
    ring_set_nonblock(fd);
  return fd;
}

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
      ring_tune_socket(fd);
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
    ctrain_put_be32(chal + 4, RING_HS_VERSION);
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
        ring_tune_socket(r->peers[crank].fd);
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

ctrain_err ring_rendezvous(const ring_config *cfg, ring_t *r, double start, double deadline,
                           char *errbuf, size_t errlen) {
  ctrain_err result = CTRAIN_OK;
  int lfd = -1;
  if (cfg->rank < cfg->world - 1) {
    lfd = make_listener(cfg, errbuf, errlen);
    if (lfd < 0)
      return CTRAIN_E_NET;
  }
  result = connect_lower(cfg, r, start, deadline, errbuf, errlen);
  if (!result && lfd >= 0)
    result = accept_higher(cfg, r, lfd, deadline, errbuf, errlen);
  if (lfd >= 0)
    close(lfd);
  return result;
}
