/* straggler.c - straggler detection over polls; see controller/straggler.h. */
#include "controller/straggler.h"

#include <math.h>

void ctl_straggler_init(ctl_straggler *s) {
  *s = (ctl_straggler){.rank = -1};
}

int ctl_straggler_observe(ctl_straggler *s, int rank, double ratio, double threshold, int64_t now) {
  int was = s->flagged;
  if (rank < 0 || !isfinite(ratio) || ratio < threshold) {
    ctl_straggler_init(s);
    return was != s->flagged;
  }
  if (rank != s->rank) {
    /* Another worker is the slowest now: the last one caught up, this one
     * has to stay slow for its own CTL_STRAGGLER_POLLS polls. */
    *s = (ctl_straggler){.rank = rank, .since = now};
  }
  s->polls++;
  s->ratio = ratio;
  s->flagged = s->polls >= CTL_STRAGGLER_POLLS;
  return was != s->flagged;
}
