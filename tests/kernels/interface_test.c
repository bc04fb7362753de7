/* interface_test.c - backend creation, the capability queries (by backend, and by device kind
 * from the facts every build has of the CPU and CUDA backends; the dtypes of ops and of the
 * parameter gradients they write), and the refusals every backend shares: the kernel_<op>
 * wrappers reject bad shapes, dtypes, devices, layouts and streams with a status and a detail
 * that names the numbers, before any data is touched. Also the CPU backend's own refusals:
 * out-of-range ids and a failed scratch allocation, which must leave nothing allocated. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "kernels/kernels.h"
#include "tests/testing.h"

enum { B = 2, T = 5, C = 12, OC = 7, N = B * T, NH = 3, V = 37, VP = 40 };

static float inp_data[N * C], weight_data[C * OC], bias_data[OC], out_data[N * OC];
/* Backs every tensor below that only lends a shape; the largest is the logits, N x VP. */
static float scratch_data[N * VP];

static st_tensor fp32(float *data, int ndim, const int64_t *shape) {
  st_tensor t;
  CHECK_OK(tensor_make(&t, data, ST_FP32, ST_DEVICE_CPU, ndim, shape));
  return t;
}

/* The call failed with `status` and its detail mentions `needle`. */
#define CHECK_REFUSED(expr, status, needle)                                                  \
  do {                                                                                       \
    CHECK_STATUS(expr, status);                                                              \
    CHECK_MSG(strstr(st_last_error(), needle), "detail '%s' mentions '%s'", st_last_error(), \
              needle);                                                                       \
  } while (0)

/* The CUDA backend as the planner sees it, the same in every build (kernels/cuda_facts.h): its
 * kernels compute in every dtype, fp16 included (fp32 accumulation inside), only the loss sum
 * and the step's factors are fp32 alone; its state is one fp32 statistic per attention row; its
 * attention takes no scratch of its own; its workspace is 32 MiB (cuBLASLt) + 8 KiB (1024 doubles)
 * + 4 MiB (2^20 floats) + 1 MiB (32768 segments of 32 bytes) + 8 MiB (the sort), every region a
 * multiple of 256 bytes, with 1 MiB of host staging; ST_CUDA_ATTENTION=cudnn, the default, adds
 * the cuDNN attention's 256 MiB whether or not the build or the machine has cuDNN (it falls back
 * to flash, holding the region), the other kinds nothing; a kind that is none of them plans like
 * simple. */
static void check_cuda_facts(void) {
  for (int op = 0; op < KERNEL_OP_COUNT; op++) {
    const int fp16 = kernel_kind_supports(ST_DEVICE_CUDA, (kernel_op)op, ST_FP16);
    const int fp32_only = op == KERNEL_OP_SUM || op == KERNEL_OP_STEP_FACTORS;
    CHECK_MSG(fp16 == !fp32_only, "CUDA %s on fp16: %d", kernel_op_name((kernel_op)op), fp16);
  }
  CHECK(!kernel_kind_supports(ST_DEVICE_CUDA, KERNEL_OP_COUNT, ST_FP32));
  CHECK(kernel_kind_computes_in(ST_DEVICE_CUDA, ST_FP32));
  CHECK(kernel_kind_computes_in(ST_DEVICE_CUDA, ST_FP16));
  CHECK(kernel_kind_computes_in(ST_DEVICE_CUDA, ST_BF16));
  CHECK(kernel_kind_attention_state_numel(ST_DEVICE_CUDA, B, NH, T) == (int64_t)B * NH * T);
  CHECK(kernel_kind_attention_scratch_bytes(ST_DEVICE_CUDA, T) == 0);
  const uint64_t MiB = 1u << 20, plain = 45 * MiB + 8192;
  CHECK(setenv("ST_CUDA_ATTENTION", "simple", 1) == 0);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_DEVICE), plain);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_HOST), MiB);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_PINNED), 0);
  CHECK(unsetenv("ST_CUDA_ATTENTION") == 0);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_DEVICE), plain + 256 * MiB);
  CHECK(setenv("ST_CUDA_ATTENTION", "flash", 1) == 0);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_DEVICE), plain);
  CHECK(setenv("ST_CUDA_ATTENTION", "cudnn", 1) == 0);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_DEVICE), plain + 256 * MiB);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_HOST), MiB);
  CHECK(setenv("ST_CUDA_ATTENTION", "cuDNN", 1) == 0);
  CHECK_EQ_INT(kernel_kind_workspace_bytes(ST_DEVICE_CUDA, MEM_DEVICE), plain);
  CHECK(unsetenv("ST_CUDA_ATTENTION") == 0);
}

static void check_lookup(void) {
  st_device cpu = device_cpu();
  kernel_backend *kb = NULL;
  CHECK_OK(kernel_backend_create(&cpu, &kb));
  CHECK(kb && strcmp(kernel_backend_name(kb), "cpu") == 0);
  CHECK(strcmp(kernel_attention_kind(kb), "cpu") == 0);
  CHECK_EQ_INT(kernel_attention_fallbacks(kb), 0);
  for (int op = 0; op < KERNEL_OP_COUNT; op++) {
    CHECK_MSG(strcmp(kernel_op_name((kernel_op)op), "unknown") != 0, "op %d has a name", op);
  }
  /* The CPU computes in fp32 only; bf16 and fp16 are storage formats there, which the buffer ops
   * (casts, AdamW's gradients and parameters, loss scaling) read and write. */
  CHECK(kernel_supports(kb, KERNEL_OP_MATMUL, ST_FP32));
  CHECK(!kernel_supports(kb, KERNEL_OP_MATMUL, ST_BF16));
  CHECK(kernel_supports(kb, KERNEL_OP_CAST, ST_BF16));
  CHECK(!kernel_supports(kb, KERNEL_OP_COUNT, ST_FP32));
  CHECK(kernel_supports(kb, KERNEL_OP_MATMUL_GELU, ST_FP32));
  CHECK(kernel_supports(kb, KERNEL_OP_ADAMW, ST_BF16));
  CHECK(kernel_supports(kb, KERNEL_OP_ADAMW, ST_FP16));
  CHECK(!kernel_supports(kb, KERNEL_OP_LAYERNORM, ST_FP16));
  CHECK(kernel_attention_state_numel(kb, B, NH, T) == (int64_t)B * NH * T * T);
  /* Asked by device kind, without a backend (the planner), the answers are the backend's. */
  int same = 1;
  for (int op = 0; op < KERNEL_OP_COUNT; op++) {
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
      same &= kernel_kind_supports(ST_DEVICE_CPU, (kernel_op)op, (st_dtype)d) ==
              kernel_supports(kb, (kernel_op)op, (st_dtype)d);
    }
  }
  CHECK_MSG(same, "kernel_kind_supports answers for the CPU as its backend does");
  CHECK(kernel_kind_computes_in(ST_DEVICE_CPU, ST_FP32));
  CHECK(!kernel_kind_computes_in(ST_DEVICE_CPU, ST_BF16));
  CHECK(kernel_kind_attention_state_numel(ST_DEVICE_CPU, B, NH, T) ==
        kernel_attention_state_numel(kb, B, NH, T));
  kernel_backend_destroy(kb);
  kernel_backend_destroy(NULL);
  /* A CUDA device where this build has no CUDA kernels: no backend, though its facts below. */
  if (!kernel_has_backend(ST_DEVICE_CUDA)) {
    device_backend fake_cuda = {.name = "fake-cuda", .kind = ST_DEVICE_CUDA};
    st_device gpu = {.backend = &fake_cuda, .ordinal = 0};
    CHECK_REFUSED(kernel_backend_create(&gpu, &kb), ST_ERR_UNSUPPORTED, "fake-cuda");
    CHECK(kb == NULL);
  }
  check_cuda_facts();
}

static void check_matmul_refusals(const kernel_backend *kb, const st_stream *s) {
  st_tensor inp = fp32(inp_data, 3, (int64_t[]){B, T, C});
  st_tensor weight = fp32(weight_data, 2, (int64_t[]){C, OC});
  st_tensor bias = fp32(bias_data, 1, (int64_t[]){OC});
  st_tensor out = fp32(out_data, 3, (int64_t[]){B, T, OC});
  CHECK_OK(kernel_matmul_forward(kb, &out, &inp, &weight, &bias, s));

  /* A refused call writes nothing: out keeps this marker. */
  out_data[0] = 1234.0f;
  st_tensor bad = fp32(weight_data, 2, (int64_t[]){C + 1, OC - 1});
  CHECK_REFUSED(kernel_matmul_forward(kb, &out, &inp, &bad, &bias, s), ST_ERR_INVALID_ARG,
                "expected 10 rows of 13");
  CHECK(out_data[0] == 1234.0f);
  bad = fp32(out_data, 2, (int64_t[]){N, OC + 1});
  CHECK_REFUSED(kernel_matmul_forward(kb, &bad, &inp, &weight, &bias, s), ST_ERR_INVALID_ARG,
                "out is [10, 8]");
  bad = fp32(bias_data, 1, (int64_t[]){OC - 1});
  CHECK_REFUSED(kernel_matmul_forward(kb, &out, &inp, &weight, &bad, s), ST_ERR_INVALID_ARG,
                "bias is [6], expected [7]");
  CHECK_REFUSED(kernel_matmul_forward(kb, NULL, &inp, &weight, &bias, s), ST_ERR_INVALID_ARG,
                "out is NULL");
  CHECK_REFUSED(kernel_matmul_forward(NULL, &out, &inp, &weight, &bias, s), ST_ERR_INVALID_ARG,
                "backend is NULL");
  bad = fp32(inp_data, 3, (int64_t[]){B, 0, C});
  CHECK_REFUSED(kernel_matmul_forward(kb, &out, &bad, &weight, &bias, s), ST_ERR_INVALID_ARG,
                "empty");

  bad = inp;
  bad.dtype = ST_BF16;
  CHECK_REFUSED(kernel_matmul_forward(kb, &out, &bad, &weight, &bias, s), ST_ERR_UNSUPPORTED,
                "bf16");
  bad = weight;
  bad.dtype = ST_BF16;
  CHECK_REFUSED(kernel_matmul_forward(kb, &out, &inp, &bad, &bias, s), ST_ERR_INVALID_ARG,
                "weight is bf16, expected fp32");
  bad = weight;
  bad.device = ST_DEVICE_CUDA;
  CHECK_REFUSED(kernel_matmul_forward(kb, &out, &inp, &bad, &bias, s), ST_ERR_INVALID_ARG,
                "cuda memory");
  bad = weight; /* a transposed view: [OC, C] with strides (1, OC) */
  bad.shape[0] = OC;
  bad.shape[1] = C;
  bad.strides[0] = 1;
  bad.strides[1] = OC;
  CHECK_REFUSED(kernel_matmul_forward(kb, &out, &inp, &bad, &bias, s), ST_ERR_INVALID_ARG,
                "not contiguous");

  device_backend fake_cuda = {.name = "fake-cuda", .kind = ST_DEVICE_CUDA};
  st_stream gpu_stream = {.backend = &fake_cuda, .handle = NULL};
  CHECK_REFUSED(kernel_matmul_forward(kb, &out, &inp, &weight, &bias, &gpu_stream),
                ST_ERR_INVALID_ARG, "cuda stream");
  CHECK(out_data[0] == 1234.0f);

  st_tensor dinp = fp32(scratch_data, 3, (int64_t[]){B, T, C + 1});
  CHECK_REFUSED(kernel_matmul_backward(kb, &dinp, &weight, &bias, &out, &inp, &weight, s),
                ST_ERR_INVALID_ARG, "dinp is [2, 5, 13], expected [2, 5, 12]");
}

static void check_other_refusals(const kernel_backend *kb, const st_stream *s) {
  st_tensor act = fp32(inp_data, 3, (int64_t[]){B, T, C});
  st_tensor chan = fp32(bias_data, 1, (int64_t[]){C});
  st_tensor stats = fp32(out_data, 1, (int64_t[]){N - 1});
  CHECK_REFUSED(kernel_layernorm_forward(kb, &act, &stats, &stats, &act, &chan, &chan, s),
                ST_ERR_INVALID_ARG, "mean is [9], expected 10 elements");

  st_tensor qkv = fp32(scratch_data, 3, (int64_t[]){B, T, 3 * C});
  st_tensor probs = fp32(scratch_data, 4, (int64_t[]){B, 5, T, T});
  CHECK_REFUSED(kernel_attention_forward(kb, &act, &probs, &qkv, 5, s), ST_ERR_INVALID_ARG,
                "5 heads do not divide 12 channels");
  CHECK_REFUSED(kernel_attention_forward(kb, &act, &probs, &qkv, NH, s), ST_ERR_INVALID_ARG,
                "state is [2, 5, 5, 5], expected 150 elements");
  st_tensor not_qkv = fp32(scratch_data, 3, (int64_t[]){B, T, 3 * C + 1});
  probs = fp32(scratch_data, 4, (int64_t[]){B, NH, T, T});
  CHECK_REFUSED(kernel_attention_forward(kb, &act, &probs, &not_qkv, NH, s), ST_ERR_INVALID_ARG,
                "not a multiple of 3");

  static float wte_data[VP * C], wpe_data[T * C];
  static int32_t tokens[N];
  st_tensor wte = fp32(wte_data, 2, (int64_t[]){VP, C});
  st_tensor short_wpe = fp32(wpe_data, 2, (int64_t[]){T - 1, C});
  CHECK_REFUSED(kernel_embedding_forward(kb, &act, tokens, &wte, &short_wpe, s), ST_ERR_INVALID_ARG,
                "only 4 positions");
  st_tensor wpe = fp32(wpe_data, 2, (int64_t[]){T, C});
  CHECK_REFUSED(kernel_embedding_forward(kb, &act, NULL, &wte, &wpe, s), ST_ERR_INVALID_ARG,
                "tokens is NULL");
  tokens[6] = VP;
  CHECK_REFUSED(kernel_embedding_forward(kb, &act, tokens, &wte, &wpe, s), ST_ERR_INVALID_ARG,
                "token 6 is 40, outside [0, 40)");
  CHECK_REFUSED(kernel_embedding_backward(kb, &wte, &wpe, &act, tokens, s), ST_ERR_INVALID_ARG,
                "token 6 is 40");
  tokens[6] = 0;

  st_tensor logits = fp32(scratch_data, 3, (int64_t[]){B, T, VP});
  st_tensor losses = fp32(out_data, 2, (int64_t[]){B, T});
  CHECK_REFUSED(kernel_classifier(kb, &losses, NULL, &logits, tokens, VP + 1, 1.0f, s),
                ST_ERR_INVALID_ARG, "vocabulary of 41 for logits of 40 columns");
  tokens[3] = V; /* a padding column is not a valid target */
  CHECK_REFUSED(kernel_classifier(kb, &losses, NULL, &logits, tokens, V, 1.0f, s),
                ST_ERR_INVALID_ARG, "target 3 is 37, outside [0, 37)");
  CHECK_REFUSED(kernel_classifier(kb, &losses, &logits, &logits, tokens, V, 1.0f, s),
                ST_ERR_INVALID_ARG, "target 3 is 37");
  tokens[3] = 0;

  st_tensor half;
  CHECK_OK(tensor_make(&half, scratch_data, ST_FP16, ST_DEVICE_CPU, 1, (int64_t[]){N}));
  st_tensor flat = fp32(inp_data, 1, (int64_t[]){N});
  st_tensor longer = fp32(inp_data, 1, (int64_t[]){N + 1});
  st_tensor bf;
  CHECK_OK(tensor_make(&bf, scratch_data, ST_BF16, ST_DEVICE_CPU, 1, (int64_t[]){N}));
  CHECK_REFUSED(kernel_cast(kb, &half, &bf, s), ST_ERR_UNSUPPORTED, "no cast from bf16 to fp16");
  CHECK_REFUSED(kernel_cast(kb, &bf, &longer, s), ST_ERR_INVALID_ARG, "expected 11 elements");
  CHECK_REFUSED(kernel_finite_check(kb, &half, &flat, s), ST_ERR_INVALID_ARG,
                "flag is fp16, expected fp32");
  CHECK_REFUSED(kernel_finite_check(kb, &flat, &flat, s), ST_ERR_INVALID_ARG,
                "flag is [10], expected 1 elements");
  CHECK_REFUSED(kernel_scale(kb, NULL, 2.0f, s), ST_ERR_INVALID_ARG, "x is NULL");
  CHECK_REFUSED(kernel_sum_squares(kb, NULL, &flat, s), ST_ERR_INVALID_ARG, "out is NULL");
  CHECK_REFUSED(kernel_sum_squares(kb, &flat, &flat, s), ST_ERR_INVALID_ARG,
                "out is [10], expected 1 elements");
}

/* Parameter gradients in another dtype than the activations (kernel_supports_grad_dtype): the
 * CPU computes in fp32 only and writes no gradient in another dtype than an op's, so its
 * wrappers refuse any other dtype for dweight, dbias, dwte and dwpe. The CUDA backend (its
 * facts, in every build) also writes fp32 gradients beside bf16 and fp16 activations, for
 * exactly the ops whose backward writes parameter gradients. */
static void check_grad_dtypes(const kernel_backend *kb, const st_stream *s) {
  int same = 1;
  for (int op = 0; op < KERNEL_OP_COUNT; op++) {
    for (int d = 0; d < ST_DTYPE_COUNT; d++) {
      for (int g = 0; g < ST_DTYPE_COUNT; g++) {
        const int answer = kernel_supports_grad_dtype(kb, (kernel_op)op, (st_dtype)d, (st_dtype)g);
        same &= answer == kernel_kind_supports_grad_dtype(ST_DEVICE_CPU, (kernel_op)op, (st_dtype)d,
                                                          (st_dtype)g);
        same &= answer == (g == d && kernel_supports(kb, (kernel_op)op, (st_dtype)d));
      }
    }
  }
  CHECK_MSG(same, "the CPU writes parameter gradients in its compute dtype only");
  for (int op = 0; op < KERNEL_OP_COUNT; op++) {
    const int writes = op == KERNEL_OP_MATMUL || op == KERNEL_OP_MATMUL_GELU ||
                       op == KERNEL_OP_LAYERNORM || op == KERNEL_OP_EMBEDDING;
    const kernel_op o = (kernel_op)op;
    CHECK_MSG(kernel_kind_supports_grad_dtype(ST_DEVICE_CUDA, o, ST_BF16, ST_FP32) == writes &&
                  kernel_kind_supports_grad_dtype(ST_DEVICE_CUDA, o, ST_FP16, ST_FP32) == writes,
              "CUDA %s: fp32 gradients beside 16-bit activations exactly where it writes "
              "parameter gradients (%d)",
              kernel_op_name(o), writes);
    CHECK(!kernel_kind_supports_grad_dtype(ST_DEVICE_CUDA, o, ST_FP16, ST_BF16));
    CHECK(!kernel_kind_supports_grad_dtype(ST_DEVICE_CUDA, o, ST_FP32, ST_BF16));
    CHECK(kernel_kind_supports_grad_dtype(ST_DEVICE_CUDA, o, ST_BF16, ST_BF16) ==
          kernel_kind_supports(ST_DEVICE_CUDA, o, ST_BF16));
  }

  st_tensor inp = fp32(inp_data, 3, (int64_t[]){B, T, C});
  st_tensor weight = fp32(weight_data, 2, (int64_t[]){C, OC});
  st_tensor out = fp32(out_data, 3, (int64_t[]){B, T, OC});
  static float dinp_data[N * C], dw_data[C * OC], db_data[OC];
  st_tensor dinp = fp32(dinp_data, 3, (int64_t[]){B, T, C});
  st_tensor dw = fp32(dw_data, 2, (int64_t[]){C, OC}), db = fp32(db_data, 1, (int64_t[]){OC});
  CHECK_OK(kernel_matmul_backward(kb, &dinp, &dw, &db, &out, &inp, &weight, s));
  st_tensor bad = dw;
  bad.dtype = ST_BF16;
  CHECK_REFUSED(kernel_matmul_backward(kb, &dinp, &bad, &db, &out, &inp, &weight, s),
                ST_ERR_INVALID_ARG, "dweight is bf16, expected fp32");
  bad = db;
  bad.dtype = ST_FP16;
  CHECK_REFUSED(kernel_matmul_backward(kb, &dinp, &dw, &bad, &out, &inp, &weight, s),
                ST_ERR_INVALID_ARG, "dbias is fp16, expected fp32");
  bad = fp32(db_data, 1, (int64_t[]){OC - 1});
  CHECK_REFUSED(kernel_matmul_backward(kb, &dinp, &dw, &bad, &out, &inp, &weight, s),
                ST_ERR_INVALID_ARG, "dbias is [6], expected [7]");

  st_tensor chan = fp32(bias_data, 1, (int64_t[]){C}),
            stats = fp32(scratch_data, 1, (int64_t[]){N});
  bad = fp32(db_data, 1, (int64_t[]){C});
  bad.dtype = ST_BF16;
  CHECK_REFUSED(
      kernel_layernorm_backward(kb, &dinp, &chan, &bad, &inp, &inp, &chan, &stats, &stats, s),
      ST_ERR_INVALID_ARG, "dbias is bf16, expected fp32");

  static float wte_data[VP * C], wpe_data[T * C];
  static int32_t tokens[N];
  st_tensor dwte = fp32(wte_data, 2, (int64_t[]){VP, C}),
            dwpe = fp32(wpe_data, 2, (int64_t[]){T, C});
  bad = dwpe;
  bad.dtype = ST_BF16;
  CHECK_REFUSED(kernel_embedding_backward(kb, &dwte, &bad, &inp, tokens, s), ST_ERR_INVALID_ARG,
                "dwpe is bf16, expected fp32");
}

/* The attention backward's scratch allocation fails: ST_ERR_OOM, dqkv untouched, no leak. */
static void check_out_of_memory(const kernel_backend *kb, const st_stream *s) {
  static float dqkv_data[N * 3 * C], dout_data[N * C], probs_data[B * NH * T * T];
  st_tensor qkv = fp32(scratch_data, 3, (int64_t[]){B, T, 3 * C});
  st_tensor dqkv = fp32(dqkv_data, 3, (int64_t[]){B, T, 3 * C});
  st_tensor dout = fp32(dout_data, 3, (int64_t[]){B, T, C});
  st_tensor probs = fp32(probs_data, 4, (int64_t[]){B, NH, T, T});
  for (int i = 0; i < N * C; i++) dout_data[i] = 1.0f;
  for (int i = 0; i < B * NH * T * T; i++) probs_data[i] = 1.0f / T;
  mem_stats before, after;
  mem_stats_get(&before);
  mem_fail_nth(1);
  CHECK_REFUSED(kernel_attention_backward(kb, &dqkv, &dout, &qkv, &dout, &probs, NH, s), ST_ERR_OOM,
                "injected");
  mem_fail_nth(0);
  mem_stats_get(&after);
  CHECK_EQ_INT(after.live_blocks, before.live_blocks);
  int untouched = 1;
  for (int i = 0; i < N * 3 * C; i++) untouched &= dqkv_data[i] == 0.0f;
  CHECK_MSG(untouched, "a failed attention backward leaves dqkv untouched");
  CHECK_OK(kernel_attention_backward(kb, &dqkv, &dout, &qkv, &dout, &probs, NH, s));
}

int main(void) {
  check_lookup();
  st_device cpu = device_cpu();
  kernel_backend *kb = NULL;
  st_stream stream;
  CHECK_OK(kernel_backend_create(&cpu, &kb));
  CHECK_OK(stream_create(&cpu, &stream));
  check_matmul_refusals(kb, &stream);
  check_other_refusals(kb, &stream);
  check_grad_dtypes(kb, &stream);
  check_out_of_memory(kb, &stream);
  stream_destroy(&stream);
  kernel_backend_destroy(kb);
  return test_finish("interface_test");
}
