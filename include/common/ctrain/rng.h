/* ctrain/rng.h - a small seeded PRNG (xoshiro256**, seeded via splitmix64)
 * for weight init, shuffling and dropout. Same seed, same stream, on every
 * platform; its whole state is four words so a backup can store it. */
#ifndef CTRAIN_RNG_H
#define CTRAIN_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t s[4];
} rng_t;

/* Seeds from (seed, stream): distinct streams of one seed are independent. */
void rng_seed(rng_t *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(rng_t *r);
/* Uniform in [0, 1). */
float rng_uniform(rng_t *r);
/* out[0..n) = n calls of rng_uniform, in order (one call, the generator
 * inlined: a dropout mask a step). */
void rng_uniform_fill(rng_t *r, float *out, size_t n);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t rng_below(rng_t *r, uint64_t n);

#endif
