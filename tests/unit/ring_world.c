/* ring_world.c - the ring tests' scaffolding (ring_world.h). */
#include "ring_world.h"

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

#include "test.h"

static char addr_store[RING_WORLD_MAX][64];
const char *addrs[RING_WORLD_MAX];

void pick_ports(int n) {
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

int run_world(int world, rank_fn fn, void *arg) {
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

void run_loss_world(rank_fn fn, int sig) {
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
