/* test_ctl_heap.c - ctl_heap_trim gives the heap's free pages back: memory
 * freed below a chunk still in use (the holes a burst of pod creates or a
 * relist leaves) stays resident until it is trimmed (bench/scale.py: 58 MiB
 * free but held beside 19 MiB in use at 10 jobs x 1,024 workers). glibc
 * only; skipped under the sanitizers, whose allocators trim nothing. */
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "controller/ctl_internal.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                         \
    __has_feature(memory_sanitizer)
#define SANITIZED 1
#endif
#endif

#define CHUNK  1024
#define CHUNKS (48 * 1024) /* 48 MiB */

#if defined(__GLIBC__) && !defined(SANITIZED)
static long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof(line), f))
    if (!strncmp(line, "VmRSS:", 6))
      kib = strtol(line + 6, NULL, 10);
  if (f)
    fclose(f);
  return kib;
}
#endif

TEST(holes_below_a_live_chunk_are_given_back) {
#if !defined(__GLIBC__) || defined(SANITIZED)
  TEST_SKIP("glibc's malloc only (not under a sanitizer's allocator)");
#else
  /* As controller/main.c: one arena for this thread, small chunks on the heap. */
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  char **p = calloc(CHUNKS, sizeof(*p));
  ASSERT_NOT_NULL(p);
  /* Read back through a volatile: a compiler that sees memory freed unread
   * may drop the allocation (clang -O2 does). */
  static volatile unsigned char sink;
  for (int i = 0; i < CHUNKS; i++) {
    p[i] = malloc(CHUNK);
    ASSERT_NOT_NULL(p[i]);
    memset(p[i], 0xa5, CHUNK); /* resident */
    sink = (unsigned char)(sink + p[i][i % CHUNK]);
  }
  char *pin = malloc(64); /* above them: the heap's top cannot shrink */
  ASSERT_NOT_NULL(pin);
  long full = rss_kib();
  for (int i = 0; i < CHUNKS; i++)
    free(p[i]);
  long held = rss_kib();
  if (held < full - 16 * 1024)
    TEST_SKIP("the allocator gave the freed chunks back itself (RSS %ld -> %ld KiB)", full, held);
  ctl_heap_trim();
  long trimmed = rss_kib();
  fprintf(stderr, "RSS %ld KiB with 48 MiB freed below a live chunk, %ld KiB after the trim\n",
          held, trimmed);
  ASSERT_GT(held, 0);
  ASSERT_GE(held - trimmed, 32 * 1024); /* most of the 48 MiB */
  free(pin);
  free(p);
#endif
}

TEST_MAIN(T(holes_below_a_live_chunk_are_given_back))
