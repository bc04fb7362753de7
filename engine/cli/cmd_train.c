/* cmd_train.c - `shardtrain train`: builds the mesh and the GPT on it, initialises, imports or
 * resumes from a checkpoint, trains on token shards (each data-parallel rank reading its slice
 * of every global batch), evaluates, writes metrics (rank 0), checkpoints and exports. Every
 * rank runs the same sequence of collectives. */
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/check_mpi.h"
#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/ckpt_writer.h"
#include "engine/cli/cli_job.h"
#include "engine/cli/commands.h"
#include "engine/io/job_agree.h"
#include "engine/io/token_data.h"
#include "engine/model/gpt_io.h"
#include "engine/train/host_threads.h"
#include "engine/train/metrics.h"
#include "engine/train/output_paths.h"
#include "engine/train/run_report.h"
#include "engine/train/stop_request.h"
#include "engine/train/train_fit.h"
#include "engine/train/train_options.h"

typedef struct train_run {
  const train_options *o;
  gpt_config cfg;
  train_hparams h;
  loss_scaler scaler; /* the same on every rank: every rank sees the same overflow verdict */
  st_mesh *mesh;
  st_mesh_coords coords;
  gpt_model *model;
  token_loader *train, *val;
  int32_t *tokens; /* grad_accum x 2 x B x T: inputs and targets of each micro-batch */
  FILE *metrics;
  run_report report;
  step_mfu mfu;           /* the basis of the steps' MFU */
  ckpt_source *resume;    /* the checkpoint to continue from, or NULL */
  char latest[4200];      /* --resume: the newest checkpoint world rank 0 found, or "" for none */
  int first_step;         /* steps already trained (those of the checkpoint resumed) */
  int64_t tokens_trained; /* in every step so far, the resumed checkpoint's included */
  int eval_batches;      /* --eval-batches, or the validation data's batches where it holds fewer */
  int val_micro_batches; /* per validation batch: --grad-accum, or what the data holds if fewer */
  ckpt_writer *ckpt;     /* with --ckpt-dir: the run's saves */
  int ckpt_lock;         /* world rank 0's hold on --ckpt-dir (ckpt_dir_claim), or -1 */
  int setup_failed;      /* the inputs named on the command line could not be used */
  int stopped_by;        /* the signal that stopped the run before its last step, or 0 */
  int stopped_after;     /* the steps trained when it stopped */
} train_run;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static int is_writer(const train_run *r) { return r->coords.world_rank == 0; }

/* A loader of `flag`'s data (--data-train, --data-val) whose global batch is `micro_batches`
 * micro-batches; `report`: rank 0 warns of what it skips. */
static st_status open_loader(const train_run *r, const char *flag, const char *pattern,
                             int micro_batches, int report, token_loader **out) {
  token_loader_config c = {.pattern = pattern,
                           .batch_size = r->o->micro_batch,
                           .seq_len = r->cfg.max_seq,
                           .dp_rank = r->coords.r * r->coords.S + r->coords.s,
                           .dp_size = r->coords.R * r->coords.S,
                           .vocab_size = r->cfg.vocab,
                           .micro_batches = micro_batches,
                           .report = report && is_writer(r)};
  const st_status status = token_loader_open(out, &c);
  return status == ST_OK ? ST_OK : st_error(status, "%s %s", flag, st_last_error());
}

/* The validation data's loader. Its batch is the global batch, the step's --grad-accum
 * micro-batches, so a validation loss compares across meshes and micro-batch sizes that keep the
 * global batch. Data that holds fewer sequences than that is read in as many micro-batches as it
 * holds (rank 0 warns): refusing it would refuse a validation set that suited a smaller
 * --grad-accum. */
static st_status open_val_loader(train_run *r) {
  const train_options *o = r->o;
  token_loader *single = NULL; /* one micro-batch per batch: what the data holds, in those */
  ST_CHECK(open_loader(r, "--data-val", o->data_val, 1, 1, &single));
  const uint64_t held = token_loader_batches_per_pass(single); /* >= 1 */
  const int micro_batches = held < (uint64_t)o->grad_accum ? (int)held : o->grad_accum;
  if (micro_batches < o->grad_accum && is_writer(r)) {
    st_log(ST_LOG_WARN,
           "--data-val %s: holds %llu micro-batches of %d x %d x %d tokens, fewer than the %d of "
           "one global batch (--grad-accum): each validation batch is those %d",
           o->data_val, (unsigned long long)held, r->coords.R * r->coords.S, o->micro_batch,
           r->cfg.max_seq, o->grad_accum, micro_batches);
  }
  r->val_micro_batches = micro_batches;
  if (micro_batches == 1) { /* it is the loader wanted: the files are not read again */
    r->val = single;
    return ST_OK;
  }
  token_loader_close(single);
  return open_loader(r, "--data-val", o->data_val, micro_batches, 0, &r->val);
}

/* The device to train on: --device, else $ST_DEVICE; "auto" means a GPU only where this build
 * has kernels for it (until the CUDA kernels land, a GPU machine trains on its CPUs). */
static const char *train_device(const train_options *o) {
  const char *request = o->device ? o->device : env_get_string(ENV_DEVICE);
  if (strcmp(request, "auto") != 0 || kernel_has_backend(ST_DEVICE_CUDA)) return request;
  if (device_cuda_count() > 0) {
    st_log(ST_LOG_INFO, "this build has no CUDA kernels yet: training on the CPU");
  }
  return "cpu";
}

static st_status create_mesh(train_run *r) {
  const train_options *o = r->o;
  st_mesh_config mc = ST_MESH_CONFIG_INIT;
  mc.dp_replicate = o->dp_replicate;
  mc.dp_shard = o->dp_shard;
  mc.tp = o->tp;
  mc.device = train_device(o);
  mc.nccl_max_ctas = o->nccl_max_ctas;
  ST_CHECK(st_mesh_create(&r->mesh, &mc));
  ST_CHECK(st_mesh_get_coords(r->mesh, &r->coords));
  ST_CHECK(train_options_resolve(o, r->coords.R * r->coords.S, &r->cfg, &r->h));
  unit_precision p;
  ST_CHECK(train_options_precision(o, &p));
  step_mfu_init(&r->mfu, &r->cfg, mesh_device(r->mesh), p.param, o->peak_tflops,
                r->coords.world_size);
  return ST_OK;
}

/* With --resume, the newest complete checkpoint in --ckpt-dir as world rank 0 finds it, for every
 * rank: ranks that each looked for themselves could find different ones (a file system whose
 * caches show them different directories) and resume from different steps, or one start anew,
 * and their collectives would no longer match. */
static st_status find_latest(train_run *r) {
  const train_options *o = r->o;
  if (!o->resume) return ST_OK;
  st_status status = ST_OK;
  if (is_writer(r)) { /* --ckpt-dir exists: output_paths_check_train made it */
    int found = 0;
    status = ckpt_find_latest(o->ckpt_dir, r->latest, sizeof r->latest, &found);
    if (status == ST_OK && !found) {
      r->latest[0] = '\0';
      st_log(ST_LOG_INFO, "--resume: no complete checkpoint in %s, starting at step 0",
             o->ckpt_dir);
    }
  }
  ST_CHECK(job_agree(status));
  MPI_CHECK(MPI_Bcast(r->latest, (int)sizeof r->latest, MPI_CHAR, 0, MPI_COMM_WORLD));
  return ST_OK;
}

/* The checkpoint to continue from: --resume-from, or with --resume the one find_latest found
 * (none: the run starts anew). Each rank opens it itself. */
static st_status open_resume(train_run *r) {
  const train_options *o = r->o;
  const char *dir = o->resume ? (r->latest[0] ? r->latest : NULL) : o->resume_from;
  if (!dir) return ST_OK;
  st_status status = ckpt_source_open(&r->resume, dir);
  if (status != ST_OK) {
    return st_error(status, "%s: %s", o->resume ? "--resume" : "--resume-from", st_last_error());
  }
  return ST_OK;
}

/* What each rank sets up on its own: the model and its parameters, the data, the files. */
static st_status setup_local(train_run *r) {
  const train_options *o = r->o;
  gpt_parallel par = {.mesh = r->mesh,
                      .stage = o->zero,
                      .prefetch = o->prefetch,
                      .reshard_after_forward = o->reshard_after_forward};
  ST_CHECK(train_options_precision(o, &par.precision));
  ST_CHECK(train_options_loss_scaler(o, par.precision, &r->scaler));
  ST_CHECK(train_options_offload(o, &par.offload_optimizer));
  ST_CHECK(train_options_recompute(o, &par.recompute));
  if (device_check_param_dtype(mesh_device(r->mesh), par.precision.param) != ST_OK) {
    return st_error(ST_ERR_INVALID_ARG, "--param-dtype %s: %s", o->param_dtype, st_last_error());
  }
  ST_CHECK(
      gpt_create(&r->model, &r->cfg, mesh_device(r->mesh), o->micro_batch, r->cfg.max_seq, &par));
  ST_CHECK(open_resume(r));
  if (r->resume) {
    ST_CHECK(ckpt_source_check_model(r->resume, &r->cfg));
  } else if (o->init_from) {
    ST_CHECK(gpt_import(r->model, o->init_from, ""));
  } else {
    ST_CHECK(gpt_init_params(r->model, (uint64_t)o->seed));
  }
  ST_CHECK(train_state_reset(r->model));
  if (o->data_train) {
    ST_CHECK(open_loader(r, "--data-train", o->data_train, o->grad_accum, 1, &r->train));
  }
  if (o->data_val) ST_CHECK(open_val_loader(r));
  /* An evaluation reads each validation batch once at most: more would weigh some twice, and an
   * --eval-batches far above the data would hold a step (and a stop signal) for hours. */
  const uint64_t val_batches = r->val ? token_loader_batches_per_pass(r->val) : 0;
  r->eval_batches = o->eval_batches;
  if (r->val && (uint64_t)o->eval_batches > val_batches) {
    r->eval_batches = (int)val_batches;
    if (is_writer(r)) {
      st_log(ST_LOG_WARN,
             "--eval-batches %d: the validation data holds %llu batches (of %d x %d x %d x %d "
             "tokens); each evaluation reads those %llu",
             o->eval_batches, (unsigned long long)val_batches, r->val_micro_batches,
             r->coords.R * r->coords.S, o->micro_batch, r->cfg.max_seq,
             (unsigned long long)val_batches);
    }
  }
  /* Pinned: a copy from pageable memory to a GPU may wait for the stream's earlier work first
   * (CUDA stages it), which would stall the host at every micro-batch's upload while the GPU
   * drains, and then the GPU while the host enqueues the next micro-batch. The step's tokens
   * stay put until its end (the loader refills them after the step's one host wait), so the
   * uploads read them asynchronously. */
  size_t per_batch = (size_t)o->micro_batch * r->cfg.max_seq;
  ST_CHECK(mem_alloc((void **)&r->tokens, 2 * per_batch * (size_t)o->grad_accum * sizeof(int32_t),
                     MEM_PINNED, MEM_WORKSPACE, mesh_device(r->mesh)));
  if (o->metrics && is_writer(r)) {
    r->metrics = metrics_open_append(o->metrics);
    if (!r->metrics)
      return st_error(ST_ERR_IO, "--metrics %s: cannot open for appending: %s", o->metrics,
                      strerror(errno));
  }
  return ST_OK;
}

/* Loads the checkpoint into the model and puts the data where it left off. Collective. */
static st_status resume(train_run *r) {
  ST_CHECK(ckpt_restore(r->model, r->resume));
  const ckpt_manifest *m = ckpt_source_manifest(r->resume);
  /* Every dp rank's position is the same global batch boundary (token_data.h), whatever the
   * mesh, so any entry serves. */
  if (r->train) ST_CHECK(job_agree(token_loader_seek(r->train, m->data[0])));
  r->first_step = (int)m->step;
  r->tokens_trained = m->tokens; /* its runs' batches may differ from this one's */
  /* A dynamic scale continues where the checkpoint left it, even at its floor of 1, where it is
   * one a dynamic scaler holds (loss_scaler_adopt; a fixed one is the flag's, and a checkpoint
   * of a run without fp16 has no scale to give); the skipped steps always carry on, as AdamW's
   * step count leaves them out whatever the dtype. */
  const int scaled = m->param_dtype == ST_FP16 || m->reduce_dtype == ST_FP16;
  const int adopted = scaled && loss_scaler_adopt(&r->scaler, &m->scaler);
  r->scaler.state.skipped = m->scaler.skipped;
  if (is_writer(r)) {
    char scale[160] = "", whose[64] = "the checkpoint's";
    if (!scaled) snprintf(whose, sizeof whose, "anew: it had none");
    if (scaled && !adopted) {
      snprintf(whose, sizeof whose, "anew: its %g is no power of two from %.0f to %.0f",
               m->scaler.scale, LOSS_SCALER_MIN_SCALE, LOSS_SCALER_MAX_SCALE);
    }
    if (r->scaler.mode == LOSS_SCALER_DYNAMIC) {
      snprintf(scale, sizeof scale, "; loss scale %g (%s), %lld step%s skipped before",
               r->scaler.state.scale, whose, (long long)r->scaler.state.skipped,
               r->scaler.state.skipped == 1 ? "" : "s");
    }
    st_log(ST_LOG_INFO, "resumed from %s: step %lld, saved on mesh %dx%dx%d at ZeRO-%d in %s%s",
           ckpt_source_dir(r->resume), (long long)m->step, m->R, m->S, m->T, m->zero,
           dtype_name(m->param_dtype), scale);
  }
  /* Closed now, not at the end: --keep may delete the directory, whose open files would hold
   * its space (and on NFS leave .nfs files that keep it from being removed). */
  ckpt_source_close(r->resume);
  r->resume = NULL;
  return ST_OK;
}

/* Every rank's `flag` matched the same shards as world rank 0's: each rank globs the pattern on
 * its own, and a relative pattern from another directory, or a node's own copy of other files,
 * would train the ranks on other data, and hang them in evaluations of other lengths. */
static st_status agree_on_data(const token_loader *loader, const char *flag, const char *pattern) {
  if (!loader) return ST_OK; /* the same options on every rank: none has it */
  const uint64_t here[2] = {token_loader_fingerprint(loader), token_loader_shard_count(loader)};
  uint64_t first[2] = {here[0], here[1]};
  MPI_CHECK(MPI_Bcast(first, 2, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  st_status mine = ST_OK;
  if (first[0] != here[0] || first[1] != here[1]) {
    int rank = 0, len = 0;
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Get_processor_name(host, &len);
    mine = st_error(ST_ERR_INVALID_ARG,
                    "%s %s matches other shards on world rank %d (host %s, %llu files) than on "
                    "world rank 0 (%llu files): every rank must read the same files (names and "
                    "sizes; a relative pattern is taken from each rank's working directory)",
                    flag, pattern, rank, host, (unsigned long long)here[1],
                    (unsigned long long)first[1]);
  }
  return job_agree(mine);
}

/* Every rank sees the directory world rank 0 claimed: each rank writes its part of every
 * checkpoint there and reads it on --resume, so a path that is another directory on some rank (a
 * node-local one, another working directory) would fail at the first save, or save some ranks'
 * parts where no resume finds them. The claim's record in its lock file, unique to this job,
 * must read the same on every rank; a file system that is slow to show it gets 5 s. */
static st_status agree_on_ckpt_dir(const char *ckpt_dir) {
  char first[256] = "", here[256] = "";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) ckpt_dir_read_claim(ckpt_dir, first, sizeof first);
  MPI_CHECK(MPI_Bcast(first, (int)sizeof first, MPI_CHAR, 0, MPI_COMM_WORLD));
  int same = rank == 0 || !first[0]; /* no record: the claim could not write one (warned) */
  for (int tries = 0; !same && tries < 50; tries++) {
    if (tries > 0) job_test_sleep_ms(100);
    ckpt_dir_read_claim(ckpt_dir, here, sizeof here);
    same = strcmp(here, first) == 0;
  }
  st_status mine = ST_OK;
  if (!same) {
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_Get_processor_name(host, &len);
    mine = st_error(ST_ERR_INVALID_ARG,
                    "--ckpt-dir %s: world rank %d (host %s) does not find there the lock file "
                    "world rank 0 wrote (%s) but %s%s%s: every rank saves its part of each "
                    "checkpoint there, so it must be one directory on a file system they share",
                    ckpt_dir, rank, host, first, here[0] ? "'" : "none", here, here[0] ? "'" : "");
  }
  return job_agree(mine);
}

static st_status setup(train_run *r) {
  ST_CHECK(create_mesh(r));
  ST_CHECK(job_agree(job_file_limit_check())); /* a value one rank rejects: every rank says so */
  ST_CHECK(output_paths_check_train(r->o, 0));
  if (r->o->ckpt_dir) { /* made by output_paths_check_train */
    ST_CHECK(job_agree(is_writer(r) ? ckpt_dir_claim(r->o->ckpt_dir, &r->ckpt_lock) : ST_OK));
    ST_CHECK(agree_on_ckpt_dir(r->o->ckpt_dir));
  }
  ST_CHECK(find_latest(r));
  ST_CHECK(job_agree(train_fit_check(r->o, &r->cfg, r->mesh))); /* before anything large */
  int offload = 0;
  ST_CHECK(train_options_offload(r->o, &offload));
  if (mesh_device(r->mesh)->backend->device_memory_is_host || offload) host_threads_check();
  ST_CHECK(run_report_start(&r->report, r->o, &r->cfg, &r->h, r->mesh, &r->mfu));
  ST_CHECK(job_agree(setup_local(r)));
  ST_CHECK(agree_on_data(r->train, "--data-train", r->o->data_train));
  ST_CHECK(agree_on_data(r->val, "--data-val", r->o->data_val));
  if (r->resume) ST_CHECK(resume(r));
  if (r->o->ckpt_dir) ST_CHECK(job_agree(ckpt_writer_create(&r->ckpt, r->model, r->o->ckpt_async)));
  return ST_OK;
}

static void teardown(train_run *r) {
  ckpt_writer_destroy(r->ckpt);
  if (r->ckpt_lock >= 0) close(r->ckpt_lock); /* after the last save */
  ckpt_source_close(r->resume);
  if (r->metrics) fclose(r->metrics);
  mem_free(r->tokens);
  token_loader_close(r->val);
  token_loader_close(r->train);
  gpt_destroy(r->model);
  st_mesh_destroy(r->mesh);
}

/* Mean loss over the first r->eval_batches global batches of the validation data (the same ones
 * each time, so evaluations are comparable), over every token of every data-parallel rank: the
 * per-token losses are summed in a device scalar, added over the dp group there, and read
 * once. */
static st_status evaluate(train_run *r, double *val_loss) {
  size_t per_batch = (size_t)r->o->micro_batch * r->cfg.max_seq;
  ST_CHECK(token_loader_seek(r->val, (token_position){0, 0}));
  gpt_model *m = r->model;
  const st_tensor sum = gpt_scalar(m, GPT_LOSS_SUM);
  ST_CHECK(stream_memset(&m->stream, sum.data, 0, sizeof(float)));
  const int64_t micro_batches = (int64_t)r->eval_batches * r->val_micro_batches;
  const int slots = r->o->grad_accum; /* the step's token slots, taken in turn */
  for (int64_t i = 0; i < micro_batches; i++) {
    /* The uploads read the pinned tokens asynchronously: a slot is refilled only once the
     * stream has run the upload that last read it. */
    if (i > 0 && i % slots == 0) ST_CHECK(stream_sync(&m->stream));
    int32_t *inputs = r->tokens + 2 * per_batch * (size_t)(i % slots),
            *targets = inputs + per_batch;
    ST_CHECK(job_agree(token_loader_next(r->val, inputs, targets))); /* as run_step's */
    ST_CHECK(gpt_forward(m, inputs, targets, 0.0f));
    ST_CHECK(gpt_loss_sum(m, &sum));
  }
  comm *dp = mesh_comm(r->mesh, ST_GROUP_DP);
  ST_CHECK(comm_all_reduce_on(dp, &m->stream, sum.data, sum.data, 1, ST_FP32, COMM_SUM, NULL));
  float host_sum = 0;
  ST_CHECK(stream_memcpy(&m->stream, &host_sum, sum.data, sizeof host_sum));
  ST_CHECK(stream_sync(&m->stream));
  const double tokens = (double)m->B * m->T * micro_batches * comm_size(dp);
  *val_loss = (double)host_sum / tokens;
  return ST_OK;
}

/* Bytes this rank sent per op over all its groups since the counters were last reset; resets
 * them. */
static void step_comm_bytes(st_mesh *mesh, uint64_t bytes[COMM_OP_COUNT]) {
  for (int op = 0; op < COMM_OP_COUNT; op++) bytes[op] = 0;
  for (int g = 0; g < ST_GROUP_COUNT; g++) {
    comm *c = mesh_comm(mesh, (st_group)g);
    comm_counters counters;
    comm_counters_get(c, &counters);
    for (int op = 0; op < COMM_OP_COUNT; op++) bytes[op] += counters.bytes_sent[op];
    comm_counters_reset(c);
  }
}

static st_status run_step(train_run *r, int step, step_record *rec) {
  const train_options *o = r->o;
  size_t per_batch = (size_t)o->micro_batch * r->cfg.max_seq;
  const int32_t *inputs[TRAIN_MAX_GRAD_ACCUM], *targets[TRAIN_MAX_GRAD_ACCUM];
  /* Each rank reads its own slice: one that finds a bad token stops every rank here, before
   * the others wait for it in the step's first collective. */
  st_status read = ST_OK;
  for (int i = 0; i < o->grad_accum; i++) {
    int32_t *in = r->tokens + 2 * per_batch * (size_t)i, *tg = in + per_batch;
    if (read == ST_OK) read = token_loader_next(r->train, in, tg);
    inputs[i] = in;
    targets[i] = tg;
  }
  ST_CHECK(job_agree(read));
  double start = now_ms();
  step_stats s;
  ST_CHECK(train_step(r->model, &r->h, &r->scaler, step, inputs, targets, &s));
  double ms = now_ms() - start;
  r->tokens_trained += r->h.global_tokens;
  *rec = (step_record){.step = step,
                       .loss = s.loss,
                       .lr = s.lr,
                       .grad_norm = s.grad_norm,
                       .loss_scale = s.loss_scale,
                       .skipped = s.skipped,
                       .tokens = r->tokens_trained,
                       .tokens_per_s = (double)r->h.global_tokens / (ms / 1e3),
                       .step_ms = ms,
                       .comm_exposed_ms = s.comm_exposed_ms,
                       .zero = o->zero,
                       .R = r->coords.R,
                       .S = r->coords.S,
                       .T = r->coords.T,
                       .param_dtype = dtype_name(r->model->par.precision.param),
                       .reduce_dtype = dtype_name(r->model->par.precision.reduce)};
  rec->mfu = step_mfu_of(&r->mfu, rec->tokens_per_s);
  step_comm_bytes(r->mesh, rec->comm_bytes);
  int last = step == train_options_end(o) - 1;
  if (r->val && (last || (o->eval_every && (step + 1) % o->eval_every == 0))) {
    ST_CHECK(evaluate(r, &rec->val_loss));
    rec->has_val = 1;
    uint64_t evaluation[COMM_OP_COUNT]; /* not the next step's */
    step_comm_bytes(r->mesh, evaluation);
  }
  return ST_OK;
}

/* This rank's memory peaks per category since the last reset, made the maximum over all ranks. */
static void peaks_over_ranks(mem_stats *mem) {
  mem_stats_get(mem);
  MPI_Allreduce(MPI_IN_PLACE, mem->peak, MEM_CATEGORY_COUNT, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
}

/* The record's memory, communication and exposed communication become the maximum over all
 * ranks, and its skipped count the number of ranks that skipped the step. Every rank must have run
 * the step at the same loss scale and skipped it or not with all the others: a rank that did not
 * would hold other parameters from here on. */
static st_status over_ranks(step_record *rec, int world_size, mem_stats *mem) {
  peaks_over_ranks(mem);
  MPI_Allreduce(MPI_IN_PLACE, rec->comm_bytes, COMM_OP_COUNT, MPI_UINT64_T, MPI_MAX,
                MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &rec->comm_exposed_ms, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &rec->skipped, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  double scale[2] = {-rec->loss_scale, rec->loss_scale}; /* {-min, max} in one reduction */
  MPI_Allreduce(MPI_IN_PLACE, scale, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  rec->mem = mem;
  if (-scale[0] != scale[1] || (rec->skipped != 0 && rec->skipped != world_size)) {
    return st_error(ST_ERR_INTERNAL,
                    "step %d: the ranks disagree: loss scales from %g to %g, %d of %d skipped",
                    rec->step + 1, -scale[0], scale[1], rec->skipped, world_size);
  }
  return ST_OK;
}

/* Whether a checkpoint is written after `step`: a stop's, the last step's, or --ckpt-every's. */
static int save_due(const train_run *r, int step, int stopping) {
  const train_options *o = r->o;
  const int last = step == train_options_end(o) - 1;
  return o->ckpt_dir && (stopping || last || (o->ckpt_every && (step + 1) % o->ckpt_every == 0));
}

/* Rank 0's metrics line (`rec`), or with rec NULL its lines made durable, under ST_IO_TIMEOUT's
 * limit on a stall: the other ranks wait for its verdict without one. */
static st_status metrics_io(const train_run *r, const step_record *rec) {
  const char *doing = rec ? "write" : "sync";
  char what[PATH_MAX + 32];
  snprintf(what, sizeof what, rec ? "appending to --metrics %s" : "syncing --metrics %s",
           r->o->metrics);
  deadline d;
  ST_CHECK(job_file_deadline_arm(&d, what));
  if (rec) job_file_test_delay();
  errno = 0;
  const int ok = rec ? metrics_write_json(r->metrics, rec) : metrics_sync(r->metrics);
  deadline_disarm(&d);
  if (ok) return ST_OK;
  return st_error(ST_ERR_IO, "--metrics %s: %s failed: %s", r->o->metrics, doing,
                  errno ? strerror(errno) : "an I/O error");
}

/* Writes --ckpt-dir/step_<step + 1> (in the background with --ckpt-async), the metrics lines
 * written so far made durable first: a crash that keeps the checkpoint keeps every line up to
 * it, so a resume from it leaves no gap in the file. */
static st_status save(train_run *r, int step) {
  const train_options *o = r->o;
  ST_CHECK(job_agree(is_writer(r) && r->metrics ? metrics_io(r, NULL) : ST_OK));
  ckpt_manifest m = {.step = step + 1,
                     .tokens = r->tokens_trained,
                     .cfg = r->cfg,
                     .R = r->coords.R,
                     .S = r->coords.S,
                     .T = r->coords.T,
                     .zero = o->zero,
                     .param_dtype = r->model->par.precision.param,
                     .reduce_dtype = r->model->par.precision.reduce,
                     .scaler = r->scaler.state,
                     .micro_batch = o->micro_batch,
                     .h = r->h,
                     .seed = (uint64_t)o->seed};
  snprintf(m.model, sizeof m.model, "%s", o->model);
  token_position at = token_loader_tell(r->train);
  m.dp_size = r->coords.R * r->coords.S;
  m.data = &at; /* every dp rank's: see ckpt_save */
  return ckpt_writer_save(r->ckpt, &m, o->ckpt_dir, o->keep);
}

/* Steps first_step to end - 1, each followed by its metrics and its checkpoint when due; a stop
 * signal any rank caught (stop_request.h) ends the run after the step, with a checkpoint: one
 * that came while a due checkpoint was written ends it there, on that checkpoint. */
static st_status train_steps(train_run *r, int end) {
  mem_stats mem;
  for (int step = r->first_step; step < end; step++) {
    step_record rec;
    ST_CHECK(run_step(r, step, &rec));
    ST_CHECK(over_ranks(&rec, r->coords.world_size, &mem));
    st_status written = ST_OK; /* rank 0's: the others must not wait for it in a collective */
    if (is_writer(r)) {
      run_report_step(&r->report, &rec);
      if (r->metrics) written = metrics_io(r, &rec);
    }
    ST_CHECK(job_agree(written));
    if (r->ckpt) ST_CHECK(ckpt_writer_poll(r->ckpt, 0, step + 1));
    int signo = 0;
    if (step + 1 < end) ST_CHECK(stop_request_agree(&signo));
    const int due = save_due(r, step, signo != 0);
    if (due) ST_CHECK(save(r, step));
    if (due && !signo && step + 1 < end) ST_CHECK(stop_request_agree(&signo));
    if (signo) {
      if (is_writer(r)) run_report_show_last(&r->report);
      r->stopped_by = signo;
      r->stopped_after = step + 1;
      return ST_OK;
    }
  }
  return ST_OK;
}

/* The last checkpoint committed, or NULL. */
static const char *saved_checkpoint(const train_run *r) {
  return r->ckpt && ckpt_writer_saved(r->ckpt)[0] ? ckpt_writer_saved(r->ckpt) : NULL;
}

/* What a stopped run says: where it stopped and how to go on. */
static void report_stop(const train_run *r, int end) {
  if (!is_writer(r)) return;
  const char *signal = stop_request_signal_name(r->stopped_by);
  const char *no_export = r->o->export_path ? "; the export was not written" : "";
  if (saved_checkpoint(r)) {
    st_log(ST_LOG_WARN,
           "stopped by %s after step %d of %d: checkpoint %s; the same command with --resume "
           "goes on from there%s",
           signal, r->stopped_after, end, saved_checkpoint(r), no_export);
  } else {
    st_log(ST_LOG_WARN, "stopped by %s after step %d of %d, without a checkpoint (no --ckpt-dir)%s",
           signal, r->stopped_after, end, no_export);
  }
}

/* After the steps: the save still in the background committed, the export and the summaries,
 * all while a stop signal is still caught (a scheduler's SIGTERM must not end their writes; a
 * second signal still ends the process). A signal that came during the last step or after it
 * stopped nothing: the run finished, which a warning says. */
static st_status finish(train_run *r, int end) {
  if (r->ckpt) ST_CHECK(ckpt_writer_poll(r->ckpt, 1, r->stopped_by ? r->stopped_after : end));
  /* The peak the summary prints includes the save after the last step, which no step's record
   * saw (the planner counts it); not the export, which it does not. */
  mem_stats mem;
  peaks_over_ranks(&mem);
  if (is_writer(r) && r->report.steps_run > 0) run_report_memory(&r->report, &mem);
  /* A run stopped, or ended by --stop-at, before --steps has not finished: the export is the
   * finished model's, written by the run that reaches the last step. */
  const int finished = !r->stopped_by && end == r->o->steps;
  if (r->o->export_path && finished) {
    ST_CHECK(job_agree(gpt_export(r->model, r->o->export_path, is_writer(r))));
  } else if (r->o->export_path && !r->stopped_by && is_writer(r)) {
    st_log(ST_LOG_INFO,
           "--stop-at %d of --steps %d: the export is written by the run that ends at step %d", end,
           r->o->steps, r->o->steps);
  }
  run_report_finish(&r->report, finished ? r->o->export_path : NULL, saved_checkpoint(r));
  if (r->stopped_by) {
    report_stop(r, end);
    return ST_OK;
  }
  int late = 0;
  ST_CHECK(stop_request_agree(&late));
  if (late && is_writer(r)) {
    st_log(ST_LOG_WARN,
           "%s came during the last step or after it: the run finished its %d steps as if it "
           "had not (exit code 0)",
           stop_request_signal_name(late), end);
  }
  return ST_OK;
}

static st_status train(train_run *r) {
  st_status status = setup(r);
  if (status != ST_OK) {
    r->setup_failed = 1;
    return status;
  }
  /* Its path was checked in set-up: a failure to write it (a full disk) is one while running. */
  if (r->o->save_init) ST_CHECK(job_agree(gpt_export(r->model, r->o->save_init, is_writer(r))));
  uint64_t setup_bytes[COMM_OP_COUNT]; /* --save-init's export: not part of step 0 */
  step_comm_bytes(r->mesh, setup_bytes);
  /* The steps' memory, which the planner predicts: set-up's one-off host buffers (the initial
   * values of the largest parameter and their conversion, an import's or a resumed
   * checkpoint's staging, --save-init's export) are freed by now and not counted. */
  mem_reset_peak();
  const int end = train_options_end(r->o);
  if (r->first_step >= end && end > 0 && is_writer(r)) {
    st_log(ST_LOG_INFO, "the checkpoint is at step %d: the %d step%s of this run %s done already",
           r->first_step, end, end == 1 ? "" : "s", end == 1 ? "is" : "are");
  }
  stop_request_install();
  status = train_steps(r, end);
  if (status == ST_OK) status = finish(r, end);
  stop_request_restore();
  return status;
}

int cmd_train(int argc, char **argv) {
  train_options o;
  train_options_defaults(&o);
  cli_flag flags[TRAIN_MAX_FLAGS];
  int nflags = train_options_flags(&o, flags);
  int help = 0;
  st_status status = cli_parse(argc, argv, 2, flags, nflags, &help);
  if (help) {
    cli_print_help(stdout, "shardtrain train [flags]",
                   "Trains a GPT-2 model on llm.c token shards with AdamW on a mesh of\n"
                   "dp_replicate x dp_shard x tp ranks (launch with mpirun or srun), and writes\n"
                   "metrics, evaluations and a Hugging Face GPT-2 safetensors export.",
                   flags, nflags);
    return 0;
  }
  train_run r = {.o = &o, .ckpt_lock = -1};
  /* Values that need no mesh are checked before MPI starts (dp size 1 is a placeholder). */
  if (status == ST_OK) status = train_options_resolve(&o, 1, &r.cfg, &r.h);
  const int start = cli_job_start("train", status, &argc, &argv);
  if (start != CLI_JOB_RUN) return start;
  status = train(&r);
  if (status != ST_OK) st_log(ST_LOG_ERROR, "shardtrain train: %s", st_last_error());
  /* A file named on the command line that is missing or malformed is bad input (2), like a
   * bad flag; running out of memory is not. */
  int code = r.setup_failed && status != ST_ERR_OOM ? 2 : exit_code_for(status);
  /* Stopped by a signal: the shell's code for it (143 for SIGTERM, 138 for SIGUSR1), so a job
   * script sees the run did not finish; its checkpoint is complete. */
  if (status == ST_OK && r.stopped_by) code = 128 + r.stopped_by;
  code = cli_job_end(code);
  teardown(&r);
  st_finalize();
  return code;
}
