/* sim_report.h - what `shardtrain simulate` and `shardtrain plan --fit` share: the model and
 * cluster flags and their resolution into a config and a hardware description, the run
 * description (mesh, stage, batch, precision) as `shardtrain train` flags, the printed
 * breakdown of a simulated step and its CSV row. Prints; decides nothing. */
#ifndef ST_ENGINE_PLAN_SIM_REPORT_H
#define ST_ENGINE_PLAN_SIM_REPORT_H

#include <stdio.h>

#include "engine/flags/cli_flags.h"
#include "engine/plan/planner.h"
#include "engine/plan/sim_hw.h"
#include "engine/plan/sim_schedule.h"

typedef struct sim_model_flags {
  const char *model;
  int n_layer, n_head, n_embd, vocab, seq_len; /* 0: the named model's */
} sim_model_flags;

typedef struct sim_cluster_flags {
  const char *gpu;      /* built-in name, or NULL */
  const char *hardware; /* file, or NULL */
  int gpus_per_node;    /* 0: the hardware's */
} sim_cluster_flags;

/* Appends the flags of both structs to `flags` (from index *n), updating *n. */
void sim_flags_add(sim_model_flags *m, sim_cluster_flags *c, cli_flag *flags, int *n);

/* The model of the flags, checked for tp. */
st_status sim_model_resolve(const sim_model_flags *m, int tp, gpt_config *out);

/* The hardware of --gpu or --hardware (exactly one), with --gpus-per-node applied. */
st_status sim_cluster_resolve(const sim_cluster_flags *c, sim_hardware *out);

/* Sets what the hardware decides in a plan input: the kind of device whose kernels the step
 * runs (the CPU's, or CUDA's for fused hardware: they size the activations, the attention
 * state and the kernels' workspace), whether it keeps fp32 compute copies of buffers in dtypes
 * its kernels do not compute in, and whether its memory is host RAM (the CPU). */
void sim_device_fields(const sim_hardware *hw, plan_input *in);

/* The planner's memory for `in` (sim_device_fields applied; mp->total: all of it, host memory
 * of an offloaded optimizer included; fit_need says what the device must hold). */
st_status sim_memory(const sim_hardware *hw, const plan_input *in, memory_plan *mp);

/* `--zero 3 --dp-replicate 2 ...`: the train flags that run `in` (model flags apart). */
void sim_train_flags(const plan_input *in, char *out, size_t size);

/* The step's breakdown, memory and throughput, as lines of text. */
void sim_print(FILE *out, const sim_hardware *hw, const sim_result *r, const memory_plan *mp);

/* CSV: the header line, and one row (label: a name for the configuration); text fields are
 * quoted as RFC 4180 asks where they hold a comma, a quote or a line break. */
void sim_csv_header(FILE *out);
void sim_csv_row(FILE *out, const char *label, const char *model, const sim_hardware *hw,
                 const plan_input *in, const sim_result *r, double mem_total);

#endif /* ST_ENGINE_PLAN_SIM_REPORT_H */
