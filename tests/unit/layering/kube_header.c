/* tests/unit/layering/kube_header.c - compiled, never linked, by the
 * layering_* tests (tests/unit/CMakeLists.txt) with exactly the include
 * directories of a library that must not see kube (ctrain_worker,
 * ctrain_common): "ctrain/kube_client.h" must not be found. With
 * -DCTRAIN_LAYERING_CONTROL the same file includes a common header instead,
 * which must compile (so the failure is the missing directory, not the
 * command line). */
#ifdef CTRAIN_LAYERING_CONTROL
#include "ctrain/util.h"
#else
#include "ctrain/kube_client.h"
#endif

int layering_probe(void);
int layering_probe(void) {
  return 0;
}
