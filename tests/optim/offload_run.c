/* offload_run.c - see offload_run.h. */
#include "tests/optim/offload_run.h"

#include <string.h>

#include "core/error.h"
#include "optim/unit_optim.h"

static st_status declare(unit *u) {
  const int64_t matrix[2] = {32, 33}, vector[1] = {30};
  ST_CHECK(unit_declare(u, "w", 2, matrix, TP_REPLICATED, 1, NULL));
  return unit_declare(u, "b", 1, vector, TP_REPLICATED, 1, NULL);
}

/* Step `step`'s gradients, written into the unit's full gradients (stage 0) in the reduce
 * dtype through a host buffer. */
static st_status set_grads(unit *u, int step) {
  static uint8_t host[OFFLOAD_RUN_NUMEL * 4];
  float values[OFFLOAD_RUN_NUMEL];
  for (int i = 0; i < OFFLOAD_RUN_NUMEL; i++) {
    values[i] = (float)((i * 37 + step * 11) % 97 - 48) * 1e-3f;
  }
  dtype_convert(host, u->precision.reduce, values, ST_FP32, OFFLOAD_RUN_NUMEL);
  ST_CHECK(stream_memcpy(&u->stream, u->grads, host,
                         (size_t)OFFLOAD_RUN_NUMEL * dtype_size(u->precision.reduce)));
  return stream_sync(&u->stream);
}

/* The step's factors in device memory (kernel_step_factors's form): the gradient scale, and
 * whether `step` is skipped; the staging poisoned before a skipped step, since a skip must copy
 * nothing back. */
static st_status set_factors(unit *u, const offload_case *c, int step, float *factors) {
  const float host[KERNEL_STEP_FACTORS] = {
      [KERNEL_STEP_GRAD_SCALE] = 0.5f, [KERNEL_STEP_SKIP] = step == c->skip_step ? 1.0f : 0};
  ST_CHECK(stream_memcpy(&u->stream, factors, host, sizeof host));
  host_staging *staging = &u->streams->offload;
  if (step == c->skip_step && staging->params) {
    memset(staging->params, 0x7f,
           (size_t)HOST_STAGING_RING * (size_t)staging->slot_numel * staging->param_size);
  }
  return stream_sync(&u->stream);
}

static st_status steps(unit *u, const offload_case *c, float *factors, offload_result *out) {
  float init[OFFLOAD_RUN_NUMEL];
  for (int i = 0; i < OFFLOAD_RUN_NUMEL; i++) init[i] = (float)((i * 13) % 29 - 14) * 0.01f;
  ST_CHECK(unit_set_params(u, 0, init, u->layout.numel));
  ST_CHECK(unit_optimizer_reset(u));
  mem_stats_get(&out->allocated);
  mem_reset_peak();
  const adamw_hparams h = ADAMW_HPARAMS_DEFAULT;
  for (int step = 1; step <= 3; step++) {
    ST_CHECK(set_grads(u, step));
    ST_CHECK(set_factors(u, c, step, factors));
    ST_CHECK(unit_optim_adamw(u, 1, &h, 0.1f, step, 1e-2f, 0.5f, factors));
  }
  mem_stats peak;
  mem_stats_get(&peak);
  out->optimizer_host_peak = peak.peak[MEM_OPTIMIZER_HOST];
  const size_t bytes = sizeof out->master;
  ST_CHECK(stream_memcpy(&u->stream, out->master, u->master, bytes));
  ST_CHECK(stream_memcpy(&u->stream, out->m, u->adam_m, bytes));
  ST_CHECK(stream_memcpy(&u->stream, out->v, u->adam_v, bytes));
  ST_CHECK(stream_memcpy(&u->stream, out->params, u->params,
                         (size_t)OFFLOAD_RUN_NUMEL * dtype_size(u->precision.param)));
  return stream_sync(&u->stream);
}

st_status offload_run(const st_device *dev, unit_precision precision, const offload_case *c,
                      offload_result *out) {
  memset(out, 0, sizeof *out);
  kernel_backend *kb = NULL;
  ST_CHECK(kernel_backend_create(dev, &kb));
  float *factors = NULL;
  st_status status = mem_alloc((void **)&factors, KERNEL_STEP_FACTORS * sizeof(float), MEM_DEVICE,
                               MEM_WORKSPACE, dev);
  if (status != ST_OK) {
    kernel_backend_destroy(kb);
    return status;
  }
  unit u;
  status = unit_init(&u, "offload", dev, 0, &precision, NULL, 1, 0);
  if (status != ST_OK) {
    mem_free(factors);
    kernel_backend_destroy(kb);
    return status;
  }
  unit_use_kernels(&u, kb);
  status = declare(&u);
  if (status == ST_OK && u.layout.numel != OFFLOAD_RUN_NUMEL) {
    status = st_error(ST_ERR_INTERNAL, "the unit has %lld elements", (long long)u.layout.numel);
  }
  if (status == ST_OK && c->offload) status = unit_offload_optimizer(&u);
  if (c->offload == 2) u.offload_staging = 1;
  if (status == ST_OK) status = unit_allocate(&u);
  if (status == ST_OK && c->chunk_numel) u.streams->offload.chunk_numel = c->chunk_numel;
  if (status == ST_OK) status = steps(&u, c, factors, out);
  unit_free(&u);
  mem_free(factors);
  kernel_backend_destroy(kb);
  return status;
}

uint64_t offload_run_staging_bytes(unit_precision precision, const offload_case *c) {
  const uint64_t chunk = c->chunk_numel ? (uint64_t)c->chunk_numel : 1u << 20;
  const uint64_t slot = chunk < OFFLOAD_RUN_NUMEL ? chunk : OFFLOAD_RUN_NUMEL;
  return 4 * slot * (dtype_size(precision.param) + dtype_size(precision.reduce));
}
