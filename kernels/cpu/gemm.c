/* gemm.c - the CPU's matrix products: OpenBLAS's cblas_sgemm, threaded by OpenMP instead of by
 * OpenBLAS itself.
 *
 * The CPU backend's loops run on OpenMP's threads. Left to thread its own products, OpenBLAS's
 * pthread build (Debian's default) starts a second pool on the same cores, and each pool spins
 * while the other works: `shardtrain train --model tiny` on 2 cores took 3.5-4.6 s for 100
 * steps, 1.8-1.9 s with OpenBLAS on one thread (docs/ENVIRONMENT.md). So that build is set to one
 * thread (again before each product outside a parallel region, in case a program embedding the
 * library set it otherwise since; the OpenMP build needs nothing: inside OpenMP's regions it runs
 * one thread by itself, and setting its count would set OpenMP's). A product large enough to
 * share is cut into blocks of rows (or of columns, when it has more of those) of C, one block per
 * OpenMP thread, each a single-threaded sgemm; on one thread, or inside a parallel region (one
 * attention head per thread), it runs whole. The cut depends on the shape and the thread count
 * only, so a product has the same bits from run to run; another thread count may change the last
 * bits of some (OpenBLAS computes an element alike in blocks of most shapes, not of all: a tied
 * head of 312 x 13 over 210 differed on 4 threads), as the CPU's other reductions may
 * (docs/CLI.md). Fixed blocks, the same on any thread count, cost a 1-thread d6 step 27% (231
 * against 317 tokens/s): each block packs the other operand again. */
#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/cpu_ops.h"

/* Products of fewer multiply-adds than this run on one thread: a thread's share would cost less
 * than waking the others. */
#define SHARED_PRODUCT_MIN_FMAS (1 << 18)
/* A block is a multiple of this many rows or columns, which OpenBLAS's kernels take whole. */
#define BLOCK_ALIGN 16

void kernel_cpu_blas_single_thread(void) {
  /* openblas_get_parallel: 1 for the pthread build, whose own pool is the one to idle. */
  if (!omp_in_parallel() && openblas_get_parallel() == 1 && openblas_get_num_threads() != 1) {
    openblas_set_num_threads(1);
  }
}

/* How many blocks a product of m x n outputs over k is cut into: one per thread, at most one
 * per BLOCK_ALIGN of the side cut, 1 for a small product or inside a parallel region. */
static int block_count(int m, int n, int k) {
  if (omp_in_parallel() || (double)m * n * k < SHARED_PRODUCT_MIN_FMAS) return 1;
  const int side = m >= n ? m : n;
  const int most = (side + BLOCK_ALIGN - 1) / BLOCK_ALIGN;
  const int threads = omp_get_max_threads();
  return threads < most ? threads : most;
}

void kernel_cpu_sgemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k,
                      float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                      float *c, int ldc) {
  kernel_cpu_blas_single_thread();
  const int blocks = block_count(m, n, k);
  if (blocks == 1) {
    cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const int by_rows = m >= n, side = by_rows ? m : n;
  /* Blocks of whole BLOCK_ALIGN units, the first ones a unit larger when they do not divide. */
  const int units = (side + BLOCK_ALIGN - 1) / BLOCK_ALIGN;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < blocks; i++) {
    const int first = units / blocks * i + (i < units % blocks ? i : units % blocks);
    const int count = units / blocks + (i < units % blocks);
    const int start = first * BLOCK_ALIGN;
    const int end = (first + count) * BLOCK_ALIGN < side ? (first + count) * BLOCK_ALIGN : side;
    if (by_rows) {
      /* rows [start, end) of C come from rows of op(A): A's rows, or its columns if transposed */
      const float *a_block = a + (trans_a == CblasNoTrans ? (int64_t)start * lda : start);
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, end - start, n, k, alpha, a_block, lda, b, ldb,
                  beta, c + (int64_t)start * ldc, ldc);
    } else {
      /* columns [start, end) of C come from columns of op(B): B's columns, or its rows */
      const float *b_block = b + (trans_b == CblasNoTrans ? start : (int64_t)start * ldb);
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, end - start, k, alpha, a, lda, b_block, ldb,
                  beta, c + start, ldc);
    }
  }
}
