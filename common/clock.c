/* clock.c - the monotonic clock and deadlines; see ctrain/clock.h. */
#include "ctrain/clock.h"

int64_t ctrain_mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

double ctrain_mono_s(void) {
  return (double)ctrain_mono_ns() * 1e-9;
}

struct timespec ctrain_deadline_ts(int64_t ns) {
  int64_t t = ctrain_mono_ns() + (ns > 0 ? ns : 0);
  struct timespec ts = {.tv_sec = (time_t)(t / 1000000000), .tv_nsec = (long)(t % 1000000000)};
  return ts;
}
