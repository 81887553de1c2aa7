/* tests/unit/test_gpu.h - the GPU tests' device: kernels on GPU 0, or the
 * test ends as skipped (TEST_SKIP: ctest reports it as skipped, not passed)
 * when the machine has none. Include after test.h. */
#ifndef CTRAIN_TEST_GPU_H
#define CTRAIN_TEST_GPU_H

#include "worker/devinfo.h"
#include "worker/model/kernels.h"

static kern_t *gpu_or_skip(void) {
  devinfo di;
  kern_t *k = NULL;
  char err[512] = "";
  ASSERT_OK(devinfo_probe(&di));
  if (di.gpu_count == 0) {
    TEST_SKIP("no GPU: %s", di.why_none);
  }
  if (kern_cuda_create(0, &k, err, sizeof(err)))
    TEST_FAIL_("kern_cuda_create(0) on %s: %s", di.gpu_names[0], err);
  printf("# on GPU 0: %s\n", di.gpu_names[0]);
  return k;
}

#endif
