/* host_waits_test.c - a training step makes the host wait once (DESIGN.md: "never waiting on the
 * host inside a step"): on one rank, on the CPU backend wrapped to count every stream_sync by
 * stream, each step synchronises the compute stream exactly once (gpt_step_end, after which the
 * host reads the step's scalars), and besides it only the streams gpt_step_end finishes (G, R and
 * the tp stream), once each, never a unit's own stream: the sums, the step's factors, every unit's
 * AdamW and its publishing are enqueued without a wait. Checked in fp32 without loss scaling and
 * with fp16 parameters under a dynamic loss scale (the overflow check and the skip decision on
 * the device), on the first step and on the next one. (With MPI between ranks, each stream-ordered
 * collective synchronises its stream: comm.h; this counts the single-rank schedule.) */
#include <stdlib.h>
#include <string.h>

#include "tests/testing.h"
#include "tests/train/test_step.h"

enum { B = 2, T = 16, MAX_STREAMS = 64 };

/* The CPU backend's streams share one token; the wrapped backend gives each its own handle (the
 * CPU's ops ignore it) so that the syncs can be told apart. */
static st_status distinct_stream_create(void **out) {
  *out = malloc(1);
  return *out ? ST_OK : ST_ERR_OOM;
}

static void distinct_stream_destroy(void *stream) { free(stream); }

/* Every stream_sync of the wrapped CPU backend, counted by stream handle. */
static const device_backend *cpu_backend;
static const void *synced[MAX_STREAMS];
static int sync_counts[MAX_STREAMS], n_synced;

static st_status counting_sync(void *stream) {
  int i = 0;
  while (i < n_synced && synced[i] != stream) i++;
  if (i == n_synced && n_synced < MAX_STREAMS) synced[n_synced++] = stream;
  if (i < MAX_STREAMS) sync_counts[i]++;
  return cpu_backend->stream_sync(stream);
}

static void counts_clear(void) {
  n_synced = 0;
  memset(sync_counts, 0, sizeof sync_counts);
}

static int count_of(const void *stream) {
  for (int i = 0; i < n_synced; i++) {
    if (synced[i] == stream) return sync_counts[i];
  }
  return 0;
}

static int total_syncs(void) {
  int total = 0;
  for (int i = 0; i < n_synced; i++) total += sync_counts[i];
  return total;
}

static int most_per_stream(void) {
  int most = 0;
  for (int i = 0; i < n_synced; i++) most = sync_counts[i] > most ? sync_counts[i] : most;
  return most;
}

static gpt_model *open_model(const st_device *dev, st_dtype param) {
  gpt_config cfg = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab = 256, .max_seq = T};
  CHECK_OK(gpt_config_finish(&cfg, 1));
  const gpt_parallel par = {.precision = {param, ST_FP32}};
  gpt_model *m = NULL;
  CHECK_OK(gpt_create(&m, &cfg, dev, B, T, &par));
  CHECK_OK(gpt_init_params(m, 1));
  CHECK_OK(train_state_reset(m));
  return m;
}

static void check_one_wait(const st_device *dev, st_dtype param, loss_scaler scaler) {
  gpt_model *m = open_model(dev, param);
  int32_t inputs[B * T], targets[B * T];
  test_step_tokens(inputs, targets, B * T);
  const int32_t *in[1] = {inputs}, *tg[1] = {targets};
  const train_hparams h = test_step_hparams(B * T);
  for (int step = 0; step < 2; step++) {
    counts_clear();
    step_stats s;
    CHECK_OK(train_step(m, &h, &scaler, step, in, tg, &s));
    /* gpt_step_end: C, G, R and the tp stream, once each; no unit's own stream */
    CHECK_MSG(count_of(m->stream.handle) == 1 && most_per_stream() == 1 && total_syncs() == 4,
              "%s step %d: the compute stream synchronised %d times, some stream %d times, %d "
              "syncs in all",
              dtype_name(param), step, count_of(m->stream.handle), most_per_stream(),
              total_syncs());
    CHECK_MSG(!s.skipped && s.grad_norm > 0, "%s step %d: applied, norm %g", dtype_name(param),
              step, s.grad_norm);
  }
  gpt_destroy(m);
}

int main(void) {
  const st_device cpu = device_cpu();
  cpu_backend = cpu.backend;
  device_backend counting = *cpu.backend;
  counting.stream_create = distinct_stream_create;
  counting.stream_destroy = distinct_stream_destroy;
  counting.stream_sync = counting_sync;
  const st_device dev = {.backend = &counting, .ordinal = cpu.ordinal};
  loss_scaler none, dynamic;
  loss_scaler_init_none(&none);
  loss_scaler_init_dynamic(&dynamic, 65536.0, 2000);
  check_one_wait(&dev, ST_FP32, none);
  check_one_wait(&dev, ST_FP16, dynamic);
  return test_finish("host_waits_test");
}
