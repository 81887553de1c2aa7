/* rng.c - xoshiro256** (Blackman & Vigna), seeded with splitmix64. */
#include "ctrain/rng.h"

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void rng_seed(rng_t *r, uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ull);
  for (int i = 0; i < 4; i++)
    r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

static inline uint64_t next(rng_t *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t rng_next(rng_t *r) {
  return next(r);
}

float rng_uniform(rng_t *r) {
  return (float)(next(r) >> 40) * (1.0f / 16777216.0f);
}

void rng_uniform_fill(rng_t *r, float *out, size_t n) {
  for (size_t i = 0; i < n; i++)
    out[i] = (float)(next(r) >> 40) * (1.0f / 16777216.0f);
}

uint64_t rng_below(rng_t *r, uint64_t n) {
  uint64_t lim = -n % n; /* 2^64 mod n */
  for (;;) {
    uint64_t x = next(r);
    if (x >= lim)
      return x % n;
  }
}
