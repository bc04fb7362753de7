// cudnn_attention.cpp - causal attention through cuDNN's fused scaled-dot-product attention
// (SDPA), built with the cuDNN frontend's graph API; the C interface is cudnn_attention.h.
//
// - Loading: the frontend is compiled with dynamic loading, so no binary links libcudnn; the
//   first context that asks for this kind dlopens libcudnn.so.9 (the GPU machine's own, found
//   through the loader's path) and hands the handle to the frontend. Compiled against one cuDNN 9
//   (the headers here) and run on another: the frontend reads the loaded library's version and
//   keeps to what it supports (on cuDNN before 9.21 its composite SDPA node).
// - Graphs: one per (sequences, heads, sequence length, head size, dtype, direction), built the
//   first time a shape comes (validate, operation graph, heuristic mode A's first engine, plan:
//   slow, so cached for the backend's life) and executed on the op's stream afterwards.
//   q, k and v are read in place from qkv [B, T, 3C] through strides, out [B, T, C] is written in
//   place, and Stats, cuDNN's per-row softmax statistic, is written into the state [B, NH, T]:
//   it is max + ln(sum exp(s - max)) of the scaled scores s = q.k / sqrt(hs), the natural-log
//   log-sum-exp attention.cu and flash_attention.cu keep (the backward recomputes the
//   probabilities as exp(s - Stats)), so the kinds can take over from each other.
// - Backward: deterministic (the frontend's deterministic algorithm: on Hopper it keeps dP, a
//   16-bit T x T block per (sequence, head), in the graph's workspace for the length of the call
//   instead of adding dQ with atomics). cuDNN writes dQ, dK and dV straight into dqkv, whose
//   strides its tensors take, as the op's contract asks (kernels.h: overwritten).
// - Memory: the graph's workspace lives in the context's fixed region (context.h). A batch whose
//   workspace exceeds it runs a chunk of sequences at a time, the chunk halved until it fits and
//   cuDNN builds it (the remainder of the batch has its own graph); a shape that neither fits
//   nor builds one sequence at a time is remembered and left to the other kinds with one
//   warning.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include "kernels/cuda/cudnn_attention.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/cuda_ops.h"

extern "C" {
#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"
#include "core/tensor.h"
}

namespace cudnn_frontend {
// The frontend, built with dynamic loading, looks every cuDNN symbol up in this handle, which by
// its contract the program defines and sets: the one process-wide value here, set once by
// load_cudnn and never closed (cuDNN's own sub-libraries stay loaded with it).
void *cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace fe = cudnn_frontend;

namespace {

using GraphPtr = std::shared_ptr<fe::graph::Graph>;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

constexpr int64_t kMaxHeadSize = 128;

// Tensor ids in the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// One attention call's shape: `batch` sequences of `seq` tokens, `heads` heads of `hs` features.
struct Shape {
  int64_t batch, heads, seq, hs;
  st_dtype dtype;
  int64_t channels() const { return heads * hs; }
  size_t elem() const { return dtype_size(dtype); }
};

// What a shape runs as: `chunk` sequences per execution of `full`, and the batch's remainder
// through `rest`; chunk 0 when cuDNN does not run the shape.
struct Plan {
  int64_t chunk = 0;
  GraphPtr full, rest;
};

// (batch, heads, seq, head size, dtype, backward)
using PlanKey = std::array<int64_t, 6>;

// dlopen's verdict, once per process: NULL when cuDNN is loaded, else why not.
const char *load_cudnn() {
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    dlerror();
    void *handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *why = dlerror();
      failure = why ? why : "dlopen failed";
      return;
    }
    fe::cudnn_dlhandle = handle;
  });
  return failure.empty() ? nullptr : failure.c_str();
}

// q, k or v of one head: [batch, heads, seq, hs] inside rows of 3C; and out or dout in rows of C.
std::vector<int64_t> qkv_strides(const Shape &s) {
  return {s.seq * 3 * s.channels(), s.hs, 3 * s.channels(), 1};
}
std::vector<int64_t> out_strides(const Shape &s) {
  return {s.seq * s.channels(), s.hs, s.channels(), 1};
}
std::vector<int64_t> head_dims(const Shape &s) { return {s.batch, s.heads, s.seq, s.hs}; }

TensorPtr input(fe::graph::Graph &g, const char *name, int64_t uid, const Shape &s,
                const std::vector<int64_t> &strides) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(head_dims(s))
                      .set_stride(strides));
}

// The statistic: one fp32 per (sequence, head, row), packed [batch, heads, seq, 1].
void stats_layout(fe::graph::Tensor_attributes &t, const Shape &s) {
  t.set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim({s.batch, s.heads, s.seq, 1})
      .set_stride({s.heads * s.seq, s.seq, 1, 1});
}

float scale_of(const Shape &s) { return 1.0f / std::sqrt(static_cast<float>(s.hs)); }

void add_forward(fe::graph::Graph &g, const Shape &s) {
  auto q = input(g, "q", kQ, s, qkv_strides(s));
  auto k = input(g, "k", kK, s, qkv_strides(s));
  auto v = input(g, "v", kV, s, qkv_strides(s));
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention_forward")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(scale_of(s));
  auto [o, stats] = g.sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim(head_dims(s)).set_stride(out_strides(s));
  stats->set_output(true);
  stats_layout(*stats, s);
}

void add_backward(fe::graph::Graph &g, const Shape &s) {
  auto q = input(g, "q", kQ, s, qkv_strides(s));
  auto k = input(g, "k", kK, s, qkv_strides(s));
  auto v = input(g, "v", kV, s, qkv_strides(s));
  auto o = input(g, "o", kO, s, out_strides(s));
  auto dout = input(g, "dout", kDO, s, out_strides(s));
  auto stats = g.tensor(fe::graph::Tensor_attributes().set_name("stats"));
  stats_layout(*stats, s);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(scale_of(s))
                     .set_deterministic_algorithm(true);
  auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, dout, stats, options);
  // Into dqkv's rows.
  const int64_t uids[3] = {kDQ, kDK, kDV};
  const TensorPtr grads[3] = {dq, dk, dv};
  for (int i = 0; i < 3; i++) {
    grads[i]->set_output(true).set_uid(uids[i]).set_dim(head_dims(s)).set_stride(qkv_strides(s));
  }
}

// A guess at the region one sequence takes, to start the chunk search near its answer: the
// deterministic backward's dP (16-bit, T x T per head, tiles of 64), its fp32 dQ accumulator
// and row sums.
size_t guess_per_sequence(const Shape &s, bool backward) {
  if (!backward) return 1;
  const size_t padded = (size_t)((s.seq + 63) / 64 * 64);
  return (size_t)s.heads * padded * padded * 2 + (size_t)(s.heads * s.seq * s.hs) * 4 +
         (size_t)(s.heads * s.seq) * 4;
}

}  // namespace

struct cuda_cudnn_attention {
  int sm_version;
  cudnnHandle_t handle;
  char *workspace;
  size_t workspace_bytes;
  // One per shape and direction, never evicted: a model calls attention at its one shape (its
  // micro-batch and sequence; sampling's cached attention is another op), so a run holds two.
  std::map<PlanKey, Plan> plans;
};

namespace {

// The graph for s built for this GPU, with its workspace in *ws; a message in *why (and NULL)
// when the frontend or cuDNN refuses it.
GraphPtr build_graph(cuda_cudnn_attention *a, const Shape &s, bool backward, int64_t *ws,
                     std::string *why) {
  try {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(s.dtype == ST_BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT)
        .set_sm_version(a->sm_version);
    if (backward) {
      add_backward(*g, s);
    } else {
      add_forward(*g, s);
    }
    fe::error_t e = g->validate();
    if (e.is_good()) e = g->build_operation_graph(a->handle);
    if (e.is_good()) e = g->create_execution_plans({fe::HeurMode_t::A});
    if (e.is_good()) e = g->check_support(a->handle);
    if (e.is_good()) e = g->build_plans(a->handle);
    if (e.is_good()) e = g->get_workspace_size(*ws);
    if (e.is_bad()) {
      *why = e.get_message();
      return nullptr;
    }
    return g;
  } catch (const std::exception &ex) {
    *why = ex.what();
    return nullptr;
  }
}

// Whether a graph workspace of ws bytes fits the region.
bool fits(const cuda_cudnn_attention *a, int64_t ws) {
  return ws >= 0 && (size_t)ws <= a->workspace_bytes;
}

// The chunks of sequences whose statistics start 16-byte aligned (cuDNN assumes it of every tensor
// and checks it only of the others) are the multiples of this: 1, 2 or 4 as heads x seq fp32
// values are a multiple of 4, 2 or 1.
int64_t aligned_step(const Shape &s) {
  const int64_t per = s.heads * s.seq;
  return per % 4 == 0 ? 1 : per % 2 == 0 ? 2 : 4;
}

// The most sequences, at most `want`, a chunk of s may hold so that every chunk's statistics stay
// aligned; the whole batch is one chunk. 0 when no such count is at most `want`.
int64_t stats_aligned(const Shape &s, int64_t want) {
  if (want >= s.batch) return s.batch;
  return want / aligned_step(s) * aligned_step(s);
}

// The plan for s, made now: the largest chunk of sequences (starting from the guess, halved)
// that cuDNN builds a graph for and whose graph workspace fits the region (a refused
// build is retried smaller too: a few builds more for a shape cuDNN never runs, none for one it
// runs). chunk 0 and *why, the last attempt's reason, when there is none.
Plan make_plan(cuda_cudnn_attention *a, const Shape &s, bool backward, std::string *why) {
  Plan plan;
  Shape c = s;
  const int64_t guess =
      std::max<int64_t>(1, (int64_t)(a->workspace_bytes / guess_per_sequence(s, backward)));
  c.batch = stats_aligned(s, std::max(guess, aligned_step(s)));
  for (;;) {
    int64_t ws = 0;
    GraphPtr g = build_graph(a, c, backward, &ws, why);
    if (g && fits(a, ws)) {
      plan.full = g;
      break;
    }
    if (g) {
      *why = std::to_string(c.batch) + (c.batch == 1 ? " sequence needs " : " sequences need ") +
             std::to_string(ws) + " bytes of workspace, more than the " +
             std::to_string(a->workspace_bytes) + " of its region" +
             (c.batch > 1 ? " (fewer would leave the statistics unaligned)" : "");
    }
    const int64_t smaller = c.batch == 1 ? 0 : stats_aligned(s, (c.batch + 1) / 2);
    if (smaller == 0) return Plan{};
    c.batch = smaller;
  }
  plan.chunk = c.batch;
  if (s.batch % c.batch != 0) {
    Shape r = s;
    r.batch = s.batch % c.batch;
    int64_t ws = 0;
    plan.rest = build_graph(a, r, backward, &ws, why);
    if (!plan.rest) return Plan{};
    if (!fits(a, ws)) {
      *why = "the graph of the batch's remainder needs more workspace than the region";
      return Plan{};
    }
  }
  return plan;
}

// The cached plan for s, made the first time (a refusal is warned about then, and remembered).
const Plan &plan_for(cuda_cudnn_attention *a, const Shape &s, bool backward) {
  const PlanKey key = {s.batch, s.heads, s.seq, s.hs, (int64_t)s.dtype, backward ? 1 : 0};
  auto found = a->plans.find(key);
  if (found != a->plans.end()) return found->second;
  std::string why;
  Plan plan = make_plan(a, s, backward, &why);
  if (plan.chunk == 0) {
    st_log(ST_LOG_WARN,
           "cuDNN attention %s: batch %lld, %lld heads, sequence %lld, head size %lld, %s: %s; the "
           "other attention kernels run this shape",
           backward ? "backward" : "forward", (long long)s.batch, (long long)s.heads,
           (long long)s.seq, (long long)s.hs, dtype_name(s.dtype), why.c_str());
  } else if (plan.chunk < s.batch) {
    st_log(ST_LOG_INFO, "cuDNN attention %s: batch %lld runs %lld sequences at a time",
           backward ? "backward" : "forward", (long long)s.batch, (long long)plan.chunk);
  }
  return a->plans.emplace(key, std::move(plan)).first->second;
}

// The shape of an attention call, and whether cuDNN is asked to run it: bf16 or fp16, a head
// size that is a multiple of 8 up to 128, every tensor 16-byte aligned (so is every head slice),
// the statistics among them (make_plan keeps each chunk's aligned too).
bool shape_of(const st_tensor *qkv, int64_t n_head, const st_tensor *const *others, int n_others,
              Shape *s) {
  s->batch = qkv->shape[0];
  s->seq = qkv->shape[1];
  s->heads = n_head;
  s->hs = qkv->shape[2] / 3 / n_head;
  s->dtype = qkv->dtype;
  bool ok = (s->dtype == ST_BF16 || s->dtype == ST_FP16) && s->hs % 8 == 0 &&
            s->hs <= kMaxHeadSize && reinterpret_cast<uintptr_t>(qkv->data) % 16 == 0;
  for (int i = 0; i < n_others; i++) {
    ok = ok && reinterpret_cast<uintptr_t>(others[i]->data) % 16 == 0;
  }
  return ok;
}

char *at(const void *base, int64_t elements, const Shape &s) {
  return static_cast<char *>(const_cast<void *>(base)) + (size_t)elements * s.elem();
}

st_status execute(cuda_cudnn_attention *a, const char *op, const GraphPtr &g,
                  std::unordered_map<int64_t, void *> &pack, void *workspace) {
  fe::error_t e = g->execute(a->handle, pack, workspace);
  if (e.is_good()) return ST_OK;
  return st_error(ST_ERR_CUDA, "%s: cuDNN graph execution failed: %s", op, e.get_message().c_str());
}

st_status bind_stream(cuda_cudnn_attention *a, const char *op, const st_stream *stream) {
  const cudnnStatus_t status =
      fe::detail::set_stream(a->handle, static_cast<cudaStream_t>(stream->handle));
  if (status == CUDNN_STATUS_SUCCESS) return ST_OK;
  return st_error(ST_ERR_CUDA, "%s: cudnnSetStream failed: %s", op,
                  fe::detail::get_error_string(status));
}

// body() with any C++ exception (the frontend's, or out of memory in the graph cache) turned
// into an error: none may cross into the C callers.
template <class Body>
st_status guarded(const char *op, Body body) {
  try {
    return body();
  } catch (const std::bad_alloc &) {
    return st_error(ST_ERR_OOM, "%s: out of host memory in the cuDNN attention", op);
  } catch (const std::exception &ex) {
    return st_error(ST_ERR_CUDA, "%s: cuDNN frontend: %s", op, ex.what());
  }
}

}  // namespace

extern "C" int cuda_cudnn_attention_built(void) { return 1; }

extern "C" st_status cuda_cudnn_attention_create(cuda_cudnn_attention **out, int sm_version,
                                                 void *workspace, size_t workspace_bytes) {
  *out = nullptr;
  if (const char *why = load_cudnn()) {
    return st_error(ST_ERR_UNSUPPORTED, "cannot load cuDNN (libcudnn.so.9): %s", why);
  }
  cudnnHandle_t handle = nullptr;
  try {
    const size_t loaded = fe::detail::get_backend_version();
    if (loaded / 10000 != CUDNN_MAJOR) {
      return st_error(ST_ERR_UNSUPPORTED, "the loaded cuDNN is version %zu; this build needs %d.x",
                      loaded, CUDNN_MAJOR);
    }
    const cudnnStatus_t status = fe::detail::create_handle(&handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      return st_error(ST_ERR_UNSUPPORTED, "cudnnCreate failed: %s",
                      fe::detail::get_error_string(status));
    }
    st_log(ST_LOG_DEBUG, "cuDNN attention: cuDNN %zu loaded (built against %d, frontend %d)",
           loaded, CUDNN_VERSION, CUDNN_FRONTEND_VERSION);
  } catch (const std::exception &ex) {
    return st_error(ST_ERR_UNSUPPORTED, "cuDNN frontend: %s", ex.what());
  }
  void *memory = nullptr;
  if (mem_alloc(&memory, sizeof(cuda_cudnn_attention), MEM_HOST, MEM_WORKSPACE, NULL) != ST_OK) {
    fe::detail::destroy_handle(handle);
    return ST_ERR_OOM;
  }
  // The struct lives in the allocator's memory; its map and the graphs are C++ heap objects.
  cuda_cudnn_attention *a = new (memory) cuda_cudnn_attention();
  a->sm_version = sm_version;
  a->handle = handle;
  a->workspace = static_cast<char *>(workspace);
  a->workspace_bytes = workspace_bytes;
  *out = a;
  return ST_OK;
}

extern "C" void cuda_cudnn_attention_destroy(cuda_cudnn_attention *a) {
  if (!a) return;
  const cudnnHandle_t handle = a->handle;
  a->~cuda_cudnn_attention();  // the graphs go before the handle they were built with
  try {
    fe::detail::set_stream(handle, nullptr);  // the last stream bound may be destroyed already
    fe::detail::destroy_handle(handle);
  } catch (const std::exception &) {
    // Nothing to report at teardown: the library was loaded, or no handle would exist.
  }
  mem_free(a);
}

namespace {

st_status forward(cuda_cudnn_attention *a, const st_tensor *out, const st_tensor *state,
                  const st_tensor *qkv, int64_t n_head, const st_stream *stream, int *ran) {
  Shape s;
  const st_tensor *others[] = {out, state};
  if (!shape_of(qkv, n_head, others, 2, &s)) return ST_OK;
  const Plan &plan = plan_for(a, s, false);
  if (plan.chunk == 0) return ST_OK;
  *ran = 1;
  ST_CHECK(bind_stream(a, "attention_forward", stream));
  const int64_t C = s.channels();
  for (int64_t b0 = 0; b0 < s.batch; b0 += plan.chunk) {
    const bool whole = s.batch - b0 >= plan.chunk;
    const int64_t q = b0 * s.seq * 3 * C;
    std::unordered_map<int64_t, void *> pack = {
        {kQ, at(qkv->data, q, s)},
        {kK, at(qkv->data, q + C, s)},
        {kV, at(qkv->data, q + 2 * C, s)},
        {kO, at(out->data, b0 * s.seq * C, s)},
        {kStats, static_cast<float *>(state->data) + b0 * s.heads * s.seq}};
    ST_CHECK(execute(a, "attention_forward", whole ? plan.full : plan.rest, pack, a->workspace));
  }
  return ST_OK;
}

st_status backward(cuda_cudnn_attention *a, const st_tensor *dqkv, const st_tensor *dout,
                   const st_tensor *qkv, const st_tensor *out, const st_tensor *state,
                   int64_t n_head, const st_stream *stream, int *ran) {
  Shape s;
  const st_tensor *others[] = {dqkv, dout, out, state};
  if (!shape_of(qkv, n_head, others, 4, &s)) return ST_OK;
  const Plan &plan = plan_for(a, s, true);
  if (plan.chunk == 0) return ST_OK;
  *ran = 1;
  ST_CHECK(bind_stream(a, "attention_backward", stream));
  const int64_t C = s.channels();
  for (int64_t b0 = 0; b0 < s.batch; b0 += plan.chunk) {
    const int64_t n = std::min(plan.chunk, s.batch - b0);
    const int64_t q = b0 * s.seq * 3 * C, o = b0 * s.seq * C;
    std::unordered_map<int64_t, void *> pack = {
        {kQ, at(qkv->data, q, s)},
        {kK, at(qkv->data, q + C, s)},
        {kV, at(qkv->data, q + 2 * C, s)},
        {kO, at(out->data, o, s)},
        {kDO, at(dout->data, o, s)},
        {kStats, static_cast<float *>(state->data) + b0 * s.heads * s.seq},
        {kDQ, at(dqkv->data, q, s)},
        {kDK, at(dqkv->data, q + C, s)},
        {kDV, at(dqkv->data, q + 2 * C, s)}};
    ST_CHECK(execute(a, "attention_backward", n == plan.chunk ? plan.full : plan.rest, pack,
                     a->workspace));
  }
  return ST_OK;
}

}  // namespace

extern "C" st_status cuda_cudnn_attention_forward(cuda_cudnn_attention *a, const st_tensor *out,
                                                  const st_tensor *state, const st_tensor *qkv,
                                                  int64_t n_head, const st_stream *stream,
                                                  int *ran) {
  *ran = 0;
  return guarded("attention_forward",
                 [&] { return forward(a, out, state, qkv, n_head, stream, ran); });
}

extern "C" st_status cuda_cudnn_attention_backward(cuda_cudnn_attention *a, const st_tensor *dqkv,
                                                   const st_tensor *dout, const st_tensor *qkv,
                                                   const st_tensor *out, const st_tensor *state,
                                                   int64_t n_head, const st_stream *stream,
                                                   int *ran) {
  *ran = 0;
  return guarded("attention_backward",
                 [&] { return backward(a, dqkv, dout, qkv, out, state, n_head, stream, ran); });
}
