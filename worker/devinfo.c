/* devinfo.c - accelerator discovery; the CUDA half is in devinfo_cuda.c. */
#include "ctrain/devinfo.h"

#include <stdio.h>
#include <string.h>

ctrain_err devinfo_probe(devinfo *out) {
  memset(out, 0, sizeof(*out));
#ifdef CTRAIN_HAVE_CUDA
  out->built_with_cuda = 1;
  devinfo_probe_cuda(out);
#else
  snprintf(out->why_none, sizeof(out->why_none),
           "built without the CUDA path (configure with -DCTRAIN_CUDA=ON)");
#endif
  return CTRAIN_OK;
}
