/* tests/unit/ring_world.h - the scaffolding the ring's unit tests share:
 * free loopback addresses for a world of ranks and one forked process per
 * rank. Included by test_ring.c and test_ring_algo.c after "test.h"; each
 * includer defines RING_WORLD_MAX (the most ranks it runs). */
#ifndef CTRAIN_TEST_RING_WORLD_H
#define CTRAIN_TEST_RING_WORLD_H

#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef RING_WORLD_MAX
#error "define RING_WORLD_MAX before including ring_world.h"
#endif

static char addr_store[RING_WORLD_MAX][64];
static const char *addrs[RING_WORLD_MAX]; /* "127.0.0.1:<port>" of each rank */

/* Picks `n` free loopback ports into addrs, below the ephemeral range
 * (ip_local_port_range starts at 32768 by default): a port bind(0) hands
 * out is an ephemeral one, and a rank's outgoing connection could take it
 * before the rank that should listen on it does. Random from [20000,
 * 32000), kept only if it binds now and was not picked already. */
static void pick_ports(int n) {
  static unsigned seed;
  if (!seed)
    seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  for (int i = 0; i < n; i++) {
    for (int tries = 0;; tries++) {
      ASSERT(tries < 1000);
      int port = 20000 + (int)(rand_r(&seed) % 12000u);
      int dup = 0;
      char want[64];
      snprintf(want, sizeof(want), "127.0.0.1:%d", port);
      for (int k = 0; k < i; k++)
        dup |= !strcmp(addr_store[k], want);
      int fd = socket(AF_INET, SOCK_STREAM, 0);
      ASSERT(fd >= 0);
      struct sockaddr_in sa = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)port),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      int bound = !dup && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
      close(fd);
      if (!bound)
        continue;
      snprintf(addr_store[i], sizeof(addr_store[i]), "%s", want);
      addrs[i] = addr_store[i];
      break;
    }
  }
}

typedef void (*rank_fn)(int rank, int world, void *arg);

/* Forks one process per rank running fn(rank, world, arg); returns how many
 * exited 0 (the others are named on stderr). */
static int run_world(int world, rank_fn fn, void *arg) {
  pid_t pids[RING_WORLD_MAX];
  int ok = 0;
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    ASSERT(pids[r] >= 0);
    if (pids[r] == 0) {
      fn(r, world, arg);
      fflush(NULL);
      _exit(0);
    }
  }
  for (int r = 0; r < world; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
      ok++;
    else
      fprintf(stderr, "rank %d: status 0x%x\n", r, st);
  }
  return ok;
}

/* A world of 3 in which rank 2 gets lost: forks fn(rank, 3, &sig) per rank
 * (rank 2 is expected to stop itself with `sig`), asserts ranks 0 and 1 exit
 * 0 (they named the lost peer), then kills rank 2. */
static void run_loss_world(rank_fn fn, int sig) {
  pid_t pids[3];
  pick_ports(3);
  for (int r = 0; r < 3; r++) {
    pids[r] = fork();
    ASSERT(pids[r] >= 0);
    if (pids[r] == 0) {
      fn(r, 3, &sig);
      _exit(0);
    }
  }
  for (int r = 0; r < 2; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    ASSERT(WIFEXITED(st));
    ASSERT_EQ(WEXITSTATUS(st), 0);
  }
  kill(pids[2], SIGKILL);
  waitpid(pids[2], NULL, 0);
}

#endif
