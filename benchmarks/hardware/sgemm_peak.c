/* sgemm_peak.c - the FLOP/s one process gets from OpenBLAS's cblas_sgemm on this machine: the
 * compute peak of a `--hardware` file for the CPU. Times square products of growing size (and
 * any M N K given on the command line) and prints, per shape, the best of several repetitions;
 * the last line is the largest rate seen, as `peak_flops = <FLOP/s>`.
 * Run it with OMP_NUM_THREADS=1 (and OPENBLAS_NUM_THREADS=1): one rank computes on one core,
 * as the CPU tests and benchmarks run. Usage: sgemm_peak [M N K]... */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* This thread's CPU time: on a machine shared with other jobs it leaves out the time they take
 * the core away, and equals the wall time on an idle machine (one thread: OMP_NUM_THREADS=1). */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best FLOP/s of C[M,N] = A[M,K] @ B[K,N] over repetitions lasting about `seconds` in all. */
static double time_sgemm(int m, int n, int k, double seconds) {
  float *a = malloc((size_t)m * k * sizeof *a), *b = malloc((size_t)k * n * sizeof *b),
        *c = malloc((size_t)m * n * sizeof *c);
  if (!a || !b || !c) {
    fprintf(stderr, "sgemm_peak: out of memory for %d x %d x %d\n", m, n, k);
    exit(1);
  }
  for (size_t i = 0; i < (size_t)m * k; i++) a[i] = (float)(i % 7) * 0.1f;
  for (size_t i = 0; i < (size_t)k * n; i++) b[i] = (float)(i % 5) * 0.1f;
  double best = 0, start = now_s();
  do {
    double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
    double rate = 2.0 * m * n * (double)k / (now_s() - t0);
    if (rate > best) best = rate;
  } while (now_s() - start < seconds);
  free(a);
  free(b);
  free(c);
  return best;
}

int main(int argc, char **argv) {
  double peak = 0;
  printf("%6s %6s %6s %12s\n", "M", "N", "K", "GFLOP/s");
  if (argc > 1 && (argc - 1) % 3 == 0) {
    for (int i = 1; i + 2 < argc; i += 3) {
      int m = atoi(argv[i]), n = atoi(argv[i + 1]), k = atoi(argv[i + 2]);
      double r = time_sgemm(m, n, k, 1.0);
      printf("%6d %6d %6d %12.2f\n", m, n, k, r / 1e9);
      if (r > peak) peak = r;
    }
  } else {
    const int sizes[] = {256, 512, 1024, 2048};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      double r = time_sgemm(sizes[i], sizes[i], sizes[i], 1.5);
      printf("%6d %6d %6d %12.2f\n", sizes[i], sizes[i], sizes[i], r / 1e9);
      if (r > peak) peak = r;
    }
  }
  printf("peak_flops = %.4g\n", peak);
  return 0;
}
