// matmul.cu - linear layers through cuBLASLt: forward with the bias or bias+GELU epilogue, and
// the backward's two products: the input's gradient written (beta = 0), the weight's accumulated
// in place (beta = 1).
//
// cuBLASLt is column-major; a row-major [r, c] matrix is its column-major transpose [c, r] with
// leading dimension c, so each row-major product Y = X W becomes Y^T = W^T X^T on the same
// bytes. With N rows, C inputs and OC outputs:
//
//   weight [C, OC] (KERNEL_WEIGHT_IN_OUT)            weight [OC, C] (KERNEL_WEIGHT_OUT_IN)
//   out^T  = W(N, ld OC)  inp^T     m=OC n=N  k=C     out^T  = W(T, ld C)   inp^T  m=OC n=N k=C
//   dinp^T = W(T, ld OC)  dout^T    m=C  n=N  k=OC    dinp^T = W(N, ld C)   dout^T m=C  n=N k=OC
//   dW^T   = dout^T  inp(T)         m=OC n=C  k=N     dW^T   = inp^T dout(T)      m=C  n=OC k=N
//
// The bias gradient is not cuBLASLt's BGRADB (which overwrites instead of accumulating): it is
// colsum.cu's fixed-order column sum, which also applies the GELU derivative in place when the
// layer had the GELU epilogue (the backward receives dout ready-made, so cuBLASLt's DGELU
// epilogue, which applies to a product's result, has no product to attach to).
//
// The GELU epilogue (GELU_AUX_BIAS) serves bf16 and fp16 when the width is a multiple of 8; fp32
// and other widths run the matmul with the bias epilogue into pre_gelu and then elementwise.cu's
// GELU.
//
// fp32 computes in fp32 (CUBLAS_COMPUTE_32F, never TF32); bf16 and fp16 read and write their
// dtype (CUDA_R_16BF, CUDA_R_16F) and accumulate in fp32. A weight's gradient may be fp32 beside
// 16-bit activations (kernels.h): its product then reads 16-bit A and B and adds into an fp32
// C/D, and the bias gradient's column sum adds into fp32 (Megatron's gradient-accumulation
// fusion: the gradient is never rounded to 16 bits, across chunks and micro-batches alike).
//
// Determinism: one cached algorithm per shape, and split-K (preferably reduced in fp32,
// context.cu) only through cuBLASLt's reduction schemes, which are ordered (no atomics), so the
// same call gives the same bits.
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/context.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

// The alignment cuBLASLt is told a matrix has: the address's, capped at 16 bytes. Capping
// keeps the heuristic's choice, and so the bits, independent of where a buffer happens to sit
// (a 256-byte-aligned activation and the same values at a 64-byte offset get one algorithm);
// 16 bytes is what Hopper's tensor-memory loads need, so little speed is lost.
int64_t alignment_of(const void *p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int64_t align = 1;
  while (align < 16 && (a & (uintptr_t)align) == 0) align <<= 1;
  return align;
}

// D[m, n] (+)= op(A) op(B) with an optional epilogue (bias of m values; GELU input saved in aux
// with leading dimension m). A, B and the bias are of the op's dtype, C and D of d_dtype.
struct Gemm {
  int64_t m, n, k;
  cublasOperation_t ta, tb;
  const void *a;
  int64_t lda;
  const void *b;
  int64_t ldb;
  void *d;
  int64_t ldd;
  float beta;
  cublasLtEpilogue_t epilogue;
  const void *bias;
  void *aux;
};

st_status run_gemm(cuda_context *cx, const char *op, st_dtype dtype, st_dtype d_dtype,
                   const Gemm &g, const st_stream *stream) {
  cuda_matmul_key key;
  memset(&key, 0, sizeof key);
  key.m = g.m;
  key.n = g.n;
  key.k = g.k;
  key.transa = g.ta;
  key.transb = g.tb;
  key.lda = g.lda;
  key.ldb = g.ldb;
  key.ldc = g.ldd;
  key.dtype = dtype;
  key.d_dtype = d_dtype;
  key.epilogue = g.epilogue;
  key.aux_ld = g.aux ? g.m : 0;
  key.align[0] = alignment_of(g.a);
  key.align[1] = alignment_of(g.b);
  key.align[2] = alignment_of(g.d);
  key.align[3] = g.bias ? alignment_of(g.bias) : 0;
  key.align[4] = g.aux ? alignment_of(g.aux) : 0;
  cuda_matmul_plan *plan = NULL;
  ST_CHECK(cuda_matmul_plan_get(cx, &key, op, &plan));
  if (g.bias) {
    ST_CHECK(
        cuda_lt_status(cx,
                       cx->blas->cublasLtMatmulDescSetAttribute(
                           plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias),
                       op, "setting the bias pointer"));
  }
  if (g.aux) {
    ST_CHECK(cuda_lt_status(
        cx,
        cx->blas->cublasLtMatmulDescSetAttribute(
            plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g.aux, sizeof g.aux),
        op, "setting the pre-GELU pointer"));
  }
  const float alpha = 1.0f;
  return cuda_lt_status(
      cx,
      cx->blas->cublasLtMatmul(cx->lt, plan->desc, &alpha, g.a, plan->a, g.b, plan->b, &g.beta, g.d,
                               plan->c, g.d, plan->c, &plan->algo, cx->lt_workspace,
                               CUDA_LT_WORKSPACE_BYTES, stk::stream_of(stream)),
      op, "cublasLtMatmul");
}

// The layer's extents: rows N, inputs C, outputs OC.
struct Dims {
  int64_t rows, in, outs;
};

Dims dims_of(const st_tensor *inp, const st_tensor *weight, kernel_weight_layout layout) {
  const int out_in = layout == KERNEL_WEIGHT_OUT_IN;
  return Dims{kernel_rows(inp), weight->shape[out_in], weight->shape[1 - out_in]};
}

}  // namespace

extern "C" st_status cuda_matmul_forward(void *ctx, const st_tensor *out, const st_tensor *pre_gelu,
                                         const st_tensor *inp, const st_tensor *weight,
                                         kernel_weight_layout layout, const st_tensor *bias,
                                         const st_stream *stream) {
  cuda_context *cx = static_cast<cuda_context *>(ctx);
  const Dims d = dims_of(inp, weight, layout);
  const int out_in = layout == KERNEL_WEIGHT_OUT_IN;
  const char *op = pre_gelu ? "matmul_gelu_forward" : "matmul_forward";
  Gemm g{};
  g.m = d.outs;
  g.n = d.rows;
  g.k = d.in;
  g.ta = out_in ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.tb = CUBLAS_OP_N;
  g.a = weight->data;
  g.lda = out_in ? d.in : d.outs;
  g.b = inp->data;
  g.ldb = d.in;
  g.d = out->data;
  g.ldd = d.outs;
  g.beta = 0.0f;
  g.epilogue = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  g.bias = bias ? bias->data : NULL;
  g.aux = NULL;
  if (!pre_gelu) return run_gemm(cx, op, inp->dtype, inp->dtype, g, stream);
  if (inp->dtype != ST_FP32 && d.outs % 8 == 0) {
    // cuBLASLt writes gelu(x) to out and x (the product plus bias) to pre_gelu in one pass; it
    // needs the pre-GELU leading dimension divisible by 8. Only for 16-bit outputs: cuBLASLt's
    // GELU is the tanh form but not documented to fp32 precision, and fp32 (the precision
    // path, checked against the CPU at 1e-4) keeps kernel_gelu_forward's formula exactly.
    Gemm fused = g;
    fused.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    fused.aux = pre_gelu->data;
    st_error_saved before;
    st_error_save(&before);
    const st_status status = run_gemm(cx, op, inp->dtype, inp->dtype, fused, stream);
    // Any failure but "no algorithm for this epilogue" (warned once by the plan cache) is an
    // error; that one falls through to the two-step path below.
    if (status != ST_ERR_UNSUPPORTED) return status;
    st_error_restore(&before);
  }
  // A width (or dtype) the epilogue cannot take: the product plus bias into pre_gelu, then
  // GELU from it (elementwise.cu).
  g.d = pre_gelu->data;
  ST_CHECK(run_gemm(cx, op, inp->dtype, inp->dtype, g, stream));
  return cuda_gelu_forward(ctx, out, pre_gelu, stream);
}

extern "C" st_status cuda_matmul_backward(void *ctx, const st_tensor *dinp,
                                          const st_tensor *dweight, const st_tensor *dbias,
                                          const st_tensor *dout, const st_tensor *pre_gelu,
                                          const st_tensor *inp, const st_tensor *weight,
                                          kernel_weight_layout layout, const st_stream *stream) {
  cuda_context *cx = static_cast<cuda_context *>(ctx);
  const Dims d = dims_of(inp, weight, layout);
  const int out_in = layout == KERNEL_WEIGHT_OUT_IN;
  const char *op = pre_gelu ? "matmul_gelu_backward" : "matmul_backward";
  const st_dtype dt = inp->dtype, grad_dt = dweight->dtype;
  // First the GELU derivative into dout (in place) and the bias gradient from it: the products
  // below read the pre-activation's gradient.
  if (pre_gelu || dbias) {
    ST_CHECK(cuda_colsum(ctx, op, pre_gelu ? CUDA_COLSUM_DGELU : CUDA_COLSUM_PLAIN, dt, d.rows,
                         d.outs, dout->data, pre_gelu ? pre_gelu->data : NULL, NULL, NULL, grad_dt,
                         dbias ? dbias->data : NULL, NULL, stream));
  }
  Gemm g{};
  g.beta = 0.0f;  // cuBLASLt does not read C
  g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  // dinp^T[C, N] = op(W) dout^T
  g.m = d.in;
  g.n = d.rows;
  g.k = d.outs;
  g.ta = out_in ? CUBLAS_OP_N : CUBLAS_OP_T;
  g.a = weight->data;
  g.lda = out_in ? d.in : d.outs;
  g.tb = CUBLAS_OP_N;
  g.b = dout->data;
  g.ldb = d.outs;
  g.d = dinp->data;
  g.ldd = d.in;
  ST_CHECK(run_gemm(cx, op, dt, dt, g, stream));
  g.beta = 1.0f;
  if (out_in) {
    // dW^T[C, OC] += inp^T dout
    g.m = d.in;
    g.n = d.outs;
    g.k = d.rows;
    g.ta = CUBLAS_OP_N;
    g.a = inp->data;
    g.lda = d.in;
    g.tb = CUBLAS_OP_T;
    g.b = dout->data;
    g.ldb = d.outs;
    g.d = dweight->data;
    g.ldd = d.in;
  } else {
    // dW^T[OC, C] += dout^T inp
    g.m = d.outs;
    g.n = d.in;
    g.k = d.rows;
    g.ta = CUBLAS_OP_N;
    g.a = dout->data;
    g.lda = d.outs;
    g.tb = CUBLAS_OP_T;
    g.b = inp->data;
    g.ldb = d.in;
    g.d = dweight->data;
    g.ldd = d.outs;
  }
  return run_gemm(cx, op, dt, grad_dt, g, stream);
}
