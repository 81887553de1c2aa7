/* bench/baselines/gloo_allreduce.cc - Gloo's ring-chunked all-reduce
 * (gloo::AllreduceRingChunked, float sum) over its TCP transport on
 * loopback, as a baseline for bench_allreduce. Not part of the CMake build:
 * bench/allreduce.sh installs Debian's libgloo-dev and compiles this.
 *
 *   gloo_allreduce RANK WORLD STORE_DIR [max_mib (default 64)]
 *
 * Run one process per rank with the same empty STORE_DIR (Gloo's file-store
 * rendezvous). Sizes 4 KiB .. max_mib x4, repetitions as bench_allreduce;
 * rank 0 prints per size:
 *   RESULT gloo WORLD BYTES MEAN_US MEDIAN_US BUSBW_GBPS
 * busbw as nccl-tests: bytes / mean time x 2(n-1)/n; and every rank
 *   CPU gloo WORLD BYTES CPU_US
 * its CPU time (all threads) per all-reduce. */
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

static double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double cpu_s() {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The same as bench_allreduce.c's. */
static int reps_for(size_t bytes) {
  size_t r = ((size_t)256 << 20) / (bytes ? bytes : 1);
  return r < 3 ? 3 : (r > 200 ? 200 : (int)r);
}

int main(int argc, char **argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s RANK WORLD STORE_DIR [max_mib]\n", argv[0]);
    return 2;
  }
  int rank = (int)std::strtol(argv[1], nullptr, 10);
  int world = (int)std::strtol(argv[2], nullptr, 10);
  size_t max_mib = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 64;
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(argv[3]);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
  ctx->setTimeout(std::chrono::seconds(120));
  ctx->connectFullMesh(store, dev);
  gloo::BarrierAllToAll barrier(ctx);
  for (size_t bytes = 4096; bytes <= (max_mib << 20); bytes *= 4) {
    size_t n = bytes / sizeof(float);
    std::vector<float> buf(n, 1.0f);
    std::vector<float *> ptrs{buf.data()};
    gloo::AllreduceRingChunked<float> ar(ctx, ptrs, (int)n);
    int reps = reps_for(bytes);
    std::vector<double> each((size_t)reps);
    ar.run(); /* warm-up */
    barrier.run();
    double t0 = now_s(), cpu0 = cpu_s();
    for (int i = 0; i < reps; i++) {
      double t1 = now_s();
      ar.run();
      each[(size_t)i] = now_s() - t1;
    }
    double mean = (now_s() - t0) / reps, cpu = (cpu_s() - cpu0) / reps;
    std::sort(each.begin(), each.end());
    if (rank == 0)
      std::printf("RESULT gloo %d %zu %.1f %.1f %.4f\n", world, bytes, mean * 1e6,
                  each[(size_t)reps / 2] * 1e6,
                  (double)bytes / mean * 2.0 * (world - 1) / world / 1e9);
    std::printf("CPU gloo %d %zu %.1f\n", world, bytes, cpu * 1e6);
    std::fflush(stdout);
  }
  barrier.run();
  return 0;
}
