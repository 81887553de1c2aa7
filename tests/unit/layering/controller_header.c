/* tests/unit/layering/controller_header.c - compiled, never linked, by
 * layering_worker_no_controller (tests/unit/CMakeLists.txt) with exactly the
 * worker's include directories: "controller/podbuild.h" must not be found.
 * With -DCTRAIN_LAYERING_CONTROL it includes a worker header instead, which
 * must compile (so the failure is the missing directory, not the command
 * line). */
#ifdef CTRAIN_LAYERING_CONTROL
#include "worker/options.h"
#else
#include "controller/podbuild.h"
#endif

int layering_probe(void);
int layering_probe(void) {
  return 0;
}
