/* run_report.c - the start-up summary, the step lines' timing and the final summary of
 * `shardtrain train`. */
#include "engine/train/run_report.h"

#include <math.h>
#include <string.h>
#include <time.h>

#include "core/device.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/plan/fit.h"
#include "engine/plan/planner.h"
#include "engine/train/train_fit.h"
#include "sharding/mesh.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

typedef struct text {
  char s[32];
} text;

/* Memory as people compare it with a device's: "18.4 MiB", in fit_format_bytes's format, the one
 * every memory figure of a run prints in. */
static text bytes_text(uint64_t bytes) {
  text t;
  fit_format_bytes(bytes, t.s, sizeof t.s);
  return t;
}

/* Seconds as "12.3s" below a minute, then m:ss, then h:mm:ss from an hour on. */
static text duration_text(double seconds) {
  text t;
  if (seconds < 59.95) {
    snprintf(t.s, sizeof t.s, "%.1fs", seconds > 0 ? seconds : 0.0);
    return t;
  }
  long s = (long)(seconds + 0.5);
  if (s >= 3600) {
    snprintf(t.s, sizeof t.s, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    snprintf(t.s, sizeof t.s, "%ld:%02ld", s / 60, s % 60);
  }
  return t;
}

/* 124439808 -> "124.4 M". */
static text count_text(double n) {
  text t;
  if (n >= 1e9) {
    snprintf(t.s, sizeof t.s, "%.2f B", n / 1e9);
  } else if (n >= 1e6) {
    snprintf(t.s, sizeof t.s, "%.1f M", n / 1e6);
  } else {
    snprintf(t.s, sizeof t.s, "%.2f M", n / 1e6);
  }
  return t;
}

/* "step 12/400 | loss 3.2 | lr 3.0e-03 | norm 0.52 | 24.1 ms | 42000 tok/s | MFU 41.2% |
 * exposed comm 1.3 ms | 0:12 elapsed | ETA 2:30 | val 3.3": the step counted from 1; no MFU
 * where no peak is known. With loss scaling (fp16, `scaled`) the scale follows, 1 included, and
 * a skipped step says so (its norm is nan). */
static void print_step(FILE *out, const step_record *r, int scaled, int total_steps,
                       double elapsed_s, double left_s) {
  fprintf(out, "step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s", r->step + 1,
          total_steps, r->loss, r->lr, r->grad_norm, r->step_ms, r->tokens_per_s);
  if (isfinite(r->mfu)) fprintf(out, " | MFU %.1f%%", 100 * r->mfu);
  fprintf(out, " | exposed comm %.1f ms | %s elapsed | ETA %s", r->comm_exposed_ms,
          duration_text(elapsed_s).s, duration_text(left_s).s);
  if (r->has_val) fprintf(out, " | val %.6f", r->val_loss);
  if (scaled) fprintf(out, " | scale %g", r->loss_scale);
  if (r->skipped) fprintf(out, " | skipped: fp16 overflow");
  fputc('\n', out);
  fflush(out);
}

static void print_model(FILE *out, const train_options *o, const gpt_config *cfg) {
  /* The padding rows of wte are never trained and are not exported: not counted. */
  const int64_t params = gpt_config_trained_params(cfg);
  fprintf(out,
          "shardtrain train: model %s, %lld parameters (%s): %d layers, %d heads, width %d, "
          "vocab %d, %d positions\n",
          o->model, (long long)params, count_text((double)params).s, cfg->n_layer, cfg->n_head,
          cfg->n_embd, cfg->vocab, cfg->max_seq);
}

/* The run's loss scaler as it starts (checked by train_options_resolve before). */
static loss_scaler run_scaler(const train_options *o) {
  unit_precision p = {ST_FP32, ST_FP32};
  loss_scaler scaler;
  loss_scaler_init_none(&scaler);
  if (train_options_precision(o, &p) == ST_OK) (void)train_options_loss_scaler(o, p, &scaler);
  return scaler;
}

static void print_run(FILE *out, const train_options *o, const gpt_config *cfg,
                      const train_hparams *h, const st_mesh *mesh, const st_mesh_coords *c) {
  unit_precision p = {ST_FP32, ST_FP32};
  (void)train_options_precision(o, &p); /* already checked by train_options_resolve */
  fprintf(out,
          "  mesh R x S x T = %d x %d x %d (%d rank%s), ZeRO stage %d, device %s, collectives %s, "
          "dtypes param %s / reduce %s",
          c->R, c->S, c->T, c->world_size, c->world_size == 1 ? "" : "s", o->zero,
          st_mesh_device_name(mesh), st_mesh_backend_name(mesh), dtype_name(p.param),
          dtype_name(p.reduce));
  const loss_scaler scaler = run_scaler(o);
  if (scaler.mode == LOSS_SCALER_DYNAMIC) {
    /* A resumed fp16 checkpoint's scale is only known once it is read ("resumed from" says). */
    fprintf(out, ", loss scale dynamic from %g%s (doubled every %d clean step%s)",
            scaler.state.scale, o->resume || o->resume_from ? " or a resumed checkpoint's" : "",
            scaler.window, scaler.window == 1 ? "" : "s");
  } else if (scaler.mode == LOSS_SCALER_FIXED) {
    fprintf(out, ", loss scale fixed at %g", scaler.state.scale);
  }
  gpt_recompute recompute = GPT_RECOMPUTE_NONE;
  (void)train_options_recompute(o, &recompute); /* checked by train_options_resolve too */
  if (recompute != GPT_RECOMPUTE_NONE)
    fprintf(out, ", recompute %s", gpt_recompute_name(recompute));
  fputc('\n', out);
  fprintf(
      out,
      "  batch %lld tokens per step = micro-batch %d x %d tokens x %d dp rank%s x grad-accum %d; "
      "%d step%s = %lld tokens\n",
      (long long)h->global_tokens, o->micro_batch, cfg->max_seq, c->R * c->S,
      c->R * c->S == 1 ? "" : "s", o->grad_accum, o->steps, o->steps == 1 ? "" : "s",
      (long long)h->global_tokens * o->steps);
  const lr_schedule *s = &h->schedule;
  char shape[128];
  lr_schedule_describe(s, shape, sizeof shape);
  fprintf(out, "  AdamW: lr %g (%s), beta1 %g, beta2 %g, eps %g, weight decay %g, clip %g\n", s->lr,
          shape, (double)h->adam.beta1, (double)h->adam.beta2, (double)h->adam.eps,
          (double)h->weight_decay, (double)h->clip);
}

/* What the step lines' MFU divides by, or why they have none. */
static void print_mfu(FILE *out, const step_mfu *m) {
  if (m->peak_flops > 0) {
    fprintf(out, "  MFU: %.0f FLOPs per token (6N + 6LCT) against %g TFLOP/s per device (%s)\n",
            m->flops_per_token, m->peak_flops / 1e12, m->peak_source);
  } else {
    fprintf(out, "  MFU: not reported: %s\n", m->peak_source);
  }
}

/* The planner's prediction for this run; 0 when it cannot say (the message is printed). */
static uint64_t print_prediction(FILE *out, const train_options *o, const gpt_config *cfg,
                                 const st_mesh *mesh) {
  plan_input in;
  memory_plan mp;
  if (train_fit_plan_input(o, cfg, mesh, &in) != ST_OK || plan_memory(&in, &mp) != ST_OK) {
    if (out) fprintf(out, "  memory per rank: no prediction (%s)\n", st_last_error());
    st_error_clear();
    return 0;
  }
  if (out) {
    fprintf(out, "  memory per rank, predicted:");
    for (int k = 0; k < MEM_CATEGORY_COUNT; k++) {
      if (mp.bytes[k]) {
        fprintf(out, " %s %s,", mem_category_name((mem_category)k), bytes_text(mp.bytes[k]).s);
      }
    }
    fprintf(out, " total %s\n", bytes_text(mp.total).s);
  }
  return mp.total;
}

/* The device's memory next to the prediction for the ranks that share it; a warning on stderr
 * when they will not fit. */
static void print_device_memory(FILE *out, const st_device *dev, uint64_t predicted, int sharing,
                                int warn) {
  device_memory m;
  if (device_memory_info(dev, &m) != ST_OK) {
    if (out) fprintf(out, "  %s memory: unknown (%s)\n", dev->backend->name, st_last_error());
    st_error_clear();
    return;
  }
  const uint64_t needed = predicted * (uint64_t)sharing;
  if (out) {
    fprintf(out, "  %s memory: %s available of %s", dev->backend->name, bytes_text(m.available).s,
            bytes_text(m.total).s);
    if (sharing > 1) fprintf(out, ", shared by %d ranks on this host", sharing);
    if (predicted) {
      fprintf(out, "; predicted use %s: %s\n", bytes_text(needed).s,
              needed <= m.available ? "fits" : "does NOT fit");
    } else {
      fputc('\n', out);
    }
  }
  if (warn && predicted && needed > m.available) {
    char who[64] = "this rank is";
    if (sharing > 1) snprintf(who, sizeof who, "the %d ranks sharing it are", sharing);
    st_log(ST_LOG_WARN,
           "%s memory: %s available, %s predicted to need %s: expect to run out of memory",
           dev->backend->name, bytes_text(m.available).s, who, bytes_text(needed).s);
  }
}

st_status run_report_start(run_report *rep, const train_options *o, const gpt_config *cfg,
                           const train_hparams *h, const st_mesh *mesh, const step_mfu *mfu) {
  st_mesh_coords c;
  ST_CHECK(st_mesh_get_coords(mesh, &c));
  const int writer = c.world_rank == 0;
  *rep = (run_report){.out = writer && !o->quiet ? stdout : NULL,
                      .total_steps = train_options_end(o),
                      .log_every = o->log_every,
                      .step_tokens = h->global_tokens,
                      .start_ms = now_ms(),
                      .metrics_path = o->metrics,
                      .mfu = mfu,
                      .scaled = run_scaler(o).mode != LOSS_SCALER_NONE};
  int sharing = 1;
  ST_CHECK(train_fit_ranks_sharing(mesh_device(mesh), &sharing));
  if (!writer) return ST_OK;
  if (rep->out) {
    print_model(rep->out, o, cfg);
    print_run(rep->out, o, cfg, h, mesh, &c);
    print_mfu(rep->out, mfu);
  }
  rep->predicted_bytes = print_prediction(rep->out, o, cfg, mesh);
  print_device_memory(rep->out, mesh_device(mesh), rep->predicted_bytes, sharing, writer);
  if (rep->out) fflush(rep->out);
  return ST_OK;
}

void run_report_step(run_report *rep, const step_record *rec) {
  const double now = now_ms();
  if (rep->steps_run++ == 0) {
    rep->warm_ms = now;
    rep->first_step = rec->step;
    rep->first_step_ms = rec->step_ms;
  } else {
    rep->timed_ms += rec->step_ms;
  }
  rep->skipped_steps += rec->skipped != 0;
  rep->last_scale = rec->loss_scale;
  if (rec->has_val && (!rep->has_val || rec->val_loss < rep->best_val)) {
    rep->has_val = 1;
    rep->best_val = rec->val_loss;
    rep->best_val_step = rec->step;
  }
  if (rec->mfu > 1 && !rep->warned_mfu) {
    rep->warned_mfu = 1;
    st_log(ST_LOG_WARN,
           "MFU %.1f%% at step %d is above 100%%: the peak it divides by, %g TFLOP/s per device "
           "(%s), is too low for this device",
           100 * rec->mfu, rec->step + 1, rep->mfu->peak_flops / 1e12, rep->mfu->peak_source);
  }
  if (rec->mem) run_report_memory(rep, rec->mem);
  /* Time left: the wall-clock pace of the steps after the warm-up (evaluations and file
   * writes included); after the warm-up alone, its step time. */
  const int left = rep->total_steps - rec->step - 1, timed = rep->steps_run - 1;
  const double pace_ms = timed ? (now - rep->warm_ms) / timed : rep->first_step_ms;
  rep->last = *rec;
  rep->last.mem = NULL;
  rep->last_elapsed_s = (now - rep->start_ms) / 1e3;
  rep->last_left_s = left * pace_ms / 1e3;
  rep->last_shown = 0;
  const int logged = (rec->step + 1) % rep->log_every == 0 || rec->has_val || rec->skipped ||
                     rec->step == rep->total_steps - 1;
  if (logged) run_report_show_last(rep);
}

void run_report_show_last(run_report *rep) {
  if (!rep->out || rep->last_shown || rep->steps_run == 0) return;
  rep->last_shown = 1;
  print_step(rep->out, &rep->last, rep->scaled, rep->total_steps, rep->last_elapsed_s,
             rep->last_left_s);
}

void run_report_memory(run_report *rep, const mem_stats *mem) {
  uint64_t sum = 0;
  for (int k = 0; k < MEM_CATEGORY_COUNT; k++) sum += mem->peak[k];
  if (sum > rep->peak_bytes) rep->peak_bytes = sum;
}

void run_report_finish(const run_report *rep, const char *export_path,
                       const char *checkpoint_path) {
  FILE *out = rep->out;
  if (!out) return;
  const int64_t tokens = rep->step_tokens * rep->steps_run;
  fprintf(out, "done: %d step%s", rep->steps_run, rep->steps_run == 1 ? "" : "s");
  if (rep->steps_run) fprintf(out, " (%d-%d)", rep->first_step + 1, rep->last.step + 1);
  fprintf(out, ", %lld tokens in %s", (long long)tokens,
          duration_text((now_ms() - rep->start_ms) / 1e3).s);
  if (rep->steps_run > 1) {
    fprintf(out, "; %.0f tok/s mean over steps %d-%d (step %d, the warm-up, left out)\n",
            (double)(tokens - rep->step_tokens) / (rep->timed_ms / 1e3), rep->first_step + 2,
            rep->last.step + 1, rep->first_step + 1);
  } else if (rep->steps_run == 1) {
    fprintf(out, "; %.0f tok/s (one step, warm-up included)\n",
            (double)tokens / (rep->first_step_ms / 1e3));
  } else {
    fputc('\n', out);
  }
  if (rep->scaled) {
    fprintf(out, "fp16 loss scaling: %d step%s of this run skipped for overflow, last scale %g\n",
            rep->skipped_steps, rep->skipped_steps == 1 ? "" : "s", rep->last_scale);
  }
  if (rep->has_val) {
    fprintf(out, "best val loss %.6f at step %d/%d\n", rep->best_val, rep->best_val_step + 1,
            rep->total_steps);
  }
  if (rep->peak_bytes) {
    fprintf(out, "peak memory per rank %s", bytes_text(rep->peak_bytes).s);
    if (rep->predicted_bytes) fprintf(out, " (predicted %s)", bytes_text(rep->predicted_bytes).s);
    fputc('\n', out);
  }
  if (export_path) fprintf(out, "export: %s\n", export_path);
  if (rep->metrics_path) fprintf(out, "metrics: %s\n", rep->metrics_path);
  if (checkpoint_path) fprintf(out, "checkpoint: %s\n", checkpoint_path);
  fflush(out);
}
