/* tests/unit/layering/kube_header.c - compiled, never linked, by the
 * layering_* tests (tests/unit/CMakeLists.txt) with exactly the include
 * directories of a library that must not see kube (ctrain_worker,
 * ctrain_common): "ctrain/kube_client.h" must not be found; the control is a
 * common header (tests/unit/layering/probe.h). */
#define CTRAIN_LAYERING_HEADER         "ctrain/kube_client.h"
#define CTRAIN_LAYERING_CONTROL_HEADER "ctrain/util.h"
#include "probe.h"
