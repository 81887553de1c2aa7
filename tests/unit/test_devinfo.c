/* test_devinfo.c - device discovery reports what the build and machine have. */
#include "test.h"

#include "worker/devinfo.h"

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

static devinfo fake(int gpus) {
  devinfo d;
  memset(&d, 0, sizeof(d));
  d.gpu_count = gpus;
  if (gpus)
    snprintf(d.gpu_names[0], sizeof(d.gpu_names[0]), "NVIDIA H200 (sm_90)");
  else
    snprintf(d.why_none, sizeof(d.why_none), "no CUDA device visible");
  return d;
}

TEST(choose_resolves_auto_and_refuses_impossible) {
  devinfo none = fake(0), one = fake(1), two = fake(2);
  devinfo_choice ch;
  char err[512] = "";
  /* auto: cpu:1 + ring without a GPU, every GPU + nccl with them. */
  ASSERT_OK(devinfo_choose(WK_DEVICE_AUTO, 0, WK_COLL_AUTO, &none, &ch, err, sizeof(err)));
  ASSERT_EQ(ch.gpu, 0);
  ASSERT_EQ(ch.replicas, 1);
  ASSERT_EQ(ch.nccl, 0);
  ASSERT_STR_CONTAINS(ch.why, "no CUDA device visible");
  ASSERT_OK(devinfo_choose(WK_DEVICE_AUTO, 0, WK_COLL_AUTO, &one, &ch, err, sizeof(err)));
  ASSERT_EQ(ch.gpu, 1);
  ASSERT_EQ(ch.replicas, 1);
  ASSERT_EQ(ch.nccl, 1);
  ASSERT_OK(devinfo_choose(WK_DEVICE_AUTO, 0, WK_COLL_RING, &two, &ch, err, sizeof(err)));
  ASSERT_EQ(ch.gpu, 1);
  ASSERT_EQ(ch.replicas, 2);
  ASSERT_EQ(ch.nccl, 0);
  /* gpu: all visible; gpu:R at most that many. */
  ASSERT_OK(devinfo_choose(WK_DEVICE_GPU, 0, WK_COLL_AUTO, &two, &ch, err, sizeof(err)));
  ASSERT_EQ(ch.replicas, 2);
  ASSERT_OK(devinfo_choose(WK_DEVICE_GPU, 1, WK_COLL_AUTO, &two, &ch, err, sizeof(err)));
  ASSERT_EQ(ch.replicas, 1);
  ASSERT_EQ(devinfo_choose(WK_DEVICE_GPU, 3, WK_COLL_AUTO, &two, &ch, err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--device gpu:3: only 2 GPU(s) visible");
  /* --device gpu without a GPU: exit 64 with devinfo's reason. */
  ASSERT_EQ(devinfo_choose(WK_DEVICE_GPU, 0, WK_COLL_AUTO, &none, &ch, err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--device gpu: no usable GPU: no CUDA device visible");
  ASSERT_EQ(ctrain_exit_for_err(CTRAIN_E_INVAL), 64);
  /* cpu:R: R logical replicas whatever the GPUs. */
  ASSERT_OK(devinfo_choose(WK_DEVICE_CPU, 3, WK_COLL_AUTO, &one, &ch, err, sizeof(err)));
  ASSERT_EQ(ch.gpu, 0);
  ASSERT_EQ(ch.replicas, 3);
  ASSERT_EQ(ch.nccl, 0);
  /* --collective nccl needs the GPU. */
  ASSERT_EQ(devinfo_choose(WK_DEVICE_CPU, 0, WK_COLL_NCCL, &one, &ch, err, sizeof(err)),
            CTRAIN_E_INVAL);
  ASSERT_STR_CONTAINS(err, "--collective nccl");
  ASSERT_OK(devinfo_choose(WK_DEVICE_GPU, 0, WK_COLL_NCCL, &one, &ch, err, sizeof(err)));
  ASSERT_EQ(ch.nccl, 1);
  ASSERT_OK(devinfo_choose(WK_DEVICE_CPU, 0, WK_COLL_AUTO, &one, &ch, err, sizeof(err)));
  ASSERT_EQ(ch.gpu, 0);
  ASSERT_EQ(ch.replicas, 1);
  ASSERT_EQ(ch.nccl, 0);
}

TEST_MAIN(T(probe_is_consistent), T(choose_resolves_auto_and_refuses_impossible))
