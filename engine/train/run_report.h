/* run_report.h - what a person sees of a training run on stdout (world rank 0 only, nothing at
 * all with --quiet; warnings and errors go to stderr through core/log.h):
 *   a start-up summary: model and parameter count, mesh and ZeRO stage, dtypes, tokens per
 *     step, optimizer, and the planner's memory per rank by category next to the device's;
 *   the basis of the MFU: FLOPs per token and the peak it divides by, or why there is none;
 *   one line per step (or every --log-every steps, and at evaluations, fp16 skips, the end and
 *     a stop) with its MFU (when a peak is known), the time its compute stream waited on
 *     communication, the time since start-up and an estimate of the time left;
 *   a final summary: tokens trained, mean throughput, best validation loss, peak memory, and
 *     where the export, the metrics and the last checkpoint were written.
 * It reads the run's state and prints; it changes nothing, and the metrics file is metrics.h's.
 *
 * Timing: "tok/s" is the global batch over the training step's own time (forward, backward,
 * optimizer: data loading, evaluation and file writes excluded), as in the metrics. The first
 * step a process runs (step 1, or the first after a resume) is a warm-up (first touch of every
 * buffer, thread pools, on GPUs kernel selection), so the mean throughput and the time-left
 * estimate leave it out once there is a later step. */
#ifndef ST_ENGINE_TRAIN_RUN_REPORT_H
#define ST_ENGINE_TRAIN_RUN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "engine/model/gpt_config.h"
#include "engine/train/metrics.h"
#include "engine/train/step_mfu.h"
#include "engine/train/train_options.h"
#include "engine/train/train_step.h"
#include "shardtrain.h"

typedef struct run_report {
  FILE *out; /* stdout on the printing rank; NULL on the others and with --quiet */
  int total_steps;
  int log_every;    /* --log-every: which steps get a line */
  step_record last; /* the last step reported (its mem left unread) */
  double last_elapsed_s, last_left_s;
  int last_shown;      /* its line was printed */
  int64_t step_tokens; /* the global batch */
  double start_ms;     /* when run_report_start ran */
  double warm_ms;      /* when the first step was reported: the time-left origin */
  int first_step;      /* of this process (a resumed run starts past 0); from 0 */
  int steps_run;
  double first_step_ms; /* the warm-up's step time: the throughput of a one-step run */
  double timed_ms;      /* step time of the steps after the warm-up */
  int has_val;
  double best_val;
  int best_val_step;        /* counted from 0, like the metrics */
  uint64_t predicted_bytes; /* the planner's peak per rank, every category (0: unknown) */
  uint64_t peak_bytes;      /* measured: category peaks summed, maximum over ranks */
  int scaled;               /* the run scales its loss (fp16), at a scale of 1 too */
  int skipped_steps;        /* steps skipped for an fp16 overflow */
  double last_scale;        /* the loss scale of the last step reported */
  const step_mfu *mfu;      /* the MFU's basis (not owned) */
  int warned_mfu;           /* an MFU above 100% was warned about */
  const char *metrics_path;
} run_report;

/* Starts the report once the mesh exists and before the model is built (so that a run that
 * runs out of memory has already shown what it expected), and prints the start-up summary.
 * Collective over MPI_COMM_WORLD (it counts the ranks that share this device); warns on stderr
 * when the ranks sharing a device are predicted to need more memory than it has available.
 * A prediction or device query that fails is shown as unknown, never fails the run. */
st_status run_report_start(run_report *rep, const train_options *o, const gpt_config *cfg,
                           const train_hparams *h, const st_mesh *mesh, const step_mfu *mfu);

/* A finished step on the printing rank (the record after max_over_ranks): prints its line and
 * accumulates the totals. An MFU above 100% (a peak set too low, or a device the table
 * misnames) is printed as it is, with one warning per run naming the peak. */
void run_report_step(run_report *rep, const step_record *rec);

/* Memory peaks per category (maximum over ranks) since the first step: the run's measured peak
 * becomes their sum where that is higher (run_report_step does this with each step's). */
/* Prints the last reported step's line where --log-every left it out: a run stopped by a signal
 * ends on the line of the step it stopped after. */
void run_report_show_last(run_report *rep);

void run_report_memory(run_report *rep, const mem_stats *mem);

/* Prints the final summary after the last step and the export. export_path, checkpoint_path:
 * the export and the last checkpoint written, or NULL where the run wrote none. */
void run_report_finish(const run_report *rep, const char *export_path, const char *checkpoint_path);

#endif /* ST_ENGINE_TRAIN_RUN_REPORT_H */
