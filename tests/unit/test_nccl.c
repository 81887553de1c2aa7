/* test_nccl.c - the NCCL coll backend: a 1-rank communicator bootstrapped
 * over the local coll, every operation on device and host buffers. Skipped
 * (TEST_SKIP, "# SKIP no GPU: <reason>") where no GPU is visible; without the CUDA
 * build, checks that NCCL is reported as not built. */
#include "test.h"

#include "worker/collective/coll.h"
#include "worker/collective/coll_nccl.h"
#include "worker/devinfo.h"
#include "worker/model/kernels.h"

TEST(nccl_unavailable_is_reported) {
  devinfo di;
  ASSERT_OK(devinfo_probe(&di));
  if (di.gpu_count > 0) {
    printf("# %d GPU(s), NCCL %d: the 1-rank test runs\n", di.gpu_count, di.nccl_version);
    return;
  }
  coll_t *boot = NULL, *c = NULL;
  char err[512] = "";
  ASSERT_OK(coll_local_create(&boot));
  coll_nccl_config cfg = {.bootstrap = boot, .device = 0, .peer_timeout = 5};
  ctrain_err rc = coll_nccl_create(&cfg, &c, err, sizeof(err)); /* takes boot */
  ASSERT_NE(rc, CTRAIN_OK);
  ASSERT_NULL(c);
  ASSERT(strlen(err) > 0);
  printf("# coll_nccl_create without a GPU: %s: %s\n", ctrain_strerror(rc), err);
}

TEST(nccl_one_rank) {
  devinfo di;
  ASSERT_OK(devinfo_probe(&di));
  if (di.gpu_count == 0) {
    TEST_SKIP("no GPU: %s", di.why_none);
  }
  coll_t *boot = NULL, *c = NULL;
  kern_t *k = NULL;
  char err[512] = "";
  ASSERT_OK(coll_local_create(&boot));
  coll_nccl_config cfg = {.bootstrap = boot, .device = 0, .peer_timeout = 20};
  if (coll_nccl_create(&cfg, &c, err, sizeof(err)))
    TEST_FAIL_("coll_nccl_create: %s", err);
  ASSERT_STR_EQ(c->ops->name, "nccl");
  ASSERT_EQ(c->world, 1);
  ASSERT_EQ(c->rank, 0);
  /* Host buffers (staged). */
  float h[5] = {1, 2, 3, 4.5f, -1}, g[5];
  ASSERT_OK(coll_allreduce_sum(c, h, 5));
  ASSERT(h[3] == 4.5f && h[4] == -1);
  uint64_t word = 0x1122334455667788ull;
  ASSERT_OK(coll_broadcast(c, &word, sizeof(word), 0));
  ASSERT_EQ(word, 0x1122334455667788ull);
  ASSERT_OK(coll_allgather_bytes(c, h, sizeof(h), g));
  ASSERT_OK(memcmp(g, h, sizeof(h)));
  /* Bytes, host buffers, an odd size: exact, nothing written past the end. */
  uint8_t bin[7] = {1, 0xff, 3, 0x80, 5, 0, 7}, bout[7 + 9];
  memset(bout, 0xEE, sizeof(bout));
  ASSERT_OK(coll_allgather_bytes(c, bin, 7, bout));
  ASSERT_OK(memcmp(bout, bin, 7));
  ASSERT_EQ(bout[7], 0xEE);
  ASSERT_OK(coll_allgather_bytes(c, bout, 7, bout)); /* in place */
  ASSERT_OK(memcmp(bout, bin, 7));
  ASSERT_OK(coll_barrier(c));
  /* Device buffer (the gradients' case): all-reduced in place. */
  if (kern_cuda_create(0, &k, err, sizeof(err)))
    TEST_FAIL_("kern_cuda_create: %s", err);
  enum { N = 1 << 20 };
  float *host = malloc(N * sizeof(float)), *dev = NULL;
  ASSERT_NOT_NULL(host);
  for (int i = 0; i < N; i++)
    host[i] = (float)(i % 1000) * 0.5f;
  ASSERT_OK(k->ops->alloc(k, (void **)&dev, N * sizeof(float)));
  ASSERT_OK(k->ops->h2d(k, dev, host, N * sizeof(float)));
  ASSERT_OK(k->ops->sync(k));
  ASSERT_OK(coll_allreduce_sum(c, dev, N));
  memset(host, 0, N * sizeof(float));
  ASSERT_OK(k->ops->d2h(k, host, dev, N * sizeof(float)));
  for (int i = 0; i < N; i += 4099)
    ASSERT(host[i] == (float)(i % 1000) * 0.5f);
  /* Byte all-gather into device memory: from a host input, then in place. */
  uint8_t *dbytes = NULL, back[16];
  ASSERT_OK(k->ops->alloc(k, (void **)&dbytes, 16));
  ASSERT_OK(coll_allgather_bytes(c, bin, 7, dbytes));
  memset(back, 0, sizeof(back));
  ASSERT_OK(k->ops->d2h(k, back, dbytes, 7));
  ASSERT_OK(memcmp(back, bin, 7));
  ASSERT_OK(coll_allgather_bytes(c, dbytes, 7, dbytes));
  memset(back, 0, sizeof(back));
  ASSERT_OK(k->ops->d2h(k, back, dbytes, 7));
  ASSERT_OK(memcmp(back, bin, 7));
  k->ops->free(k, dbytes);
  printf("# NCCL %d: 1-rank all-reduce of %d floats on %s\n", di.nccl_version, N, di.gpu_names[0]);
  k->ops->free(k, dev);
  free(host);
  kern_free(k);
  coll_free(c);
}

TEST(nccl_multi_gpu_note) {
  devinfo di;
  ASSERT_OK(devinfo_probe(&di));
  if (di.gpu_count < 2) {
    printf("# note: multi-GPU per worker: %d GPU(s) visible (one communicator per local device is "
           "designed in coll_nccl.h, not built)\n",
           di.gpu_count);
    return;
  }
  printf("# %d GPUs visible: the multi-GPU-per-worker path is not built yet\n", di.gpu_count);
}

TEST_MAIN(T(nccl_unavailable_is_reported), T(nccl_one_rank), T(nccl_multi_gpu_note))
