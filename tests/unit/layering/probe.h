/* tests/unit/layering/probe.h - the body of the header probes (kube_header.c,
 * objstore_header.c, controller_header.c), compiled, never linked, with
 * exactly one library's include directories (tests/unit/CMakeLists.txt,
 * tests/unit/layering/compile.cmake). A probe defines
 * CTRAIN_LAYERING_HEADER, the header that library must not see (or, for
 * layering_worker_objstore, must), and CTRAIN_LAYERING_CONTROL_HEADER, one it
 * does see: with -DCTRAIN_LAYERING_CONTROL that one is included instead and
 * must compile, so a failure is the missing directory, not the command
 * line. Found beside the probe ("" searches the includer's folder first),
 * not on the include path under test. */
#ifdef CTRAIN_LAYERING_CONTROL
#include CTRAIN_LAYERING_CONTROL_HEADER
#else
#include CTRAIN_LAYERING_HEADER
#endif

int layering_probe(void);
int layering_probe(void) {
  return 0;
}
