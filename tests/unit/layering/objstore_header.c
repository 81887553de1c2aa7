/* tests/unit/layering/objstore_header.c - compiled, never linked, by the
 * layering_*_objstore tests (tests/unit/CMakeLists.txt) with exactly the
 * include directories of a library: "ctrain/s3.h" (objstore's) must not be
 * found by one that does not link ctrain_objstore (ctrain_controller,
 * ctrain_kube, ctrain_common) and must be by the worker, which does. With
 * -DCTRAIN_LAYERING_CONTROL the same file includes a common header instead,
 * which must compile (so the failure is the missing directory, not the
 * command line). */
#ifdef CTRAIN_LAYERING_CONTROL
#include "ctrain/util.h"
#else
#include "ctrain/s3.h"
#endif

int layering_probe(void);
int layering_probe(void) {
  return 0;
}
