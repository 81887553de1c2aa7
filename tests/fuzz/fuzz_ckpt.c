/* fuzz_ckpt.c - ckpt_parse (the backup reader) on arbitrary bytes: never
 * crashes or over-reads, and an image it accepts is self-consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ckpt_state s;
  char err[256] = "";
  if (ckpt_parse(data, size, &s, err, sizeof(err)) == CTRAIN_OK) {
    if (ckpt_file_size(&s) != size || s.world < 1 || !s.per_rank || !s.params ||
        (s.optim_slots && !s.optim_state) || !s.owned)
      abort();
    /* Touch every array end so ASan catches a short allocation. */
    volatile float f = s.n_params ? s.params[s.n_params - 1] : 0;
    volatile uint64_t r = s.per_rank[s.world * CKPT_RANK_WORDS - 1];
    (void)f;
    (void)r;
    ckpt_state_free(&s);
  } else if (!err[0] || s.params || s.per_rank) {
    abort();
  }
  return 0;
}
