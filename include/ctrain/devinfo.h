/* ctrain/devinfo.h - which accelerators this process can use.
 *
 * `--device auto` and `--collective auto` resolve through this. A build
 * without the CUDA path, or a machine without a GPU or driver, reports zero
 * devices and says why; that is not an error. */
#ifndef CTRAIN_DEVINFO_H
#define CTRAIN_DEVINFO_H

#include "ctrain/err.h"

#define DEVINFO_MAX_GPUS 16

typedef struct {
  int built_with_cuda; /* 1 when compiled with CTRAIN_HAVE_CUDA */
  int gpu_count;       /* visible CUDA devices, 0..DEVINFO_MAX_GPUS */
  char gpu_names[DEVINFO_MAX_GPUS][96];
  int cuda_runtime_version; /* e.g. 13050; 0 if unknown */
  int cuda_driver_version;  /* 0 when no driver is loaded */
  int cublas_version;
  int nccl_version;   /* e.g. 23203 */
  char why_none[256]; /* when gpu_count == 0: why */
} devinfo;

/* Fills `out`. Never fails for lack of a GPU; returns CTRAIN_OK. */
ctrain_err devinfo_probe(devinfo *out);

#ifdef CTRAIN_HAVE_CUDA
/* The CUDA half, in devinfo_cuda.c. */
void devinfo_probe_cuda(devinfo *out);
#endif

#endif
