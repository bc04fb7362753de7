/* metrics.h - the per-step record of a training run, written as one JSON object per line
 * (numbers with enough digits to round-trip an fp32, %.9g) for machines; engine/train/run_report.h
 * prints it for people.
 *   {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_ms", "mfu",
 *    "comm_exposed_ms", "mem": {category: peak bytes},
 *    "comm_bytes": {"all_gather", "reduce_scatter", "all_reduce"},
 *    "mesh": [R, S, T], "zero", "dtypes": {"param", "reduce"}, "loss_scale", "skipped",
 *    "val_loss" (eval steps only)}
 * "tokens" counts every token trained on so far, all ranks together; "mem" and "comm_bytes"
 * (bytes sent during the step under ring accounting, over all groups) are maxima over ranks.
 * "mfu" is a fraction (engine/train/step_mfu.h), null where no peak is known; "comm_exposed_ms"
 * the time the compute stream waited on communication during the step (sharding/
 * comm_exposure.h), the maximum over ranks.
 * "loss_scale" is the scale the step's loss gradient was multiplied by (1 without fp16; every
 * rank's, checked equal), "skipped" the number of ranks that skipped the step for an fp16
 * overflow: 0, or every rank of the world. A skipped step has no "grad_norm" (null). */
#ifndef ST_ENGINE_TRAIN_METRICS_H
#define ST_ENGINE_TRAIN_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "core/alloc.h"
#include "sharding/comm.h"

typedef struct step_record {
  int step;
  double loss;
  double lr;
  double grad_norm;
  double loss_scale;
  int skipped; /* ranks that skipped the step */
  int64_t tokens;
  double tokens_per_s;
  double step_ms;
  double mfu;             /* NaN: no peak known */
  double comm_exposed_ms; /* maximum over ranks */
  const mem_stats *mem;
  uint64_t comm_bytes[COMM_OP_COUNT];
  int zero, R, S, T;
  const char *param_dtype, *reduce_dtype;
  int has_val;
  double val_loss;
} step_record;

/* Writes the record as one JSON line and flushes, so a crash loses at most the current step. */
int metrics_write_json(FILE *out, const step_record *r);

/* Opens `path` for appending records (created if missing; writable is enough); NULL with errno
 * on failure. A regular file whose last line a cut-short write left without its newline gets one
 * first, so the next record starts a line of its own instead of making that line invalid JSON. */
FILE *metrics_open_append(const char *path);

/* Makes every record written so far durable (fsync, where the file is a regular one); 1 on
 * success, 0 with errno. */
int metrics_sync(FILE *out);

#endif /* ST_ENGINE_TRAIN_METRICS_H */
