/* metrics.h - the per-step record of a training run, written as one JSON object per line
 * (numbers with enough digits to round-trip an fp32, %.9g) for machines; engine/train/run_report.h
 * prints it for people.
 *   {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "step_ms",
 *    "mem": {category: peak bytes}, "comm_bytes": {"all_gather", "reduce_scatter", "all_reduce"},
 *    "mesh": [R, S, T], "zero", "dtypes": {"param", "reduce"}, "val_loss" (eval steps only)}
 * "tokens" counts every token trained on so far, all ranks together; "mem" and "comm_bytes"
 * (bytes sent during the step under ring accounting, over all groups) are maxima over ranks. */
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
  int64_t tokens;
  double tokens_per_s;
  double step_ms;
  const mem_stats *mem;
  uint64_t comm_bytes[COMM_OP_COUNT];
  int zero, R, S, T;
  const char *param_dtype, *reduce_dtype;
  int has_val;
  double val_loss;
} step_record;

/* Writes the record as one JSON line and flushes, so a crash loses at most the current step. */
int metrics_write_json(FILE *out, const step_record *r);

#endif /* ST_ENGINE_TRAIN_METRICS_H */
