/* ctrain/version.h - the release: CTRAIN_VERSION, "v" and the VERSION file
 * at the repository root, as CMake writes it into the generated
 * ctrain/version_gen.h. A build without CMake (tools/gpu-check.sh's
 * fallback) defines CTRAIN_VERSION itself. */
#ifndef CTRAIN_VERSION_H
#define CTRAIN_VERSION_H
#ifndef CTRAIN_VERSION
#include "ctrain/version_gen.h"
#endif
#endif
