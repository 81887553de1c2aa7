/* tests/unit/ring_world.h - the scaffolding the ring's unit tests share
 * (the library ctrain_test_ring, ring_world.c): free loopback addresses for a
 * world of ranks and one forked process per rank. Used by test_ring.c and
 * test_ring_algo.c. */
#ifndef CTRAIN_TEST_RING_WORLD_H
#define CTRAIN_TEST_RING_WORLD_H

#define RING_WORLD_MAX 8 /* the most ranks a test runs */

/* "127.0.0.1:<port>" of each rank, set by pick_ports. */
extern const char *addrs[RING_WORLD_MAX];

/* Picks `n` free loopback ports into addrs, below the ephemeral range
 * (ip_local_port_range starts at 32768 by default): a port bind(0) hands
 * out is an ephemeral one, and a rank's outgoing connection could take it
 * before the rank that should listen on it does. Random from [20000,
 * 32000), kept only if it binds now and was not picked already. */
void pick_ports(int n);

typedef void (*rank_fn)(int rank, int world, void *arg);

/* Forks one process per rank running fn(rank, world, arg); returns how many
 * exited 0 (the others are named on stderr). */
int run_world(int world, rank_fn fn, void *arg);

/* A world of 3 in which rank 2 gets lost: forks fn(rank, 3, &sig) per rank
 * (rank 2 is expected to stop itself with `sig`), asserts ranks 0 and 1 exit
 * 0 (they named the lost peer), then kills rank 2. */
void run_loss_world(rank_fn fn, int sig);

#endif
