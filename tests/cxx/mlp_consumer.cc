// mlp_consumer.cc - a C++17 program that shards its own model through the public unit API, as
// research code linking libshardtrain does: it includes only "shardtrain.h" (and MPI, for two
// scalars of its own), and its model, forward and backward are its own code.
//
// The model: x[8,16] -> W1[16,32] + b1 -> tanh -> W2[32,4] + b2 -> mean squared error against
// fixed targets, one unit per layer. Every rank first trains it alone (NULL mesh: one rank,
// stage 0, the whole global batch), then sharded over all ranks at each ZeRO stage, each
// data-parallel rank on its slice of the same global batch. What it proves, on every rank: the
// sharded losses and gradient norms of 20 AdamW steps, and the final parameters (in the L2
// norm), match the rank's own single-rank run to 1e-5 relative; with bf16 parameters and gradients
// (stage 3), to 2e-2; the loss falls; nothing is left allocated. And each run, alone and
// sharded at stages 0-3 in fp32 and in bf16, is repeated with a checkpoint after step 10: every
// rank reads its units' owned optimizer state (st_unit_read_state), new units with other initial
// values take it (st_unit_write_state, st_unit_publish_state) and train on: the losses, norms and
// final parameters equal the uninterrupted run's bit for bit.
//
// It is built by Bazel (tests/cxx/BUILD) and, against an installed libshardtrain, by CMake and
// by a plain compiler command with pkg-config (tests/install), so it says here, not in a build
// file, that it uses MPI's C API only: MPI's deprecated C++ bindings, which <mpi.h> pulls into
// C++ by default, would need libmpi_cxx at link time.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "shardtrain.h"

namespace {

constexpr int kBatch = 8, kIn = 16, kHidden = 32, kOut = 4;
constexpr int kSteps = 20, kCheckpointAfter = 10;
constexpr float kLr = 0.02f;
constexpr double kClip = 0.25;  // below the first steps' norms: clipping is exercised
constexpr double kTolerance = 1e-5, kBf16Tolerance = 2e-2;

int world_rank = 0;
long failures = 0;

// A failing library call ends the job: its ranks could not carry on in step.
void must(st_status status, const char *call) {
  if (status == ST_OK) return;
  std::fprintf(stderr, "rank %d: %s -> %s: %s\n", world_rank, call, st_status_string(status),
               st_last_error());
  MPI_Abort(MPI_COMM_WORLD, 1);
}
#define MUST(call) must((call), #call)

// Within tolerance x `scale` (the value itself, or the size of the tensor it belongs to).
void check_close(double got, double want, double scale, double tolerance, const char *what,
                 int step) {
  if (std::fabs(got - want) <= tolerance * scale) return;
  std::fprintf(stderr, "FAIL rank %d: %s at step %d: sharded %.9g, single-rank %.9g\n", world_rank,
               what, step, got, want);
  failures++;
}

// xorshift64*: the same numbers on every rank and every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  float uniform(float bound) {  // in [-bound, bound)
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    uint64_t bits = (state_ * 0x2545F4914F6CDD1DULL) >> 40;
    return bound * (2.0f * static_cast<float>(bits) / 16777216.0f - 1.0f);
  }
  std::vector<float> vector(size_t n, float bound) {
    std::vector<float> v(n);
    for (float &x : v) x = uniform(bound);
    return v;
  }

 private:
  uint64_t state_;
};

// The fixed global batch: inputs and the outputs of a random teacher layer to learn.
struct Batch {
  std::vector<float> x, y;  // [kBatch, kIn], [kBatch, kOut]
};

Batch make_batch() {
  Rng rng(42);
  Batch b{rng.vector(kBatch * kIn, 1.0f), std::vector<float>(kBatch * kOut)};
  std::vector<float> teacher = rng.vector(kIn * kOut, 0.5f);
  for (int r = 0; r < kBatch; r++) {
    for (int o = 0; o < kOut; o++) {
      float sum = 0;
      for (int i = 0; i < kIn; i++) sum += b.x[r * kIn + i] * teacher[i * kOut + o];
      b.y[r * kOut + o] = std::tanh(sum);
    }
  }
  return b;
}

struct UnitDeleter {
  void operator()(st_unit *unit) const { st_unit_destroy(unit); }
};
using UnitPtr = std::unique_ptr<st_unit, UnitDeleter>;

// y = x W + b with W [in, out] and b [out], its two parameters in a unit of their own.
class Dense {
 public:
  Dense(const st_mesh *mesh, int stage, st_dtype dtype, const char *name, int in, int out,
        uint64_t seed)
      : in_(in), out_(out) {
    st_unit_config config = ST_UNIT_CONFIG_INIT;
    config.zero_stage = stage;
    config.param_dtype = config.reduce_dtype = dtype;
    st_unit *unit = nullptr;
    MUST(st_unit_create(&unit, mesh, name, &config));
    unit_.reset(unit);
    const int64_t w_shape[2] = {in, out}, b_shape[1] = {out};
    MUST(st_unit_add_param(unit, "weight", 2, w_shape, ST_TP_REPLICATED, &w_));
    MUST(st_unit_add_param(unit, "bias", 1, b_shape, ST_TP_REPLICATED, &b_));
    MUST(st_unit_finalize(unit));
    Rng rng(seed);
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    const std::vector<float> w = rng.vector(static_cast<size_t>(in) * out, bound);
    const std::vector<float> b = rng.vector(out, 0.1f);
    MUST(st_unit_set_param(unit, w_, w.data()));
    MUST(st_unit_set_param(unit, b_, b.data()));
    MUST(st_unit_optimizer_reset(unit));
  }

  st_unit *unit() const { return unit_.get(); }

  // y[rows, out] = x[rows, in] W + b.
  std::vector<float> forward(const float *x, int rows) const {
    MUST(st_unit_gather(unit()));
    float *w = nullptr, *b = nullptr;
    MUST(st_unit_param_data(unit(), w_, &w));
    MUST(st_unit_param_data(unit(), b_, &b));
    std::vector<float> y(static_cast<size_t>(rows) * out_);
    for (int r = 0; r < rows; r++) {
      for (int o = 0; o < out_; o++) {
        float sum = b[o];
        for (int i = 0; i < in_; i++) sum += x[r * in_ + i] * w[i * out_ + o];
        y[r * out_ + o] = sum;
      }
    }
    MUST(st_unit_release(unit()));
    return y;
  }

  // Adds this slice's dW = x^T dy and db = sum of dy into the unit's gradients, reduces them
  // over the data-parallel ranks, and returns dx = dy W^T when asked for.
  std::vector<float> backward(const float *x, const float *dy, int rows, bool want_dx) const {
    std::vector<float> dx;
    MUST(st_unit_begin_backward(unit()));
    float *dw = nullptr, *db = nullptr;
    MUST(st_unit_grad_data(unit(), w_, &dw));
    MUST(st_unit_grad_data(unit(), b_, &db));
    for (int r = 0; r < rows; r++) {
      for (int o = 0; o < out_; o++) {
        db[o] += dy[r * out_ + o];
        for (int i = 0; i < in_; i++) dw[i * out_ + o] += x[r * in_ + i] * dy[r * out_ + o];
      }
    }
    if (want_dx) {
      MUST(st_unit_gather(unit()));
      float *w = nullptr;
      MUST(st_unit_param_data(unit(), w_, &w));
      dx.assign(static_cast<size_t>(rows) * in_, 0.0f);
      for (int r = 0; r < rows; r++) {
        for (int i = 0; i < in_; i++) {
          float sum = 0;
          for (int o = 0; o < out_; o++) sum += dy[r * out_ + o] * w[i * out_ + o];
          dx[r * in_ + i] = sum;
        }
      }
      MUST(st_unit_release(unit()));
    }
    MUST(st_unit_reduce_grads(unit()));
    return dx;
  }

  // This rank's owned optimizer state: per parameter, the master weights, m and v.
  using State = std::vector<std::vector<float>>;
  State save() const {
    State state;
    for (int index : {w_, b_}) {
      int64_t first = 0, count = 0;
      MUST(st_unit_owned_range(unit(), index, &first, &count));
      for (st_optimizer_state which : {ST_STATE_MASTER, ST_STATE_ADAM_M, ST_STATE_ADAM_V}) {
        state.emplace_back(static_cast<size_t>(count));
        MUST(st_unit_read_state(unit(), index, which, state.back().data()));
      }
    }
    return state;
  }

  // Takes the state save() gave on this rank, in place of this unit's own.
  void restore(const State &state) const {
    int k = 0;
    for (int index : {w_, b_}) {
      MUST(st_unit_write_state(unit(), index, state[k].data(), state[k + 1].data(),
                               state[k + 2].data()));
      k += 3;
    }
    MUST(st_unit_publish_state(unit()));
  }

  // The full parameters, weight then bias (gathered for the copy).
  std::vector<float> parameters() const {
    MUST(st_unit_gather(unit()));
    std::vector<float> all;
    for (int index : {w_, b_}) {
      float *data = nullptr;
      int64_t numel = 0;
      MUST(st_unit_param_data(unit(), index, &data));
      MUST(st_unit_param_numel(unit(), index, &numel));
      all.insert(all.end(), data, data + numel);
    }
    MUST(st_unit_release(unit()));
    return all;
  }

 private:
  int in_, out_;
  int w_ = -1, b_ = -1;
  UnitPtr unit_;
};

// Sum over the data-parallel ranks; a run without a mesh is alone. The mesh of this test has
// R = T = 1, so its dp and shard groups are both the world.
double sum_over_ranks(double local, const st_mesh *mesh) {
  if (!mesh) return local;
  double total = 0;
  MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

struct History {
  std::vector<double> loss, grad_norm;
  std::vector<float> params;
};

// Trains the MLP on rows [first, first + rows) of the global batch, its parameters and
// gradients in `dtype`. With `checkpoint_after` > 0, the units are saved after that step and
// replaced by new ones, initialised otherwise, that take the saved state.
History train(const st_mesh *mesh, int stage, st_dtype dtype, const Batch &batch, int first,
              int rows, int checkpoint_after = 0) {
  auto fc1 = std::make_unique<Dense>(mesh, stage, dtype, "fc1", kIn, kHidden, 1);
  auto fc2 = std::make_unique<Dense>(mesh, stage, dtype, "fc2", kHidden, kOut, 2);
  const float *x = batch.x.data() + first * kIn, *target = batch.y.data() + first * kOut;
  st_adamw_config adamw = ST_ADAMW_CONFIG_INIT;
  History history;
  for (int step = 1; step <= kSteps; step++) {
    MUST(st_unit_zero_grads(fc1->unit()));
    MUST(st_unit_zero_grads(fc2->unit()));
    std::vector<float> h = fc1->forward(x, rows);
    for (float &v : h) v = std::tanh(v);
    std::vector<float> y = fc2->forward(h.data(), rows);

    // Loss: the mean over every output of the global batch, so each rank's gradient is already
    // divided by the global count and the reduction's sum completes it.
    const double count = static_cast<double>(kBatch) * kOut;
    double sq = 0;
    std::vector<float> dy(y.size());
    for (size_t k = 0; k < y.size(); k++) {
      double diff = static_cast<double>(y[k]) - target[k];
      sq += diff * diff;
      dy[k] = static_cast<float>(2.0 * diff / count);
    }
    history.loss.push_back(sum_over_ranks(sq, mesh) / count);

    std::vector<float> dh = fc2->backward(h.data(), dy.data(), rows, true);
    for (size_t k = 0; k < dh.size(); k++) dh[k] *= 1.0f - h[k] * h[k];
    fc1->backward(x, dh.data(), rows, false);

    double local = 0, part = 0;
    MUST(st_unit_grad_sumsq(fc1->unit(), &part));
    local += part;
    MUST(st_unit_grad_sumsq(fc2->unit(), &part));
    local += part;
    const double norm = std::sqrt(sum_over_ranks(local, mesh));
    history.grad_norm.push_back(norm);
    const float scale = static_cast<float>(std::min(1.0, kClip / (norm + 1e-6)));
    MUST(st_unit_adamw_step(fc1->unit(), &adamw, step, kLr, scale));
    MUST(st_unit_adamw_step(fc2->unit(), &adamw, step, kLr, scale));
    if (step == checkpoint_after) {
      const Dense::State s1 = fc1->save(), s2 = fc2->save();
      fc1 = std::make_unique<Dense>(mesh, stage, dtype, "fc1", kIn, kHidden, 3);
      fc2 = std::make_unique<Dense>(mesh, stage, dtype, "fc2", kHidden, kOut, 4);
      fc1->restore(s1);
      fc2->restore(s2);
    }
  }
  history.params = fc1->parameters();
  std::vector<float> p2 = fc2->parameters();
  history.params.insert(history.params.end(), p2.begin(), p2.end());
  return history;
}

// A run resumed from a checkpoint against the same run uninterrupted: equal bit for bit.
void compare_resumed(const History &resumed, const History &whole, const char *what) {
  if (resumed.loss == whole.loss && resumed.grad_norm == whole.grad_norm &&
      resumed.params == whole.params) {
    return;
  }
  std::fprintf(stderr,
               "FAIL rank %d: %s resumed after step %d differs from the run that never "
               "stopped\n",
               world_rank, what, kCheckpointAfter);
  failures++;
}

void compare(const History &sharded, const History &single, int stage, double tolerance) {
  char what[64];
  for (int s = 0; s < kSteps; s++) {
    std::snprintf(what, sizeof what, "stage %d loss", stage);
    check_close(sharded.loss[s], single.loss[s], std::fabs(single.loss[s]), tolerance, what, s + 1);
    std::snprintf(what, sizeof what, "stage %d gradient norm", stage);
    check_close(sharded.grad_norm[s], single.grad_norm[s], single.grad_norm[s], tolerance, what,
                s + 1);
  }
  // The final parameters in the relative L2 norm: Adam turns bf16 rounding into steps of lr on
  // single elements with near-zero gradients, so elementwise bounds would measure noise.
  double diff = 0, norm = 0;
  for (size_t k = 0; k < single.params.size(); k++) {
    const double want = single.params[k], got = sharded.params[k];
    diff += (got - want) * (got - want);
    norm += want * want;
  }
  std::snprintf(what, sizeof what, "stage %d final parameters (L2)", stage);
  check_close(std::sqrt(diff), 0.0, std::sqrt(norm), tolerance, what, kSteps);
}

}  // namespace

int main(int argc, char **argv) {
  MUST(st_init(&argc, &argv));
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const Batch batch = make_batch();
  const History single = train(nullptr, 0, ST_FP32, batch, 0, kBatch);
  compare_resumed(train(nullptr, 0, ST_FP32, batch, 0, kBatch, kCheckpointAfter), single,
                  "the single-rank run");
  if (!(single.loss.back() < 0.5 * single.loss.front())) {
    std::fprintf(stderr, "FAIL rank %d: the loss went from %g to %g\n", world_rank,
                 single.loss.front(), single.loss.back());
    failures++;
  }

  st_mesh_config config = ST_MESH_CONFIG_INIT;
  config.device = "cpu";  // the model computes on host pointers
  st_mesh *mesh = nullptr;
  MUST(st_mesh_create(&mesh, &config));
  st_mesh_coords c;
  MUST(st_mesh_get_coords(mesh, &c));
  const int dp_size = c.R * c.S, dp_rank = c.r * c.S + c.s;
  if (kBatch % dp_size != 0) {
    std::fprintf(stderr, "FAIL: the global batch of %d does not split over %d ranks\n", kBatch,
                 dp_size);
    failures++;
  } else {
    const int rows = kBatch / dp_size;
    char what[64];
    for (int stage = 0; stage <= 3; stage++) {
      const History sharded = train(mesh, stage, ST_FP32, batch, dp_rank * rows, rows);
      compare(sharded, single, stage, kTolerance);
      std::snprintf(what, sizeof what, "the stage %d run", stage);
      compare_resumed(train(mesh, stage, ST_FP32, batch, dp_rank * rows, rows, kCheckpointAfter),
                      sharded, what);
    }
    for (int stage = 0; stage <= 3; stage++) {
      const History bf16 = train(mesh, stage, ST_BF16, batch, dp_rank * rows, rows);
      if (stage == 3) compare(bf16, single, 3, kBf16Tolerance);
      std::snprintf(what, sizeof what, "the stage %d bf16 run", stage);
      compare_resumed(train(mesh, stage, ST_BF16, batch, dp_rank * rows, rows, kCheckpointAfter),
                      bf16, what);
    }
  }
  st_mesh_destroy(mesh);

  uint64_t live = 0;
  MUST(st_memory_live_bytes(&live));
  if (live != 0) {
    std::fprintf(stderr, "FAIL rank %d: %llu bytes still allocated\n", world_rank,
                 static_cast<unsigned long long>(live));
    failures++;
  }
  long total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) {
    std::printf(
        "mlp_consumer: %d ranks, %d steps at ZeRO stages 0-3, each also resumed from a "
        "checkpoint, %ld failures\n",
        c.world_size, kSteps, total);
  }
  MUST(st_finalize());
  return total == 0 ? 0 : 1;
}
