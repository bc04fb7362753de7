/* ops_vocab_attention.c - ops_vocab_test's attention cases: the training attention forward and
 * backward on the vocabulary's odd shape, at head size 64 (aligned and with operands off a
 * 16-byte boundary) and at d12's heads over 9 sequences, against the CPU backend, its saved
 * log-sum-exp against the CPU's probabilities and its backward run twice for the same bits; the
 * cached (inference) attention; and the training attention again on each other
 * ST_CUDA_ATTENTION kind (ops_run_attention_kind). ops_vocab_test.c's header states the
 * tolerances. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gpu/ops_pair.h"
#include "tests/testing.h"

/* The shape of one attention case, and how many elements past a 16-byte boundary qkv and out
 * (off) and dout and dqkv (grad_off) start. */
typedef struct attn_shape {
  int B, T, C, NH;
  int off, grad_off;
} attn_shape;

/* The vocabulary's odd shape (head size 16); head size 64 over two 64-row tiles and a partial
 * one (what the flash kernels take), aligned, with every operand 2 bytes off (every kind leaves
 * it to the simple kernels) and with only the gradients so (the forward by the kind, the backward
 * by the simple kernels, from the kind's state); and d12's heads at 1024 tokens over 9 sequences
 * (cuDNN's backward runs them in chunks of at most 8 and the remainder). */
static const attn_shape kAttnShapes[] = {
    {OPS_B, OPS_T, OPS_C, OPS_NH, 0, 0},
    {2, 150, 128, 2, 0, 0},
    {2, 150, 128, 2, 1, 1},
    {2, 150, 128, 2, 0, 1},
    {9, 1024, 768, 12, 0, 0},
};

/* A pair of `shape` starting `off` elements into its own allocation: *owner is what to free. */
static pair attn_operand(pair_env *e, st_dtype dt, const int64_t *shape, int off, double lo,
                         double hi, pair *owner) {
  const int64_t n = shape[0] * shape[1] * shape[2] + off;
  *owner = pair_make(e, dt, 1, &n, lo, hi);
  return pair_view(owner, off, 3, shape);
}

static void attention_at(pair_env *e, st_dtype dt, attn_shape sh) {
  const int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH;
  char op[96];
  snprintf(op, sizeof op, "attention B=%d T=%d C=%d NH=%d offsets %d/%d", B, T, C, NH, sh.off,
           sh.grad_off);
  int64_t qkv_shape[] = {B, T, 3 * C}, act[] = {B, T, C};
  int64_t cpu_state = kernel_attention_state_numel(e->cpu, B, NH, T);
  int64_t gpu_state = kernel_attention_state_numel(e->gpu, B, NH, T);
  CHECK_MSG(
      gpu_state == (int64_t)B * NH * T,
      "attention: CUDA keeps one statistic per row, %lld values for B=%d NH=%d T=%d, not %lld",
      (long long)B * NH * T, B, NH, T, (long long)gpu_state);
  pair owners[4];
  pair qkv = attn_operand(e, dt, qkv_shape, sh.off, -1.5, 1.5, &owners[0]),
       out = attn_operand(e, dt, act, sh.off, 7, 7, &owners[1]);
  pair state_cpu = pair_make(e, ST_FP32, 1, &cpu_state, 7, 7);
  pair state_gpu = pair_make(e, ST_FP32, 1, &gpu_state, 7, 7);
  CHECK_OK(
      kernel_attention_forward(e->cpu, &out.cpu, &state_cpu.cpu, &qkv.cpu, NH, &e->cpu_stream));
  CHECK_OK(
      kernel_attention_forward(e->gpu, &out.gpu, &state_gpu.gpu, &qkv.gpu, NH, &e->gpu_stream));
  pair_check(e, ops_label(op, "forward out", dt), &out);
  /* The CUDA state is the log-sum-exp of each row's scaled scores: check it against the CPU's
   * probabilities, lse = s_ij - log p_ij for any visible j (j = 0 here). */
  {
    float *lse = pair_fetch_new(e, &state_gpu);
    double *want = malloc((size_t)gpu_state * sizeof *want);
    const double scale = 1.0 / sqrt((double)(C / NH));
    for (int64_t r = 0; r < gpu_state; r++) {
      const int64_t b = r / (NH * T), h = (r / T) % NH, i = r % T, hs = C / NH;
      double s = 0.0;
      for (int64_t d = 0; d < hs; d++) {
        s += (double)qkv.init[(b * T + i) * 3 * C + h * hs + d] *
             qkv.init[(b * T + 0) * 3 * C + C + h * hs + d];
      }
      want[r] = s * scale - log((double)state_cpu.host[r * T + 0]);
    }
    pair_compare(ops_label(op, "forward state (log-sum-exp)", dt), ST_FP32, lse, want, gpu_state);
    free(lse);
    free(want);
  }
  pair dout = attn_operand(e, dt, act, sh.grad_off, -1, 1, &owners[2]),
       dqkv = attn_operand(e, dt, qkv_shape, sh.grad_off, -1, 1, &owners[3]);
  CHECK_OK(kernel_attention_backward(e->cpu, &dqkv.cpu, &dout.cpu, &qkv.cpu, &out.cpu,
                                     &state_cpu.cpu, NH, &e->cpu_stream));
  CHECK_OK(kernel_attention_backward(e->gpu, &dqkv.gpu, &dout.gpu, &qkv.gpu, &out.gpu,
                                     &state_gpu.gpu, NH, &e->gpu_stream));
  float *first = pair_fetch_new(e, &dqkv);
  pair_compare_f(ops_label(op, "backward dqkv", dt), dt, first, dqkv.host, dqkv.n);
  pair_reset(e, &dqkv);
  CHECK_OK(kernel_attention_backward(e->gpu, &dqkv.gpu, &dout.gpu, &qkv.gpu, &out.gpu,
                                     &state_gpu.gpu, NH, &e->gpu_stream));
  float *second = pair_fetch_new(e, &dqkv);
  CHECK_MSG(ops_same_bits(first, second, dqkv.n),
            "%s: backward is not bit-identical on a second run [%s]", op, dtype_name(dt));
  free(first);
  free(second);
  for (int i = 0; i < 4; i++) pair_free(&owners[i]);
  pair_free(&state_cpu);
  pair_free(&state_gpu);
}

/* How many of kAttnShapes ops_case_attention runs: d12's, the last, is left out by ops_small. */
static size_t attn_shapes_run(void) {
  const size_t shapes = sizeof kAttnShapes / sizeof *kAttnShapes;
  return ops_small() ? shapes - 1 : shapes;
}

void ops_case_attention(pair_env *e, st_dtype dt) {
  for (size_t i = 0; i < attn_shapes_run(); i++) attention_at(e, dt, kAttnShapes[i]);
  if (ops_small())
    printf("attention: d12's shape left out (OPS_VOCAB_EMULATED or OPS_VOCAB_SMALL)\n");
}

/* Of one shape's three calls (the forward, the backward twice), those the tiled or cuDNN
 * kernels must leave to the simple ones: every call whose operands are off a 16-byte boundary
 * (the backward's alone where only the gradients are), and for flash every call at a head size
 * other than its 64. */
static int64_t calls_left(const char *kind, attn_shape sh) {
  if (sh.off || (strcmp(kind, "flash") == 0 && sh.C / sh.NH != 64)) return 3;
  return sh.grad_off ? 2 : 0;
}

void ops_case_attention_cached(pair_env *e, st_dtype dt) {
  const char *op = "attention_cached";
  enum { S = 48, C = OPS_C, NH = OPS_NH };
  int64_t cache_shape[] = {S, C};
  pair kc = pair_make(e, dt, 2, cache_shape, -1, 1), vc = pair_make(e, dt, 2, cache_shape, -1, 1);
  /* prefill 10 tokens, then 1, then 7 (17 new rows in all); rows 18.. stay as they were */
  const int64_t steps[][2] = {{0, 10}, {10, 1}, {11, 7}};
  for (int s = 0; s < 3; s++) {
    const int64_t past = steps[s][0], n = steps[s][1];
    int64_t qkv_shape[] = {n, 3 * C}, out_shape[] = {n, C};
    pair qkv = pair_make(e, dt, 2, qkv_shape, -1.5, 1.5),
         out = pair_make(e, dt, 2, out_shape, 7, 7);
    CHECK_OK(kernel_attention_cached_forward(e->cpu, &out.cpu, &kc.cpu, &vc.cpu, &qkv.cpu, past, NH,
                                             &e->cpu_stream));
    CHECK_OK(kernel_attention_cached_forward(e->gpu, &out.gpu, &kc.gpu, &vc.gpu, &qkv.gpu, past, NH,
                                             &e->gpu_stream));
    char what[64];
    snprintf(what, sizeof what, "out after %lld cached, %lld new", (long long)past, (long long)n);
    pair_check(e, ops_label(op, what, dt), &out);
    pair_free(&qkv);
    pair_free(&out);
  }
  pair_check(e, ops_label(op, "k cache", dt), &kc);
  pair_check(e, ops_label(op, "v cache", dt), &vc);
  pair_free(&kc);
  pair_free(&vc);
}

/* The attention cases again, in bf16 and fp16, on a backend made with ST_CUDA_ATTENTION=kind
 * (ops_vocab_test's first backend is simple's). flash: the tiled kernels
 * (kernels/cuda/flash_attention.cu) take the head-size-64 shapes and the odd one falls back to the
 * simple kernels. cudnn: cuDNN's fused attention (kernels/cuda/cudnn_attention.cpp) takes every
 * head size here (16 and 64). Both leave operands off a 16-byte boundary to the simple kernels, and
 * kernel_attention_fallbacks must count exactly the calls calls_left names: a shape a kind
 * refused passes on the kernels it falls back to, and would leave that kind untested. Same
 * references, tolerances and determinism check. */
void ops_run_attention_kind(pair_env *e, const char *kind, uint64_t rng) {
  kernel_backend *simple = e->gpu;
  CHECK(setenv("ST_CUDA_ATTENTION", kind, 1) == 0);
  const st_status made = kernel_backend_create(&e->gpu_dev, &e->gpu);
  CHECK(unsetenv("ST_CUDA_ATTENTION") == 0);
  CHECK_OK(made);
  if (made != ST_OK) {
    e->gpu = simple;
    return;
  }
  const char *runs = kernel_attention_kind(e->gpu);
  CHECK_MSG(strcmp(runs, kind) == 0,
            "ST_CUDA_ATTENTION=%s: the backend runs the %s kernels (see the warning above)", kind,
            runs);
  const st_dtype dtypes[] = {ST_BF16, ST_FP16};
  int64_t expected = 0;
  for (int d = 0; d < 2; d++) {
    if (!kernel_supports(e->gpu, KERNEL_OP_ATTENTION, dtypes[d])) continue;
    printf("attention (ST_CUDA_ATTENTION=%s) [%s]\n", kind, dtype_name(dtypes[d]));
    fflush(stdout);
    e->rng = rng + (uint64_t)d;
    ops_case_attention(e, dtypes[d]);
    for (size_t i = 0; i < attn_shapes_run(); i++) expected += calls_left(kind, kAttnShapes[i]);
  }
  const int64_t fallbacks = kernel_attention_fallbacks(e->gpu);
  printf("ST_CUDA_ATTENTION=%s: %lld calls left to other kernels, %lld expected\n", kind,
         (long long)fallbacks, (long long)expected);
  CHECK_MSG(fallbacks == expected,
            "ST_CUDA_ATTENTION=%s left %lld attention calls to other kernels, not the %lld of "
            "operands off a 16-byte boundary%s (see any warnings)",
            kind, (long long)fallbacks, (long long)expected,
            strcmp(kind, "flash") == 0 ? " or head sizes other than 64" : "");
  kernel_backend_destroy(e->gpu);
  e->gpu = simple;
}
