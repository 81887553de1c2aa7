/* bench/baselines/mpi_allreduce.c - MPI_Allreduce (float, sum, in place) as
 * a baseline for bench_allreduce. Not part of the CMake build:
 * bench/allreduce.sh installs Open MPI, compiles this with mpicc and runs it
 * with `mpirun --mca btl tcp,self -np N` (TCP on loopback, no shared memory).
 *
 *   mpi_allreduce [max_mib (default 64)]
 *
 * Sizes 4 KiB .. max_mib x4, repetitions as bench_allreduce; rank 0 prints
 * per size:
 *   RESULT mpi WORLD BYTES MEAN_US MEDIAN_US BUSBW_GBPS
 * busbw as nccl-tests: bytes / mean time x 2(n-1)/n; and every rank
 *   CPU mpi WORLD BYTES CPU_US
 * its CPU time (all threads) per all-reduce. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double cpu_s(void) {
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
  int rank = 0, world = 1;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  size_t max_mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
  for (size_t bytes = 4096; bytes <= (max_mib << 20); bytes *= 4) {
    size_t n = bytes / sizeof(float);
    float *buf = malloc(bytes);
    int reps = reps_for(bytes);
    double *each = malloc((size_t)reps * sizeof(double));
    if (!buf || !each)
      MPI_Abort(MPI_COMM_WORLD, 1);
    for (size_t i = 0; i < n; i++)
      buf[i] = 1.0f;
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* warm-up */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), cpu0 = cpu_s();
    for (int i = 0; i < reps; i++) {
      double t1 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      each[i] = MPI_Wtime() - t1;
    }
    double mean = (MPI_Wtime() - t0) / reps, cpu = (cpu_s() - cpu0) / reps;
    qsort(each, (size_t)reps, sizeof(double), cmp_double);
    if (rank == 0)
      printf("RESULT mpi %d %zu %.1f %.1f %.4f\n", world, bytes, mean * 1e6, each[reps / 2] * 1e6,
             (double)bytes / mean * 2.0 * (world - 1) / world / 1e9);
    printf("CPU mpi %d %zu %.1f\n", world, bytes, cpu * 1e6);
    fflush(stdout);
    free(each);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}
