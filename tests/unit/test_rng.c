/* test_rng.c - the PRNG is reproducible, stream-separated and uniform. */
#include "test.h"

#include "ctrain/rng.h"

TEST(reproducible_and_streams) {
  rng_t a, b, c;
  rng_seed(&a, 42, 0);
  rng_seed(&b, 42, 0);
  rng_seed(&c, 42, 1);
  int same_c = 0;
  for (int i = 0; i < 100; i++) {
    uint64_t x = rng_next(&a);
    ASSERT_EQ(x == rng_next(&b), 1);
    same_c += x == rng_next(&c);
  }
  ASSERT_EQ(same_c, 0);
}

TEST(uniform_and_below) {
  rng_t r;
  rng_seed(&r, 1, 2);
  int hist[10] = {0};
  double sum = 0;
  for (int i = 0; i < 100000; i++) {
    float u = rng_uniform(&r);
    ASSERT(u >= 0 && u < 1);
    sum += u;
    uint64_t k = rng_below(&r, 10);
    ASSERT_LT(k, 10);
    hist[k]++;
  }
  ASSERT_NEAR(sum / 100000, 0.5, 0.01);
  for (int k = 0; k < 10; k++)
    ASSERT_NEAR(hist[k], 10000, 500);
}

/* rng_uniform_fill is n calls of rng_uniform, and leaves the generator
 * where they would. */
TEST(fill_is_the_calls) {
  rng_t a, b;
  rng_seed(&a, 7, 3);
  rng_seed(&b, 7, 3);
  float got[1000];
  rng_uniform_fill(&a, got, 1000);
  for (int i = 0; i < 1000; i++)
    ASSERT_EQ(got[i] == rng_uniform(&b), 1);
  ASSERT_EQ(rng_next(&a) == rng_next(&b), 1);
}

TEST_MAIN(T(reproducible_and_streams), T(uniform_and_below), T(fill_is_the_calls))
