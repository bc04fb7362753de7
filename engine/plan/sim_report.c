/* sim_report.c - shared flags, resolution and printing of the simulator's commands (see
 * sim_report.h). */
#include "engine/plan/sim_report.h"

#include <string.h>

#include "core/error.h"
#include "engine/model/gpt.h"

void sim_flags_add(sim_model_flags *m, sim_cluster_flags *c, cli_flag *flags, int *n) {
  const cli_flag table[] = {
      {"model", FLAG_STRING, &m->model, "named config: tiny, d6, d12, d24, d36, d48"},
      {"n-layer", FLAG_INT, &m->n_layer, "override: transformer blocks (0: the model's)"},
      {"n-head", FLAG_INT, &m->n_head, "override: attention heads (0: the model's)"},
      {"n-embd", FLAG_INT, &m->n_embd, "override: embedding width (0: the model's)"},
      {"vocab", FLAG_INT, &m->vocab, "override: vocabulary size (0: the model's)"},
      {"seq-len", FLAG_INT, &m->seq_len, "tokens per sequence (0: the model's)"},
      {"gpu", FLAG_STRING, &c->gpu, "built-in hardware: h100, h200 or a100 (uncalibrated)"},
      {"hardware", FLAG_STRING, &c->hardware,
       "hardware file (key = value: peaks, links, efficiencies; docs/SIMULATOR.md)"},
      {"gpus-per-node", FLAG_INT, &c->gpus_per_node, "devices per node (0: the hardware's)"},
  };
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) flags[(*n)++] = table[i];
}

st_status sim_model_resolve(const sim_model_flags *m, int tp, gpt_config *out) {
  ST_CHECK(gpt_config_named(m->model, out));
  const struct {
    const char *flag;
    int value;
    int *field;
  } overrides[] = {{"n-layer", m->n_layer, &out->n_layer},
                   {"n-head", m->n_head, &out->n_head},
                   {"n-embd", m->n_embd, &out->n_embd},
                   {"vocab", m->vocab, &out->vocab},
                   {"seq-len", m->seq_len, &out->max_seq}};
  for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++) {
    if (overrides[i].value < 0) {
      return st_error(ST_ERR_INVALID_ARG, "--%s must be >= 0, got %d", overrides[i].flag,
                      overrides[i].value);
    }
    if (overrides[i].value) *overrides[i].field = overrides[i].value;
  }
  if (tp < 1) return st_error(ST_ERR_INVALID_ARG, "--tp must be >= 1, got %d", tp);
  return gpt_config_finish(out, tp);
}

st_status sim_cluster_resolve(const sim_cluster_flags *c, sim_hardware *out) {
  if ((c->gpu == NULL) == (c->hardware == NULL)) {
    return st_error(ST_ERR_INVALID_ARG, "give one of --gpu NAME or --hardware FILE");
  }
  ST_CHECK(c->gpu ? sim_hw_builtin(c->gpu, out) : sim_hw_load(c->hardware, out));
  if (c->gpus_per_node < 0 || c->gpus_per_node > PLAN_MAX_RANKS) {
    return st_error(ST_ERR_INVALID_ARG, "--gpus-per-node %d is out of range (1 to %d)",
                    c->gpus_per_node, PLAN_MAX_RANKS);
  }
  if (c->gpus_per_node) out->gpus_per_node = c->gpus_per_node;
  return ST_OK;
}

void sim_device_fields(const sim_hardware *hw, plan_input *in) {
  in->device = hw->kernels == SIM_KERNELS_CPU ? ST_DEVICE_CPU : ST_DEVICE_CUDA;
  in->device_is_host = in->device == ST_DEVICE_CPU;
  in->compute_copies = plan_compute_copies(in->device, in->precision);
}

st_status sim_memory(const sim_hardware *hw, const plan_input *in, memory_plan *mp) {
  plan_input p = *in;
  sim_device_fields(hw, &p);
  return plan_memory(&p, mp);
}

void sim_train_flags(const plan_input *in, char *out, size_t size) {
  snprintf(out, size,
           "--zero %d --dp-replicate %d --dp-shard %d --tp %d --micro-batch %d --grad-accum %d "
           "--prefetch %d --reshard-after-forward=%s --param-dtype %s --reduce-dtype %s "
           "--offload %s --recompute %s",
           in->stage, in->R, in->S, in->T, in->micro_batch, in->grad_accum, in->prefetch,
           in->reshard_after_forward ? "true" : "false", dtype_name(in->precision.param),
           dtype_name(in->precision.reduce), in->offload_optimizer ? "optimizer" : "none",
           gpt_recompute_name(in->recompute));
}

static double gib(double bytes) { return bytes / 1073741824.0; }

void sim_print(FILE *out, const sim_hardware *hw, const sim_result *r, const memory_plan *mp) {
  const double ms = 1e3;
  fprintf(out, "  step time      %10.2f ms\n", r->step_s * ms);
  fprintf(out, "  compute        %10.2f ms", r->compute_s * ms);
  if (r->slowdown > 1)
    fprintf(out, " (x%.2f: ranks share %d compute slots)", r->slowdown, hw->compute_slots);
  fprintf(out, "\n   ");
  for (int c = 0; c < SIM_CLASS_COUNT; c++) {
    if (r->class_s[c] > 0) {
      fprintf(out, " %s %.2f", sim_op_class_name((sim_op_class)c), r->class_s[c] * ms);
    }
  }
  fprintf(out, "\n  exposed comm   %10.2f ms\n", r->exposed_s * ms);
  fprintf(out, "  optimizer      %10.2f ms (norm, AdamW, publish)\n", r->optimizer_s * ms);
  fprintf(out, "  comm time     ");
  for (int k = 0; k < SIM_COMM_COUNT; k++) {
    fprintf(out, " %s %.2f", sim_comm_kind_name((sim_comm_kind)k), r->comm_s[k] * ms);
  }
  fprintf(out, " ms\n");
  fprintf(out, "  tokens/s       %10.0f (%.0f per GPU)\n", r->tokens_per_s,
          r->tokens_per_s_per_gpu);
  fprintf(out, "  MFU            %10.1f %%\n", 100 * r->mfu);
  fprintf(out,
          "  memory per rank %9.3f GiB (params %.3f, grads %.3f, optimizer %.3f, gathered "
          "%.3f, activations %.3f, workspace %.3f)",
          gib((double)mp->total), gib((double)mp->bytes[MEM_PARAMS]),
          gib((double)mp->bytes[MEM_GRADS]), gib((double)mp->bytes[MEM_OPTIMIZER]),
          gib((double)mp->bytes[MEM_GATHERED]), gib((double)mp->bytes[MEM_ACTIVATIONS]),
          gib((double)mp->bytes[MEM_WORKSPACE]));
  if (mp->host_bytes > 0 && hw->kernels != SIM_KERNELS_CPU) {
    fprintf(out, "; on the device %.3f, on the host %.3f", gib((double)mp->device_bytes),
            gib((double)mp->host_bytes));
  }
  const uint64_t need = hw->kernels == SIM_KERNELS_CPU ? mp->total : mp->device_bytes;
  if (hw->memory_gib > 0) {
    fprintf(out, " of %.1f: %s", hw->memory_gib,
            gib((double)need) <= hw->memory_gib ? "fits" : "does not fit");
  }
  fprintf(out, "\n");
}

void sim_csv_header(FILE *out) {
  fprintf(out,
          "label,model,hardware,gpus,gpus_per_node,R,S,T,zero,micro_batch,seq_len,grad_accum,"
          "prefetch,reshard,param_dtype,reduce_dtype,offload,recompute,step_s,compute_s,exposed_s,"
          "optimizer_s");
  for (int k = 0; k < SIM_COMM_COUNT; k++) {
    fprintf(out, ",comm_%s_s", sim_comm_kind_name((sim_comm_kind)k));
  }
  fprintf(out, ",tokens_per_s,tokens_per_s_per_gpu,mfu,mem_gib\n");
}

/* A text field, quoted as RFC 4180 asks where it holds a comma, a quote or a line break (a
 * --label, a hardware file's name are free text). */
static void csv_text(FILE *out, const char *text) {
  if (!strpbrk(text, ",\"\r\n")) {
    fputs(text, out);
    return;
  }
  fputc('"', out);
  for (const char *c = text; *c; c++) {
    if (*c == '"') fputc('"', out);
    fputc(*c, out);
  }
  fputc('"', out);
}

void sim_csv_row(FILE *out, const char *label, const char *model, const sim_hardware *hw,
                 const plan_input *in, const sim_result *r, double mem_total) {
  csv_text(out, label);
  fputc(',', out);
  csv_text(out, model);
  fputc(',', out);
  csv_text(out, hw->name);
  fprintf(out, ",%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s,%s,%s,%s,%.9g,%.9g,%.9g,%.9g", r->world,
          hw->gpus_per_node, in->R, in->S, in->T, in->stage, in->micro_batch, in->seq_len,
          in->grad_accum, in->prefetch, in->reshard_after_forward, dtype_name(in->precision.param),
          dtype_name(in->precision.reduce), in->offload_optimizer ? "optimizer" : "none",
          gpt_recompute_name(in->recompute), r->step_s, r->compute_s, r->exposed_s, r->optimizer_s);
  for (int k = 0; k < SIM_COMM_COUNT; k++) fprintf(out, ",%.9g", r->comm_s[k]);
  fprintf(out, ",%.9g,%.9g,%.9g,%.6g\n", r->tokens_per_s, r->tokens_per_s_per_gpu, r->mfu,
          gib(mem_total));
}
