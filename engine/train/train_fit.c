/* train_fit.c - the start-up memory check (train_fit.h): the limit of this rank's device, the
 * prediction for the run, and the refusal line. */
#include "engine/train/train_fit.h"

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "core/env.h"
#include "core/error.h"
#include "core/fnv.h"
#include "core/log.h"
#include "engine/plan/fit.h"

/* Larger than any job shardtrain would be asked to suggest. */
#define FIT_MAX_RANKS 65536

/* The colour of the memory `dev` allocates from among a node's: 0 for the host's RAM; for a GPU,
 * 31 bits of a hash of its PCI bus id, which names the GPU whatever each rank sees of the
 * node's GPUs (under `srun --gpus-per-task=1` every rank's one GPU is its ordinal 0), or of the
 * ordinal where the backend has no bus id. */
static int memory_color(const st_device *dev) {
  if (dev->backend->device_memory_is_host) return 0;
  char id[DEVICE_BUS_ID_SIZE] = "";
  if (device_bus_id(dev, id) != ST_OK || !id[0]) snprintf(id, sizeof id, "#%d", dev->ordinal);
  return (int)(fnv1a(FNV_OFFSET_BASIS, id, strlen(id)) & 0x7fffffff);
}

/* The ranks of this node whose allocations come out of the same memory as this rank's: all of
 * the node's on the CPU, those on the same GPU otherwise. Collective over MPI_COMM_WORLD. */
st_status train_fit_ranks_sharing(const st_device *dev, int *sharers) {
  MPI_Comm node, same;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
      MPI_SUCCESS) {
    return st_error(ST_ERR_MPI, "MPI_Comm_split_type failed");
  }
  const int color = memory_color(dev);
  int rc = MPI_Comm_split(node, color, 0, &same);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS) return st_error(ST_ERR_MPI, "MPI_Comm_split failed");
  MPI_Comm_size(same, sharers);
  MPI_Comm_free(&same);
  return ST_OK;
}

/* The memory found on the device, capped by ST_MEMORY_LIMIT_BYTES; *found = 0 when neither
 * can be read. `source` describes it for the message. */
static st_status memory_limit(const st_device *dev, uint64_t *bytes, int *found, char *source,
                              size_t size) {
  const char *cap_text = env_get_string(ENV_MEMORY_LIMIT_BYTES);
  int capped = strcmp(cap_text, "none") != 0, ok = 1;
  const double cap = capped ? env_get_positive(ENV_MEMORY_LIMIT_BYTES, &ok) : 0;
  if (!ok || (capped && cap < 1)) {
    return st_error(ST_ERR_INVALID_ARG,
                    "ST_MEMORY_LIMIT_BYTES='%s' is not a number of bytes >= 1 (or none)", cap_text);
  }
  const int host = dev->backend->device_memory_is_host;
  device_memory memory = {0};
  *found = device_memory_info(dev, &memory) == ST_OK;
  uint64_t available = memory.available;
  char text[32];
  if (*found) fit_format_bytes(available, text, sizeof text);
  if (*found && host) snprintf(source, size, "the host's available RAM, %s,", text);
  if (*found && !host) snprintf(source, size, "GPU %d's free memory, %s,", dev->ordinal, text);
  if (capped && (!*found || cap < (double)available)) {
    available = (uint64_t)cap;
    fit_format_bytes(available, text, sizeof text);
    snprintf(source, size, "ST_MEMORY_LIMIT_BYTES, %s,", text);
    *found = 1;
  }
  *bytes = available;
  return ST_OK;
}

st_status train_fit_plan_input(const train_options *o, const gpt_config *cfg, const st_mesh *mesh,
                               plan_input *in) {
  st_mesh_coords c;
  ST_CHECK(st_mesh_get_coords(mesh, &c));
  const st_device *dev = mesh_device(mesh);
  *in = (plan_input){.cfg = *cfg,
                     .R = c.R,
                     .S = c.S,
                     .T = c.T,
                     .stage = o->zero,
                     .micro_batch = o->micro_batch,
                     .seq_len = cfg->max_seq,
                     .grad_accum = o->grad_accum,
                     .prefetch = o->prefetch,
                     .reshard_after_forward = o->reshard_after_forward,
                     .device = dev->backend->kind,
                     .device_is_host = dev->backend->device_memory_is_host,
                     .checkpoints = o->ckpt_dir != NULL,
                     .checkpoints_async = o->ckpt_async};
  ST_CHECK(train_options_precision(o, &in->precision));
  in->compute_copies = plan_compute_copies(in->device, in->precision);
  ST_CHECK(train_options_recompute(o, &in->recompute));
  return train_options_offload(o, &in->offload_optimizer);
}

/* With --ckpt-async refused: "; or saving blocking, ..." when the run fits without the
 * background saves' snapshot, else "". */
static st_status blocking_alternative(const plan_input *in, uint64_t limit, char *out,
                                      size_t size) {
  out[0] = '\0';
  if (!in->checkpoints_async) return ST_OK;
  plan_input blocking = *in;
  blocking.checkpoints_async = 0;
  memory_plan plan;
  ST_CHECK(plan_memory(&blocking, &plan));
  const uint64_t need = fit_need(&blocking, &plan);
  if (need > limit) return ST_OK;
  char need_text[32];
  fit_format_bytes(need, need_text, sizeof need_text);
  snprintf(out, size,
           "; or saving blocking, without --ckpt-async and its snapshot of the optimizer state "
           "(predicted %s)",
           need_text);
  return ST_OK;
}

st_status train_fit_check(const train_options *o, const gpt_config *cfg, const st_mesh *mesh) {
  if (o->no_fit_check) return ST_OK;
  const st_device *dev = mesh_device(mesh);
  int sharers = 1;
  ST_CHECK(train_fit_ranks_sharing(dev, &sharers)); /* first: every rank reaches the collective */
  uint64_t available = 0;
  int found = 0;
  char source[96] = "";
  ST_CHECK(memory_limit(dev, &available, &found, source, sizeof source));
  if (!found) {
    st_log(ST_LOG_WARN, "memory check skipped: the %s device's free memory is unknown (%s)",
           dev->backend->name, st_last_error());
    return ST_OK;
  }
  const uint64_t limit = available / (uint64_t)sharers;
  plan_input in;
  ST_CHECK(train_fit_plan_input(o, cfg, mesh, &in));
  memory_plan plan;
  ST_CHECK(plan_memory(&in, &plan));
  const uint64_t need = fit_need(&in, &plan);
  char need_text[32], limit_text[32], states[32], acts[32];
  fit_format_bytes(need, need_text, sizeof need_text);
  fit_format_bytes(limit, limit_text, sizeof limit_text);
  st_log(ST_LOG_DEBUG, "memory check: predicted %llu bytes, limit %llu bytes",
         (unsigned long long)need, (unsigned long long)limit);
  if (!fit_refused(need, limit)) {
    if (need > limit) {
      st_log(ST_LOG_WARN,
             "predicted %s per rank exceeds the %s limit by less than the planner's %d%% "
             "tolerance: starting anyway",
             need_text, limit_text, FIT_PLANNER_TOLERANCE_PERCENT);
    }
    return ST_OK;
  }
  const fit_bounds bounds = {TRAIN_MAX_GRAD_ACCUM, FIT_MAX_RANKS,
                             device_check_param_dtype(dev, ST_BF16) == ST_OK};
  fit_suggestion s;
  ST_CHECK(fit_suggest(&in, limit, &bounds, &s));
  char change[320], blocking[160];
  fit_describe(&in, &s, &bounds, change, sizeof change);
  ST_CHECK(blocking_alternative(&in, limit, blocking, sizeof blocking));
  fit_format_bytes(plan.model_states, states, sizeof states);
  fit_format_bytes(plan.bytes[MEM_ACTIVATIONS], acts, sizeof acts);
  return st_error(ST_ERR_UNSUPPORTED,
                  "does not fit: predicted %s per rank (model states %s, activations %s) > "
                  "limit %s (%s shared by %d rank%s on this node); cheapest change that fits: "
                  "%s%s; --no-fit-check starts anyway",
                  need_text, states, acts, limit_text, source, sharers, sharers == 1 ? "" : "s",
                  change, blocking);
}
