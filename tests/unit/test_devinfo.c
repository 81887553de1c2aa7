/* test_devinfo.c - device discovery reports what the build and machine have. */
#include "test.h"

#include "ctrain/devinfo.h"

TEST(probe_is_consistent) {
  devinfo d;
  ASSERT_OK(devinfo_probe(&d));
  ASSERT_GE(d.gpu_count, 0);
  ASSERT_LE(d.gpu_count, DEVINFO_MAX_GPUS);
#ifdef CTRAIN_HAVE_CUDA
  ASSERT_EQ(d.built_with_cuda, 1);
  ASSERT_GT(d.cuda_runtime_version, 0);
  ASSERT_GT(d.nccl_version, 0);
#else
  ASSERT_EQ(d.built_with_cuda, 0);
  ASSERT_EQ(d.gpu_count, 0);
#endif
  if (d.gpu_count == 0) {
    ASSERT(strlen(d.why_none) > 0);
    printf("# no GPU: %s\n", d.why_none);
  } else {
    for (int i = 0; i < d.gpu_count; i++)
      printf("# GPU %d: %s\n", i, d.gpu_names[i]);
  }
}

TEST_MAIN(T(probe_is_consistent))
