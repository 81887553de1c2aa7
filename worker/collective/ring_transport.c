/* ring_transport.c - the ring's frames on non-blocking sockets: a progress
 * engine that sends and receives DATA frames for the current exchange,
 * heartbeats idle peers, and detects lost ones (closed, reset, silent, or
 * speaking garbage); blocking I/O with a deadline; the goodbyes. */
#include "ctrain/clock.h"
#include "worker/collective/ring_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include "ctrain/log.h"
#include "ctrain/thread.h"

#define HDR_LEN   RING_FRAME_HDR_LEN
#define ABORT_MAX RING_ABORT_MAX

void ring_set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl >= 0)
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

void ring_tune_socket(int fd) {
  int one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
  ring_set_nonblock(fd);
}

/* ---------------------------------------------------------------------------
 * Blocking-with-deadline I/O used by the client side of the handshake and by
 * the orderly goodbyes.
 * ------------------------------------------------------------------------- */

ctrain_err ring_io_xfer(int fd, void *buf, size_t len, double deadline, int writing,
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

ctrain_err ring_io_full(int fd, void *buf, size_t len, double deadline, int writing) {
  return ring_io_xfer(fd, buf, len, deadline, writing, NULL);
}

/* ---------------------------------------------------------------------------
 * Frames (format in ring.h)
 * ------------------------------------------------------------------------- */

ctrain_err ring_frame_header_parse(const uint8_t *hdr, size_t len, uint32_t *type, uint64_t *length,
                                   char *why, size_t whylen) {
  *type = 0;
  *length = 0;
  if (len != HDR_LEN) {
    snprintf(why, whylen, "protocol error: frame header of %zu bytes", len);
    return CTRAIN_E_PARSE;
  }
  uint32_t t = ctrain_get_be32(hdr + 4);
  uint64_t l = ctrain_get_be64(hdr + 8);
  if (ctrain_get_be32(hdr) != RING_FRAME_MAGIC) {
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

/* ---------------------------------------------------------------------------
 * Progress engine
 * ------------------------------------------------------------------------- */

ctrain_err ring_lost(coll_t *c, ring_peer *p, const char *what) {
  ring_t *r = c->impl;
  snprintf(c->err, sizeof(c->err), "peer rank %d (%s) lost: %s", p->rank, p->addr, what);
  r->failed = CTRAIN_E_PEER;
  return CTRAIN_E_PEER;
}

static void start_frame(ring_peer *p, uint32_t type, const void *buf, size_t len) {
  ctrain_put_be32(p->txhdr, RING_FRAME_MAGIC);
  ctrain_put_be32(p->txhdr + 4, type);
  ctrain_put_be64(p->txhdr + 8, len);
  p->txbuf = buf;
  p->txlen = len;
  p->txoff = 0;
  p->tx_active = 1;
  p->tx_data = type == RING_FRAME_DATA;
}

static ctrain_err do_send(coll_t *c, ring_peer *p, double now) {
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
      return ring_lost(c, p, what);
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
static int can_read(const ring_peer *p) {
  return !p->closed && (!p->rx_pending || (p->want && !p->got_frame));
}

static ctrain_err do_recv(coll_t *c, ring_peer *p, double now) {
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
        return CTRAIN_OK;
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
      return ring_lost(c, p, what);
    }
    if (n == 0)
      return ring_lost(c, p, "connection closed without an orderly shutdown (process died?)");
    p->last_rx = now;
    if (p->rx_pending) {
      p->dst_got += (size_t)n;
      if (p->dst_got == p->dst_len) {
        /* The wanted frame is in: what follows is read on the next pass
         * (poll says when), not now with a recv that would only say EAGAIN. */
        p->rx_pending = 0;
        p->got_frame = 1;
        return CTRAIN_OK;
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
      return ring_lost(c, p, bad);
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
      if (ring_io_full(p->fd, why, n_why, now + 1.0, 0))
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
      return ring_lost(c, p, what);
    }
  }
}

/* ---------------------------------------------------------------------------
 * The bounded adaptive spin (contract in ring_internal.h)
 * ------------------------------------------------------------------------- */

#define SPIN_MIN_S       1e-6
#define SPIN_PROBE_S     4e-6
#define SPIN_PROBE_EVERY 64
#define SPIN_YIELD_MAX_S 1e-3 /* a yield that took longer turns the spin off */

void ring_spin_init(ring_t *r) {
  r->spin_max_s = RING_SPIN_MAX_US * 1e-6;
  r->spin_s = r->spin_max_s;
  r->spin_probe = 0;
}

/* The spin budget for this exchange: 0 unless every frame is small. */
static double spin_begin(ring_t *r) {
  if (r->spin_max_s <= 0)
    return 0;
  for (int i = 0; i < r->world; i++) {
    const ring_peer *p = &r->peers[i];
    if (i != r->rank && ((p->want && p->dst_len > RING_SMALL_BYTES) ||
                         (p->send_queued && p->send_len > RING_SMALL_BYTES)))
      return 0;
  }
  if (r->spin_s <= 0) {
    if (--r->spin_probe > 0)
      return 0;
    r->spin_s = SPIN_PROBE_S < r->spin_max_s ? SPIN_PROBE_S : r->spin_max_s;
  }
  return r->spin_s;
}

/* No spin for the next SPIN_PROBE_EVERY small exchanges. */
static void spin_off(ring_t *r) {
  r->spin_s = 0;
  r->spin_probe = SPIN_PROBE_EVERY;
}

/* After a spun exchange: whether the spin ran out before it ended. */
static void spin_end(ring_t *r, int ran_out) {
  if (!ran_out)
    r->spin_s = 2 * r->spin_s < r->spin_max_s ? 2 * r->spin_s : r->spin_max_s;
  else if ((r->spin_s /= 2) < SPIN_MIN_S)
    spin_off(r);
}

/* Runs until every peer with send_queued has sent and every peer with want
 * has received its frame. once: a single non-blocking pass (heartbeat thread). */
ctrain_err ring_progress(coll_t *c, int once) {
  ring_t *r = c->impl;
  struct pollfd *pfd = r->pfd;
  int *idx = r->pidx;
  ctrain_err result = CTRAIN_OK;
  if (r->failed)
    return r->failed;
  double spin = once ? 0 : spin_begin(r), spin_until = spin > 0 ? ctrain_mono_s() + spin : 0;
  int ran_out = 0;
  for (;;) {
    double now = ctrain_mono_s();
    int busy = 0, np = 0;
    for (int i = 0; i < r->world; i++) {
      ring_peer *p = &r->peers[i];
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
        result = ring_lost(c, p, "closed its end of the collective while we still expect data");
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
      /* Silence: data waiting unread proves the peer alive. So does what
       * sits in the socket unread because this rank was busy (reducing, or
       * descheduled on a loaded node) for longer than the timeout: read it
       * before blaming the peer. */
      if (!p->closed && !p->rx_pending && now - p->last_rx > r->peer_timeout) {
        result = do_recv(c, p, now);
        if (result)
          goto out;
      }
      if (!p->closed && !p->rx_pending && now - p->last_rx > r->peer_timeout) {
        char what[128];
        snprintf(what, sizeof(what), "silent for %.1f s (peer timeout %.1f s)", now - p->last_rx,
                 r->peer_timeout);
        result = ring_lost(c, p, what);
        goto out;
      }
    }
    if (!busy && !once)
      break;
    /* Spinning: a pass that tries every socket as if poll had said it was
     * ready (a recv or send that cannot go on says EAGAIN), then yields the
     * CPU to whatever else is runnable on it: with more ranks than CPUs (or
     * CPUs busy with other work), a rank that polls without yielding delays
     * the very peer it waits for (4 KiB all-reduces, 2 to 8 ranks on 2 busy
     * cores: spins without the yield raised mean latency and CPU time, and
     * some the median; with it no median rose). Then blocking, in poll. */
    int pr;
    if (now < spin_until) {
      for (int k = 0; k < np; k++)
        pfd[k].revents = pfd[k].events;
      pr = np;
      sched_yield();
      if (ctrain_mono_s() - now > SPIN_YIELD_MAX_S) {
        /* The yield gave this rank's CPU to other work for a scheduler
         * slice: a wake-up from poll preempts such work sooner than the
         * next yield would return (2 and 4 ranks on 2 busy cores: the same
         * median latency, a lower mean; a limit of 100 us raised the 4
         * ranks' median, the peers' own turns being that long). */
        spin_off(r);
        spin_until = 0;
      }
    } else {
      ran_out |= spin_until > 0;
      pr = poll(pfd, (nfds_t)np, once ? 0 : (int)(r->hb_interval * 500) + 1);
    }
    if (pr < 0 && errno != EINTR) {
      snprintf(c->err, sizeof(c->err), "poll: %s", strerror(errno));
      result = r->failed = CTRAIN_E_NET;
      goto out;
    }
    now = ctrain_mono_s();
    for (int k = 0; pr > 0 && k < np; k++) {
      ring_peer *p = &r->peers[idx[k]];
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
  if (spin_until > 0)
    spin_end(r, ran_out);
out:
  return result;
}

void ring_post_begin(coll_t *c) {
  ring_t *r = c->impl;
  for (int i = 0; i < r->world; i++) {
    ring_peer *p = &r->peers[i];
    p->send_queued = p->sent_frame = p->want = p->got_frame = 0;
  }
}

void ring_post_send(coll_t *c, int to, const void *sbuf, size_t slen) {
  ring_peer *p = &((ring_t *)c->impl)->peers[to];
  p->send_queued = 1;
  p->send_buf = sbuf;
  p->send_len = slen;
}

ctrain_err ring_post_recv(coll_t *c, int from, void *rbuf, size_t rlen) {
  ring_peer *p = &((ring_t *)c->impl)->peers[from];
  p->want = 1;
  p->dst = rbuf;
  p->dst_len = rlen;
  p->dst_got = 0;
  if (p->rx_pending && p->rx_len != rlen)
    return ring_lost(c, p, "protocol error: frame size mismatch");
  if (p->rx_pending && rlen == 0) {
    /* An empty frame read before it was wanted is whole now: no byte of it
     * is left for poll to wake us with (the overlapped all-reduce's parts
     * send empty pieces; without this the exchange waited for the peer's
     * next frame or heartbeat). */
    p->rx_pending = 0;
    p->got_frame = 1;
  }
  return CTRAIN_OK;
}

/* One exchange: send `sbuf` to `to` (or -1) and receive into `rbuf` from
 * `from` (or -1), concurrently. */
ctrain_err ring_exchange(coll_t *c, int to, const void *sbuf, size_t slen, int from, void *rbuf,
                         size_t rlen) {
  ring_post_begin(c);
  if (to >= 0)
    ring_post_send(c, to, sbuf, slen);
  if (from >= 0) {
    ctrain_err result = ring_post_recv(c, from, rbuf, rlen);
    if (result)
      return result;
  }
  return ring_progress(c, 0);
}

void *ring_hb_main(void *arg) {
  coll_t *c = arg;
  ring_t *r = c->impl;
  for (;;) {
    struct timespec ts = {.tv_sec = (time_t)(r->hb_interval / 2),
                          .tv_nsec =
                              (long)(((r->hb_interval / 2) - (time_t)(r->hb_interval / 2)) * 1e9)};
    nanosleep(&ts, NULL);
    /* Busy: an operation's own progress loop heartbeats meanwhile. Waiting
     * for the lock instead would put this thread in a convoy with ranks
     * doing back-to-back small all-reduces: each unlock a futex wake, and
     * the operation's thread taking the lock again first, for many
     * operations (seen with strace: hundreds of futex calls per second). */
    if (pthread_mutex_trylock(&r->mu))
      continue;
    if (r->stop) {
      ctrain_mutex_unlock(&r->mu);
      break;
    }
    if (!r->failed && ring_progress(c, 1) && r->failed)
      LOG_DEBUG("collective: %s (noticed between operations)", c->err);
    ctrain_mutex_unlock(&r->mu);
  }
  return NULL;
}

void ring_say_goodbye(coll_t *c) {
  ring_t *r = c->impl;
  for (int i = 0; i < r->world; i++) {
    ring_peer *p = &r->peers[i];
    if (p->fd < 0 || p->tx_active)
      continue; /* a frame half sent: anything more would be garbage */
    if (!r->failed) {
      /* Orderly end: BYE, so the peer does not take our exit for a crash. */
      uint8_t bye[HDR_LEN];
      ctrain_put_be32(bye, RING_FRAME_MAGIC);
      ctrain_put_be32(bye + 4, RING_FRAME_BYE);
      ctrain_put_be64(bye + 8, 0);
      /* Best effort: the connection closes next; a peer already gone
       * cannot be told and needs nothing. */
      ctrain_ignore(ring_io_full(p->fd, bye, sizeof(bye), ctrain_mono_s() + 1.0, 1));
    } else {
      /* Failed: tell the others why (best effort, short deadline), so they
       * blame the peer we lost and not our own exit. */
      uint8_t msg[HDR_LEN + ABORT_MAX];
      size_t n = strnlen(c->err, ABORT_MAX);
      ctrain_put_be32(msg, RING_FRAME_MAGIC);
      ctrain_put_be32(msg + 4, RING_FRAME_ABORT);
      ctrain_put_be64(msg + 8, n);
      memcpy(msg + HDR_LEN, c->err, n);
      ctrain_ignore(ring_io_full(p->fd, msg, HDR_LEN + n, ctrain_mono_s() + 0.2, 1));
    }
  }
}
