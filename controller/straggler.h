/* controller/straggler.h - which worker is a straggler, from the polls of
 * the chief's /progress (docs/design.md: a worker slower than the median by a
 * threshold for two polls; it clears when it catches up).
 *
 * Pure: each poll's slowest rank and its ratio to the median compute time
 * go in, with the caller's time; no clock, no I/O. The caller keeps one per
 * job (controller/jobstate.h) and resets it with a new attempt. */
#ifndef CTRAIN_CTL_STRAGGLER_H
#define CTRAIN_CTL_STRAGGLER_H

#include <stdint.h>

#define CTL_STRAGGLER_POLLS 2 /* consecutive polls over the threshold that make a straggler */

typedef struct {
  int rank;      /* the rank over the threshold in the latest polls; -1: none */
  int polls;     /* consecutive polls it was */
  int flagged;   /* 1: `rank` is the straggler */
  double ratio;  /* its latest ratio */
  int64_t since; /* the caller's time of the first of those polls */
} ctl_straggler;

void ctl_straggler_init(ctl_straggler *s);

/* One poll: `rank` (-1: unknown) was the slowest, `ratio` times the
 * median ms/step (NaN: unknown). A rank at or over `threshold` for
 * CTL_STRAGGLER_POLLS polls in a row is flagged; under it (or another rank
 * slowest) clears. Returns 1 when `flagged` changed. */
int ctl_straggler_observe(ctl_straggler *s, int rank, double ratio, double threshold, int64_t now);

#endif
