/* unit_optim.c - gradient sum of squares and AdamW on a unit's owned range (unit_optim.h). */
#include "optim/unit_optim.h"

#include "core/alloc.h"
#include "core/error.h"
#include "optim/offload_host.h"

/* Adds the sum of squares of the owned gradients [lo, hi) (unit offsets) into out. */
static st_status sumsq_range(const unit *u, const kernel_backend *kb, const st_stream *stream,
                             const st_tensor *out, int64_t begin, int64_t lo, int64_t hi) {
  const int64_t n = hi - lo;
  const st_dtype g = u->precision.reduce;
  char *at = (char *)u->grad_shard + (size_t)(lo - begin) * dtype_size(g);
  st_tensor range;
  ST_CHECK(tensor_make(&range, at, g, u->dev->backend->kind, 1, &n));
  return kernel_sum_squares(kb, out, &range, stream);
}

st_status unit_optim_grad_sumsq(const unit *u, const kernel_backend *kb, const st_stream *stream,
                                const st_tensor *out) {
  const int64_t begin = (int64_t)u->shard_rank * u->layout.shard_numel;
  const int64_t end = begin + u->layout.shard_numel;
  /* One call per run of parameters that follow each other with no gap (most of a unit: the
   * layout's 16-element alignment rarely pads a GPT's tensors), not one per parameter: the
   * calls are short and many, and each is a launch on a GPU. */
  int64_t run_lo = -1, run_hi = -1; /* the run so far; none yet */
  for (int k = 0; k < u->layout.count; k++) {
    const unit_param *p = &u->layout.params[k];
    if (p->split == TP_REPLICATED && u->layout.t != 0) continue; /* counted on tp rank 0 */
    const int64_t lo = p->offset > begin ? p->offset : begin;
    const int64_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    if (lo != run_hi) {
      if (run_hi > run_lo) ST_CHECK(sumsq_range(u, kb, stream, out, begin, run_lo, run_hi));
      run_lo = lo;
    }
    run_hi = hi;
  }
  return run_hi > run_lo ? sumsq_range(u, kb, stream, out, begin, run_lo, run_hi) : ST_OK;
}

/* One segment per parameter that meets the owned range, at its offset inside the range, with
 * weight_decay for the tensors of rank >= 2: *count of them in *out (freed by the caller). */
static st_status owned_segments(const unit *u, float weight_decay, kernel_adamw_segment **out,
                                int *count) {
  const int64_t begin = u->owned_begin, end = begin + u->owned_numel;
  *count = 0;
  ST_CHECK(mem_alloc((void **)out, (size_t)u->layout.count * sizeof **out, MEM_HOST, MEM_WORKSPACE,
                     NULL));
  for (int k = 0; k < u->layout.count; k++) {
    const unit_param *p = &u->layout.params[k];
    const int64_t lo = p->offset > begin ? p->offset : begin;
    const int64_t hi = p->offset + p->numel < end ? p->offset + p->numel : end;
    if (lo >= hi) continue;
    (*out)[(*count)++] =
        (kernel_adamw_segment){lo - begin, hi - lo, p->ndim >= 2 ? weight_decay : 0.0f};
  }
  return ST_OK;
}

st_status unit_optim_adamw_range(const unit *u, const kernel_backend *kb, const st_stream *stream,
                                 st_device_kind kind, void *params, void *grads, int64_t begin,
                                 int64_t count, const kernel_adamw_step *step,
                                 const kernel_adamw_segment *segments, int segment_count) {
  st_tensor param, master, m, v, grad;
  ST_CHECK(tensor_make(&param, params, u->precision.param, kind, 1, &count));
  ST_CHECK(tensor_make(&master, u->master + begin, ST_FP32, kind, 1, &count));
  ST_CHECK(tensor_make(&m, u->adam_m + begin, ST_FP32, kind, 1, &count));
  ST_CHECK(tensor_make(&v, u->adam_v + begin, ST_FP32, kind, 1, &count));
  ST_CHECK(tensor_make(&grad, grads, u->precision.reduce, kind, 1, &count));
  return kernel_adamw(kb, &param, &master, &m, &v, &grad, step, segments, segment_count, stream);
}

/* The update of one unit that does not stage it (offload_host.h): begun, updated in place on
 * the host (an offloaded optimizer on the CPU) or on the unit's kernel backend, published. */
static st_status update_one(const offload_job *job, const kernel_adamw_step *s) {
  unit *u = job->u;
  ST_CHECK(unit_optimizer_begin(u));
  if (u->offload_optimizer) {
    ST_CHECK(offload_host_adamw_in_place(job, s));
  } else if (!u->kb) {
    return st_error(ST_ERR_INVALID_ARG, "unit %s: AdamW needs a kernel backend (unit_use_kernels)",
                    u->name);
  } else {
    ST_CHECK(unit_optim_adamw_range(u, u->kb, &u->stream, u->dev->backend->kind,
                                    unit_owned_params(u), unit_owned_grads(u), 0, u->owned_numel, s,
                                    job->segments, job->count));
  }
  return unit_publish(u);
}

st_status unit_optim_adamw(unit *units, int n, const adamw_hparams *h, float weight_decay, int step,
                           float lr, float grad_scale, const float *factors) {
  const kernel_adamw_step s = {lr, h->beta1, h->beta2, h->eps, grad_scale, step, factors};
  offload_job *jobs = NULL;
  ST_CHECK(mem_alloc((void **)&jobs, (size_t)(n > 0 ? n : 1) * sizeof *jobs, MEM_HOST,
                     MEM_WORKSPACE, NULL));
  st_status status = ST_OK;
  int listed = 0;
  for (; status == ST_OK && listed < n; listed++) {
    kernel_adamw_segment *segments = NULL;
    jobs[listed].u = &units[listed];
    status = owned_segments(&units[listed], weight_decay, &segments, &jobs[listed].count);
    jobs[listed].segments = segments;
  }
  /* Consecutive staged units go through the staging as one sequence. */
  for (int i = 0; status == ST_OK && i < n;) {
    int run = 1;
    while (units[i].offload_staging && i + run < n && units[i + run].offload_staging) run++;
    status = units[i].offload_staging ? offload_host_adamw_staged(&jobs[i], run, &s)
                                      : update_one(&jobs[i], &s);
    i += run;
  }
  for (int j = 0; j < listed; j++) mem_free((void *)jobs[j].segments);
  mem_free(jobs);
  return status;
}
