/* gpu_ceilings.c - the two rates a GPU step is measured against (docs/PERFORMANCE.md): a large
 * bf16 cuBLASLt GEMM's TFLOP/s (fp32 accumulation, as the engine's matmuls) and a device-to-device
 * copy's GB/s, counting bytes read plus bytes written. Each is warmed up, then timed with CUDA
 * events around every repetition; the median is printed. The GEMM runs on random inputs (zeros
 * run faster than real data) and is checked against float64 dot products on sampled entries;
 * the copy's destination is poisoned first and checked after.
 *
 * Prints one line per result, key=value, for benchmarks/gpu_bench.sh to parse:
 *   device name="NVIDIA H100 80GB HBM3" sm=90 sms=132 mem_gib=79.1
 *   gemm_bf16 m=8192 n=8192 k=8192 repeats=20 median_ms=1.378 tflops=797.9 rel_err=2.1e-03
 *   copy_d2d bytes=1073741824 repeats=20 median_ms=0.716 gbps=2999.1
 * With --gemm-once it runs the GEMM exactly once (no warm-up, no copy) and prints its FLOPs, so
 * a profiler's counters for that one kernel can be compared with a known count.
 * Without a usable GPU (or in a CPU-only build) it prints one `SKIP` line and exits 0.
 * Usage: ceilings [--gemm N] [--copy-mib M] [--repeats R] [--gemm-once] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"

#define MAX_REPEATS 256

#ifdef ST_HAVE_CUDA
#include <cublasLt.h>
#include <math.h>

#include "core/check_cuda.h"
#include "core/dtype.h"
#include "core/error.h"

#define LT_WORKSPACE_BYTES ((size_t)32 << 20)
#define CHECK_SAMPLES 64

typedef struct options {
  int gemm_n;   /* m = n = k */
  int copy_mib; /* bytes copied: this many MiB */
  int repeats;
  int gemm_once;
} options;

/* The timed regions: a start and a stop event per repetition (NULL until created). */
typedef struct timing {
  cudaEvent_t start[MAX_REPEATS], stop[MAX_REPEATS];
  int count;
} timing;

static int compare_float(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static st_status timing_create(timing *t, int count) {
  memset(t, 0, sizeof *t);
  for (; t->count < count; t->count++) {
    CUDA_CHECK(cudaEventCreate(&t->start[t->count]));
    CUDA_CHECK(cudaEventCreate(&t->stop[t->count]));
  }
  return ST_OK;
}

static void timing_destroy(timing *t) {
  for (int i = 0; i < MAX_REPEATS; i++) {
    if (t->start[i]) cudaEventDestroy(t->start[i]);
    if (t->stop[i]) cudaEventDestroy(t->stop[i]);
  }
}

/* The median of the repetitions' times, in ms (after the stream has finished them). */
static st_status timing_median_ms(const timing *t, float *out) {
  float ms[MAX_REPEATS];
  for (int i = 0; i < t->count; i++) {
    CUDA_CHECK(cudaEventSynchronize(t->stop[i]));
    CUDA_CHECK(cudaEventElapsedTime(&ms[i], t->start[i], t->stop[i]));
  }
  qsort(ms, (size_t)t->count, sizeof ms[0], compare_float);
  *out = t->count % 2 ? ms[t->count / 2] : 0.5f * (ms[t->count / 2 - 1] + ms[t->count / 2]);
  return ST_OK;
}

/* Uniform in [-1, 1) from a 64-bit LCG, as bf16. */
static void fill_random_bf16(uint16_t *x, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = bf16_from_f32((float)((double)(s >> 11) / 4503599627370496.0 - 1.0));
  }
}

/* cuBLASLt's D = op(A) B in bf16 with fp32 accumulation, A stored k x m (transposed, so both
 * operands are read along k), B k x n and D m x n, column-major: the heuristic's first choice. */
typedef struct gemm {
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a, b, d;
  cublasLtMatmulHeuristicResult_t algo;
  void *workspace;
} gemm;

static st_status gemm_create(gemm *g, int n) {
  memset(g, 0, sizeof *g);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtCreate(&g->lt));
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->a, CUDA_R_16BF, (uint64_t)n, (uint64_t)n, n));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->b, CUDA_R_16BF, (uint64_t)n, (uint64_t)n, n));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->d, CUDA_R_16BF, (uint64_t)n, (uint64_t)n, n));
  CUDA_CHECK(cudaMalloc(&g->workspace, LT_WORKSPACE_BYTES));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = LT_WORKSPACE_BYTES;
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS) {
    status = cublasLtMatmulAlgoGetHeuristic(g->lt, g->desc, g->a, g->b, g->d, g->d, pref, 1,
                                            &g->algo, &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  CUBLAS_CHECK(status);
  if (found < 1) return st_error(ST_ERR_CUDA, "cuBLASLt has no bf16 algorithm for %d^3", n);
  return ST_OK;
}

static void gemm_destroy(gemm *g) {
  if (g->workspace) cudaFree(g->workspace);
  if (g->d) cublasLtMatrixLayoutDestroy(g->d);
  if (g->b) cublasLtMatrixLayoutDestroy(g->b);
  if (g->a) cublasLtMatrixLayoutDestroy(g->a);
  if (g->desc) cublasLtMatmulDescDestroy(g->desc);
  if (g->lt) cublasLtDestroy(g->lt);
}

static st_status gemm_run(const gemm *g, const void *a, const void *b, void *d) {
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(g->lt, g->desc, &alpha, a, g->a, b, g->b, &beta, d, g->d, d, g->d,
                              &g->algo.algo, g->workspace, LT_WORKSPACE_BYTES, 0));
  CUDA_CHECK(cudaGetLastError());
  return ST_OK;
}

/* ||D - ref|| / ||ref|| over sampled entries, ref the float64 dot products of the bf16 inputs. */
static st_status gemm_check(const uint16_t *a, const uint16_t *b, const uint16_t *dev_d, int n,
                            double *rel_err) {
  double err2 = 0, ref2 = 0;
  uint64_t s = 12345;
  for (int t = 0; t < CHECK_SAMPLES; t++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const size_t i = (size_t)(s >> 33) % (size_t)n, j = (size_t)(s >> 13) % (size_t)n;
    double ref = 0;
    for (size_t p = 0; p < (size_t)n; p++) {
      ref += (double)f32_from_bf16(a[p + i * n]) * (double)f32_from_bf16(b[p + j * n]);
    }
    uint16_t got;
    CUDA_CHECK(cudaMemcpy(&got, dev_d + i + j * n, sizeof got, cudaMemcpyDeviceToHost));
    const double diff = (double)f32_from_bf16(got) - ref;
    err2 += diff * diff;
    ref2 += ref * ref;
  }
  *rel_err = sqrt(err2 / ref2);
  return ST_OK;
}

/* The GEMM's buffers: random inputs on the host (kept for the check) and on the device. Owned
 * here, freed by gemm_bench_free whatever state setup stopped in. */
typedef struct gemm_bench {
  int n;
  uint16_t *a, *b;
  uint16_t *da, *db, *dd;
  gemm g;
  timing t;
} gemm_bench;

static st_status gemm_bench_setup(gemm_bench *x, int n) {
  const size_t bytes = (size_t)n * n * 2;
  x->n = n;
  x->a = malloc(bytes);
  x->b = malloc(bytes);
  if (!x->a || !x->b) return st_error(ST_ERR_OOM, "no host memory for two %d^2 matrices", n);
  fill_random_bf16(x->a, (size_t)n * n, 1);
  fill_random_bf16(x->b, (size_t)n * n, 2);
  CUDA_CHECK(cudaMalloc((void **)&x->da, bytes));
  CUDA_CHECK(cudaMalloc((void **)&x->db, bytes));
  CUDA_CHECK(cudaMalloc((void **)&x->dd, bytes));
  CUDA_CHECK(cudaMemcpy(x->da, x->a, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(x->db, x->b, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(x->dd, 0xff, bytes)); /* poison: NaN until the GEMM writes it */
  return gemm_create(&x->g, n);
}

static void gemm_bench_free(gemm_bench *x) {
  timing_destroy(&x->t);
  gemm_destroy(&x->g);
  cudaFree(x->dd);
  cudaFree(x->db);
  cudaFree(x->da);
  free(x->b);
  free(x->a);
}

static st_status gemm_measure(gemm_bench *x, const options *o) {
  const int n = x->n;
  const double flops = 2.0 * n * (double)n * n;
  if (o->gemm_once) {
    ST_CHECK(gemm_run(&x->g, x->da, x->db, x->dd));
    CUDA_CHECK(cudaDeviceSynchronize());
    printf("gemm_once m=%d n=%d k=%d flops=%.0f\n", n, n, n, flops);
    return ST_OK;
  }
  for (int w = 0; w < 3; w++) ST_CHECK(gemm_run(&x->g, x->da, x->db, x->dd));
  ST_CHECK(timing_create(&x->t, o->repeats));
  for (int r = 0; r < o->repeats; r++) {
    CUDA_CHECK(cudaEventRecord(x->t.start[r], 0));
    ST_CHECK(gemm_run(&x->g, x->da, x->db, x->dd));
    CUDA_CHECK(cudaEventRecord(x->t.stop[r], 0));
  }
  float ms;
  double rel_err;
  ST_CHECK(timing_median_ms(&x->t, &ms));
  ST_CHECK(gemm_check(x->a, x->b, x->dd, n, &rel_err));
  printf("gemm_bf16 m=%d n=%d k=%d repeats=%d median_ms=%.4f tflops=%.1f rel_err=%.1e\n", n, n, n,
         o->repeats, (double)ms, flops / (ms * 1e-3) / 1e12, rel_err);
  if (!(rel_err < 1e-2)) {
    return st_error(ST_ERR_CUDA, "the GEMM's result is wrong: relative error %.3g >= 1e-2",
                    rel_err);
  }
  return ST_OK;
}

static st_status measure_gemm(const options *o) {
  gemm_bench x;
  memset(&x, 0, sizeof x);
  st_status status = gemm_bench_setup(&x, o->gemm_n);
  if (status == ST_OK) status = gemm_measure(&x, o);
  gemm_bench_free(&x);
  return status;
}

/* The copy's buffers, owned here and freed by copy_bench_free. */
typedef struct copy_bench {
  size_t bytes;
  unsigned char *src, *dst;
  timing t;
} copy_bench;

static st_status copy_measure(copy_bench *x, const options *o) {
  x->bytes = (size_t)o->copy_mib << 20;
  CUDA_CHECK(cudaMalloc((void **)&x->src, x->bytes));
  CUDA_CHECK(cudaMalloc((void **)&x->dst, x->bytes));
  CUDA_CHECK(cudaMemset(x->src, 0x5a, x->bytes));
  CUDA_CHECK(cudaMemset(x->dst, 0, x->bytes)); /* poison: the check below needs 0x5a */
  for (int w = 0; w < 3; w++) {
    CUDA_CHECK(cudaMemcpyAsync(x->dst, x->src, x->bytes, cudaMemcpyDeviceToDevice, 0));
  }
  ST_CHECK(timing_create(&x->t, o->repeats));
  for (int r = 0; r < o->repeats; r++) {
    CUDA_CHECK(cudaEventRecord(x->t.start[r], 0));
    CUDA_CHECK(cudaMemcpyAsync(x->dst, x->src, x->bytes, cudaMemcpyDeviceToDevice, 0));
    CUDA_CHECK(cudaEventRecord(x->t.stop[r], 0));
  }
  float ms;
  ST_CHECK(timing_median_ms(&x->t, &ms));
  unsigned char first, last;
  CUDA_CHECK(cudaMemcpy(&first, x->dst, 1, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&last, x->dst + x->bytes - 1, 1, cudaMemcpyDeviceToHost));
  if (first != 0x5a || last != 0x5a) {
    return st_error(ST_ERR_CUDA, "the copy did not reach both ends of its destination");
  }
  printf("copy_d2d bytes=%zu repeats=%d median_ms=%.4f gbps=%.1f\n", x->bytes, o->repeats,
         (double)ms, 2.0 * (double)x->bytes / (ms * 1e-3) / 1e9);
  return ST_OK;
}

static st_status measure_copy(const options *o) {
  copy_bench x;
  memset(&x, 0, sizeof x);
  const st_status status = copy_measure(&x, o);
  timing_destroy(&x.t);
  cudaFree(x.dst);
  cudaFree(x.src);
  return status;
}

static st_status print_device(void) {
  struct cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  printf("device name=\"%s\" sm=%d%d sms=%d mem_gib=%.1f\n", p.name, p.major, p.minor,
         p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30));
  return ST_OK;
}
#endif

/* A positive integer flag value no larger than `max`, or exit 2 naming the flag. */
static int positive(const char *flag, const char *value, int max) {
  char *end = NULL;
  long v = value ? strtol(value, &end, 10) : 0;
  if (!value || *end || v < 1 || v > max) {
    fprintf(stderr, "ceilings: %s needs an integer in [1, %d], got '%s'\n", flag, max,
            value ? value : "");
    exit(2);
  }
  return (int)v;
}

int main(int argc, char **argv) {
  int gemm_n = 8192, copy_mib = 1024, repeats = 20, gemm_once = 0;
  for (int i = 1; i < argc; i++) {
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--gemm") == 0) {
      gemm_n = positive("--gemm", value, 32768);
      i++;
    } else if (strcmp(argv[i], "--copy-mib") == 0) {
      copy_mib = positive("--copy-mib", value, 65536);
      i++;
    } else if (strcmp(argv[i], "--repeats") == 0) {
      repeats = positive("--repeats", value, MAX_REPEATS);
      i++;
    } else if (strcmp(argv[i], "--gemm-once") == 0) {
      gemm_once = 1;
    } else {
      fprintf(stderr,
              "ceilings: unknown argument '%s' (usage: ceilings [--gemm N] [--copy-mib M] "
              "[--repeats R] [--gemm-once])\n",
              argv[i]);
      return 2;
    }
  }
#ifdef ST_HAVE_CUDA
  if (device_cuda_count() == 0) {
    printf("SKIP ceilings: no usable GPU\n");
    return 0;
  }
  const options o = {gemm_n, copy_mib, repeats, gemm_once};
  st_status status = print_device();
  if (status == ST_OK) status = measure_gemm(&o);
  if (status == ST_OK && !gemm_once) status = measure_copy(&o);
  if (status != ST_OK) {
    fprintf(stderr, "ceilings: %s\n", st_last_error());
    return 1;
  }
  return 0;
#else
  (void)gemm_n, (void)copy_mib, (void)repeats, (void)gemm_once;
  printf("SKIP ceilings: built without CUDA\n");
  return 0;
#endif
}
