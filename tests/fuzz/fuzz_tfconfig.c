/* fuzz_tfconfig.c - tfconfig_parse on arbitrary bytes: never crashes, and a
 * config it accepts has ranks within the world and addresses for all. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ctrain/tfconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = strndup((const char *)data, size); /* the parser reads a C string */
  if (!s)
    return 0;
  tfconfig tc;
  char err[256];
  if (tfconfig_parse(&tc, s, err, sizeof(err)) == CTRAIN_OK) {
    if (tc.world < 1 || tc.rank >= tc.world || tc.rank < -1)
      abort();
    for (int i = 0; !tc.local && i < tc.world; i++)
      if (!tc.addrs[i])
        abort();
  } else if (!err[0] || tc.addrs) {
    abort();
  }
  tfconfig_free(&tc);
  free(s);
  return 0;
}
