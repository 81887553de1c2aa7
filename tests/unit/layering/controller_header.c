/* tests/unit/layering/controller_header.c - compiled, never linked, by
 * layering_worker_no_controller (tests/unit/CMakeLists.txt) with exactly the
 * worker's include directories: "controller/podbuild.h" must not be found;
 * the control is a worker header (tests/unit/layering/probe.h). */
#define CTRAIN_LAYERING_HEADER         "controller/podbuild.h"
#define CTRAIN_LAYERING_CONTROL_HEADER "worker/options.h"
#include "probe.h"
