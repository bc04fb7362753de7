/* mem_bandwidth.c - the memory bandwidth one process gets on this machine (STREAM's copy and
 * triad kernels over arrays far larger than the caches): the `mem_bw` of a `--hardware` file
 * for the CPU. Bytes count what the loops read and write (copy: 8 bytes per float moved,
 * triad: 12). Prints the best of several repetitions of each; the last line is the triad rate
 * as `mem_bw = <bytes/s>`. Usage: mem_bandwidth [MiB per array, default 256] */
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

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256;
  size_t n = mib * 1024 * 1024 / sizeof(float);
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  if (!a || !b || !c) {
    fprintf(stderr, "mem_bandwidth: cannot allocate 3 x %zu MiB\n", mib);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    a[i] = 1.0f;
    b[i] = 2.0f;
    c[i] = 0.5f;
  }
  double best_copy = 0, best_triad = 0;
  for (int rep = 0; rep < 8; rep++) {
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) c[i] = a[i];
    double t1 = now_s();
    for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
    double t2 = now_s();
    double copy = 8.0 * (double)n / (t1 - t0), triad = 12.0 * (double)n / (t2 - t1);
    if (copy > best_copy) best_copy = copy;
    if (triad > best_triad) best_triad = triad;
  }
  /* Reading the result keeps the compiler from dropping the loops. */
  double check = 0;
  for (size_t i = 0; i < n; i += 4096) check += a[i] + c[i];
  printf("copy  %8.2f GB/s\ntriad %8.2f GB/s   (check %g)\n", best_copy / 1e9, best_triad / 1e9,
         check);
  printf("mem_bw = %.4g\n", best_triad);
  free(a);
  free(b);
  free(c);
  return 0;
}
