/* offload_host.c - the offloaded optimizer's host update, in place or pipelined through the
 * pinned staging (offload_host.h). */
#include "optim/offload_host.h"

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/error.h"
#include "optim/unit_optim.h"

/* The segments of `in` that meet [begin, end), clipped to it and made relative to begin, into
 * out (room for n); returns how many. */
static int clip_segments(const kernel_adamw_segment *in, int n, int64_t begin, int64_t end,
                         kernel_adamw_segment *out) {
  int count = 0;
  for (int i = 0; i < n; i++) {
    const int64_t lo = in[i].begin > begin ? in[i].begin : begin;
    const int64_t hi = in[i].begin + in[i].count < end ? in[i].begin + in[i].count : end;
    if (lo < hi) out[count++] = (kernel_adamw_segment){lo - begin, hi - lo, in[i].weight_decay};
  }
  return count;
}

/* The pipeline's state for one unit's update. */
typedef struct pipeline {
  unit *u;
  host_staging *staging;
  const kernel_backend *cpu; /* the CPU backend the host updates with */
  const st_stream *cpu_stream;
  int64_t numel, chunk;
  int chunks;
  size_t grad_size, param_size; /* bytes per element */
} pipeline;

/* Chunk c's elements: from *lo, the returned count (the last chunk may be short). */
static int64_t chunk_at(const pipeline *p, int c, int64_t *lo) {
  *lo = (int64_t)c * p->chunk;
  return p->numel - *lo < p->chunk ? p->numel - *lo : p->chunk;
}

/* Queues chunk c's gradients down into the staging and its event after them. */
static st_status download(const pipeline *p, int c) {
  int64_t lo;
  const int64_t n = chunk_at(p, c, &lo);
  const size_t at = (size_t)lo * p->grad_size;
  ST_CHECK(stream_memcpy(&p->u->stream, (char *)p->staging->grads + at,
                         (char *)unit_owned_grads(p->u) + at, (size_t)n * p->grad_size));
  return event_record(&p->staging->ready[c % HOST_STAGING_RING], &p->u->stream);
}

/* Updates chunk c, whose gradients have arrived, on the host and queues its written parameters
 * up. `clipped` has room for `count` segments. */
static st_status update_chunk(const pipeline *p, int c, const kernel_adamw_step *step,
                              const kernel_adamw_segment *segments, int count,
                              kernel_adamw_segment *clipped) {
  int64_t lo;
  const int64_t n = chunk_at(p, c, &lo);
  const int k = clip_segments(segments, count, lo, lo + n, clipped);
  char *params = (char *)p->staging->params + (size_t)lo * p->param_size;
  char *grads = (char *)p->staging->grads + (size_t)lo * p->grad_size;
  ST_CHECK(unit_optim_adamw_range(p->u, p->cpu, p->cpu_stream, ST_DEVICE_CPU, params, grads, lo, n,
                                  step, clipped, k));
  char *owned = (char *)unit_owned_params(p->u) + (size_t)lo * p->param_size;
  for (int i = 0; i < k; i++) {
    const size_t at = (size_t)clipped[i].begin * p->param_size;
    ST_CHECK(stream_memcpy(&p->u->stream, owned + at, params + at,
                           (size_t)clipped[i].count * p->param_size));
  }
  return ST_OK;
}

/* The staged update (offload_host.h). `step` reads its factors from host memory. */
static st_status run_pipeline(pipeline *p, kernel_adamw_step *step, const float *device_factors,
                              const kernel_adamw_segment *segments, int count) {
  float factors[KERNEL_STEP_FACTORS];
  if (device_factors) {
    ST_CHECK(stream_memcpy(&p->u->stream, factors, device_factors, sizeof factors));
    step->factors = factors;
  }
  for (int c = 0; c < p->chunks && c < HOST_STAGING_RING; c++) ST_CHECK(download(p, c));
  kernel_adamw_segment *clipped = NULL;
  st_status status = mem_alloc((void **)&clipped, (size_t)(count > 0 ? count : 1) * sizeof *clipped,
                               MEM_HOST, MEM_WORKSPACE, NULL);
  for (int c = 0; status == ST_OK && c < p->chunks; c++) {
    status = event_sync(&p->staging->ready[c % HOST_STAGING_RING]);
    /* The factors came down before chunk 0's gradients: its event covers them. */
    if (status == ST_OK && c == 0 && device_factors && factors[KERNEL_STEP_SKIP] != 0.0f) break;
    if (status == ST_OK) status = update_chunk(p, c, step, segments, count, clipped);
    if (status == ST_OK && c + HOST_STAGING_RING < p->chunks) {
      status = download(p, c + HOST_STAGING_RING);
    }
  }
  mem_free(clipped);
  /* The copies still queued read or write the staging, which the next unit reuses. */
  const st_status synced = stream_sync(&p->u->stream);
  return status != ST_OK ? status : synced;
}

st_status offload_host_adamw(unit *u, const kernel_adamw_step *step,
                             const kernel_adamw_segment *segments, int count) {
  const st_device cpu = device_cpu();
  kernel_backend *kb = NULL;
  st_stream stream = {0};
  st_status status = kernel_backend_create(&cpu, &kb);
  if (status == ST_OK) status = stream_create(&cpu, &stream);
  if (status == ST_OK && !u->offload_staging) {
    status = unit_optim_adamw_range(u, kb, &stream, ST_DEVICE_CPU, unit_owned_params(u),
                                    unit_owned_grads(u), 0, u->owned_numel, step, segments, count);
  } else if (status == ST_OK && u->owned_numel > 0) {
    pipeline p = {.u = u,
                  .staging = &u->streams->offload,
                  .cpu = kb,
                  .cpu_stream = &stream,
                  .numel = u->owned_numel,
                  .chunk = u->streams->offload.chunk_numel,
                  .grad_size = dtype_size(u->precision.reduce),
                  .param_size = dtype_size(u->precision.param)};
    if (p.chunk < 1) {
      status =
          st_error(ST_ERR_INTERNAL, "offload staging chunks of %lld elements", (long long)p.chunk);
    }
    p.chunks = p.chunk < 1 ? 0 : (int)((p.numel + p.chunk - 1) / p.chunk);
    if (status == ST_OK)
      status = host_staging_reserve(p.staging, (size_t)p.numel * p.grad_size,
                                    (size_t)p.numel * p.param_size);
    kernel_adamw_step on_host = *step;
    if (status == ST_OK) status = run_pipeline(&p, &on_host, step->factors, segments, count);
  }
  stream_destroy(&stream);
  kernel_backend_destroy(kb);
  return status;
}
