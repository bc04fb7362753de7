/* metrics.c - JSON and human-readable step records. */
#include "engine/metrics.h"

int metrics_write_json(FILE *out, const step_record *r) {
  fprintf(out,
          "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %lld, "
          "\"tokens_per_s\": %.9g, \"step_ms\": %.9g, \"mem\": {",
          r->step, r->loss, r->lr, r->grad_norm, (long long)r->tokens, r->tokens_per_s,
          r->step_ms);
  for (int c = 0; c < MEM_CATEGORY_COUNT; c++) {
    fprintf(out, "%s\"%s\": %llu", c ? ", " : "", mem_category_name((mem_category)c),
            (unsigned long long)r->mem->peak[c]);
  }
  fprintf(out, "}, \"comm_bytes\": {\"all_gather\": %llu, \"reduce_scatter\": %llu, "
          "\"all_reduce\": %llu}, \"mesh\": [%d, %d, %d], \"zero\": %d",
          (unsigned long long)r->comm_bytes[COMM_ALL_GATHER],
          (unsigned long long)r->comm_bytes[COMM_REDUCE_SCATTER],
          (unsigned long long)r->comm_bytes[COMM_ALL_REDUCE], r->R, r->S, r->T, r->zero);
  if (r->has_val) fprintf(out, ", \"val_loss\": %.9g", r->val_loss);
  fputs("}\n", out);
  return fflush(out) == 0 && !ferror(out);
}

void metrics_print_line(FILE *out, const step_record *r, int total_steps) {
  fprintf(out, "step %5d/%d | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %.0f tok/s", r->step + 1,
          total_steps, r->loss, r->lr, r->grad_norm, r->step_ms, r->tokens_per_s);
  if (r->has_val) fprintf(out, " | val %.6f", r->val_loss);
  fputc('\n', out);
  fflush(out);
}
