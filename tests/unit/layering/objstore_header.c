/* tests/unit/layering/objstore_header.c - compiled, never linked, by the
 * layering_*_objstore tests (tests/unit/CMakeLists.txt) with exactly the
 * include directories of a library: "ctrain/s3.h" (objstore's) must not be
 * found by one that does not link ctrain_objstore (ctrain_controller,
 * ctrain_kube, ctrain_common) and must be by the worker, which does; the
 * control is a common header (tests/unit/layering/probe.h). */
#define CTRAIN_LAYERING_HEADER         "ctrain/s3.h"
#define CTRAIN_LAYERING_CONTROL_HEADER "ctrain/util.h"
#include "probe.h"
