/* devinfo.c - accelerator discovery; the CUDA half is in devinfo_cuda.c. */
#include "worker/devinfo.h"

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

ctrain_err devinfo_choose(wk_device device, int replicas, wk_collective collective,
                          const devinfo *d, devinfo_choice *out, char *errbuf, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (device == WK_DEVICE_GPU) {
    if (d->gpu_count == 0) {
      snprintf(errbuf, errlen, "--device gpu: no usable GPU: %s", d->why_none);
      return CTRAIN_E_INVAL;
    }
    if (replicas > d->gpu_count) {
      snprintf(errbuf, errlen, "--device gpu:%d: only %d GPU(s) visible (%s ...)", replicas,
               d->gpu_count, d->gpu_names[0]);
      return CTRAIN_E_INVAL;
    }
    out->gpu = 1;
    out->replicas = replicas ? replicas : d->gpu_count;
    snprintf(out->why, sizeof(out->why), "device gpu x %d: %s", out->replicas, d->gpu_names[0]);
  } else if (device == WK_DEVICE_AUTO) {
    out->gpu = d->gpu_count > 0;
    out->replicas = out->gpu ? d->gpu_count : 1;
    if (out->gpu)
      snprintf(out->why, sizeof(out->why), "device auto -> gpu x %d: %s", out->replicas,
               d->gpu_names[0]);
    else
      snprintf(out->why, sizeof(out->why), "device auto -> cpu: %.200s", d->why_none);
  } else {
    out->replicas = replicas ? replicas : 1;
    snprintf(out->why, sizeof(out->why), "device cpu x %d", out->replicas);
  }
  if (collective == WK_COLL_NCCL) {
    if (!out->gpu) {
      snprintf(errbuf, errlen, "--collective nccl: needs the GPU path, and %s",
               device == WK_DEVICE_CPU ? "--device is cpu" : out->why);
      return CTRAIN_E_INVAL;
    }
    out->nccl = 1;
  } else if (collective == WK_COLL_AUTO) {
    out->nccl = out->gpu;
  }
  size_t len = strlen(out->why);
  snprintf(out->why + len, sizeof(out->why) - len, "; collective %s", out->nccl ? "nccl" : "ring");
  return CTRAIN_OK;
}
