/* offload_host.c - the offloaded optimizer's host update, in place or pipelined through the
 * pinned ring of chunk slots (offload_host.h). */
#include "optim/offload_host.h"

#include "core/alloc.h"
#include "core/dtype.h"
#include "core/error.h"
#include "optim/unit_optim.h"

/* The CPU backend and stream the host updates with. */
typedef struct host_kernels {
  st_device dev;
  kernel_backend *kb;
  st_stream stream;
} host_kernels;

static st_status host_kernels_open(host_kernels *k) {
  *k = (host_kernels){.dev = device_cpu()};
  ST_CHECK(kernel_backend_create(&k->dev, &k->kb));
  return stream_create(&k->dev, &k->stream);
}

static void host_kernels_close(host_kernels *k) {
  stream_destroy(&k->stream);
  kernel_backend_destroy(k->kb);
}

st_status offload_host_adamw_in_place(const offload_job *job, const kernel_adamw_step *step) {
  unit *u = job->u;
  host_kernels k;
  st_status status = host_kernels_open(&k);
  if (status == ST_OK) {
    status = unit_optim_adamw_range(u, k.kb, &k.stream, ST_DEVICE_CPU, unit_owned_params(u),
                                    unit_owned_grads(u), 0, u->owned_numel, step, job->segments,
                                    job->count);
  }
  host_kernels_close(&k);
  return status;
}

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

/* One chunk of the sequence: `count` elements of job `job`'s owned range from `begin`. */
typedef struct chunk_ref {
  int job;
  int64_t begin, count;
} chunk_ref;

/* The pipeline's state for one staged update. */
typedef struct pipeline {
  const offload_job *jobs;
  int n_jobs, published; /* jobs published so far, in order */
  host_staging *staging;
  host_kernels host;
  chunk_ref *chunks; /* every job's owned range cut into chunks, in job order */
  int n_chunks;
  kernel_adamw_segment *clipped; /* room for the most segments of any job */
  size_t grad_size, param_size;  /* bytes per element */
} pipeline;

static unit *unit_of(const pipeline *p, int c) { return p->jobs[p->chunks[c].job].u; }

/* Checks that the jobs share one staging and precision; counts their chunks and the most
 * segments of any job, and the largest chunk. */
static st_status survey(const pipeline *p, int *chunks, int *segments, int64_t *largest) {
  const unit *first = p->jobs[0].u;
  const int64_t chunk = p->staging->chunk_numel;
  if (chunk < 1) {
    return st_error(ST_ERR_INTERNAL, "offload staging chunks of %lld elements", (long long)chunk);
  }
  *chunks = *segments = 0;
  *largest = 0;
  for (int j = 0; j < p->n_jobs; j++) {
    const unit *u = p->jobs[j].u;
    if (u->streams != first->streams || u->precision.param != first->precision.param ||
        u->precision.reduce != first->precision.reduce) {
      return st_error(ST_ERR_INTERNAL,
                      "units %s and %s stage their updates together but are not "
                      "of one model",
                      first->name, u->name);
    }
    const int64_t n = (u->owned_numel + chunk - 1) / chunk;
    if (n > INT32_MAX - *chunks) {
      return st_error(ST_ERR_INTERNAL, "offload staging: too many chunks");
    }
    *chunks += (int)n;
    if (p->jobs[j].count > *segments) *segments = p->jobs[j].count;
    const int64_t big = u->owned_numel < chunk ? u->owned_numel : chunk;
    if (big > *largest) *largest = big;
  }
  return ST_OK;
}

static void list_chunks(pipeline *p) {
  const int64_t chunk = p->staging->chunk_numel;
  int c = 0;
  for (int j = 0; j < p->n_jobs; j++) {
    const int64_t owned = p->jobs[j].u->owned_numel;
    for (int64_t lo = 0; lo < owned; lo += chunk) {
      p->chunks[c++] = (chunk_ref){j, lo, owned - lo < chunk ? owned - lo : chunk};
    }
  }
}

/* Queues chunk c's gradients down into its slot on its unit's stream, and the slot's event
 * after them. The host has finished reading the slot's previous gradients. */
static st_status download(const pipeline *p, int c) {
  const chunk_ref *r = &p->chunks[c];
  unit *u = unit_of(p, c);
  const int slot = c % HOST_STAGING_RING;
  ST_CHECK(stream_memcpy(&u->stream, host_staging_grads(p->staging, slot),
                         (char *)unit_owned_grads(u) + (size_t)r->begin * p->grad_size,
                         (size_t)r->count * p->grad_size));
  return event_record(&p->staging->ready[slot], &u->stream);
}

/* Updates chunk c on the host once its gradients have arrived and its slot's last parameters
 * have gone out, then queues its written parameters up and the slot's event after them. */
static st_status update_chunk(const pipeline *p, int c, const kernel_adamw_step *step) {
  const chunk_ref *r = &p->chunks[c];
  const offload_job *job = &p->jobs[r->job];
  unit *u = job->u;
  const int slot = c % HOST_STAGING_RING;
  ST_CHECK(event_sync(&p->staging->ready[slot]));
  ST_CHECK(event_sync(&p->staging->uploaded[slot]));
  const int k = clip_segments(job->segments, job->count, r->begin, r->begin + r->count, p->clipped);
  char *params = host_staging_params(p->staging, slot);
  ST_CHECK(unit_optim_adamw_range(u, p->host.kb, &p->host.stream, ST_DEVICE_CPU, params,
                                  host_staging_grads(p->staging, slot), r->begin, r->count, step,
                                  p->clipped, k));
  char *owned = (char *)unit_owned_params(u) + (size_t)r->begin * p->param_size;
  for (int i = 0; i < k; i++) {
    const size_t at = (size_t)p->clipped[i].begin * p->param_size;
    ST_CHECK(stream_memcpy(&u->stream, owned + at, params + at,
                           (size_t)p->clipped[i].count * p->param_size));
  }
  return event_record(&p->staging->uploaded[slot], &u->stream);
}

/* Publishes the jobs up to `last` not published yet, in order (the gathers they start must be
 * in the same order on every rank, whatever each rank owns). */
static st_status publish_through(pipeline *p, int last) {
  for (; p->published <= last; p->published++) ST_CHECK(unit_publish(p->jobs[p->published].u));
  return ST_OK;
}

/* The staged update (offload_host.h). `step` reads its factors from host memory. */
static st_status run_pipeline(pipeline *p, kernel_adamw_step *step) {
  float factors[KERNEL_STEP_FACTORS];
  if (step->factors) {
    const st_stream *first = &p->jobs[0].u->stream; /* after C's work (unit_optimizer_begin) */
    /* The wait first, under the device-wait bound (core/device.h): a copy into pageable memory
     * makes the host wait for the stream's earlier work (the step's collectives) inside the
     * copy call itself, where no bound reaches. After the wait the copy waits for nothing. */
    ST_CHECK(stream_sync(first));
    ST_CHECK(stream_memcpy(first, factors, step->factors, sizeof factors));
    ST_CHECK(stream_sync(first));
    step->factors = factors;
    if (factors[KERNEL_STEP_SKIP] != 0.0f) return publish_through(p, p->n_jobs - 1);
  }
  for (int c = 0; c < p->n_chunks && c < HOST_STAGING_RING; c++) ST_CHECK(download(p, c));
  for (int c = 0; c < p->n_chunks; c++) {
    ST_CHECK(update_chunk(p, c, step));
    if (c + HOST_STAGING_RING < p->n_chunks) ST_CHECK(download(p, c + HOST_STAGING_RING));
    const int last_of_job = c + 1 == p->n_chunks || p->chunks[c + 1].job != p->chunks[c].job;
    if (last_of_job) ST_CHECK(publish_through(p, p->chunks[c].job));
  }
  return publish_through(p, p->n_jobs - 1);
}

st_status offload_host_adamw_staged(const offload_job *jobs, int n, const kernel_adamw_step *step) {
  if (n < 1) return ST_OK;
  for (int j = 0; j < n; j++) ST_CHECK(unit_optimizer_begin(jobs[j].u));
  const unit *first = jobs[0].u;
  pipeline p = {.jobs = jobs,
                .n_jobs = n,
                .staging = &first->streams->offload,
                .grad_size = dtype_size(first->precision.reduce),
                .param_size = dtype_size(first->precision.param)};
  int segments = 0;
  int64_t largest = 0;
  ST_CHECK(survey(&p, &p.n_chunks, &segments, &largest));
  if (p.n_chunks > 0) {
    ST_CHECK(host_staging_reserve(p.staging, largest, p.grad_size, p.param_size));
  }
  st_status status = mem_alloc((void **)&p.chunks, (size_t)(p.n_chunks + 1) * sizeof *p.chunks,
                               MEM_HOST, MEM_WORKSPACE, NULL);
  if (status == ST_OK) {
    status = mem_alloc((void **)&p.clipped, (size_t)(segments + 1) * sizeof *p.clipped, MEM_HOST,
                       MEM_WORKSPACE, NULL);
  }
  if (status == ST_OK) status = host_kernels_open(&p.host);
  if (status == ST_OK) {
    list_chunks(&p);
    kernel_adamw_step on_host = *step;
    status = run_pipeline(&p, &on_host);
  }
  host_kernels_close(&p.host);
  mem_free(p.clipped);
  mem_free(p.chunks);
  return status;
}
