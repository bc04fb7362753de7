/* step_mfu.c - the peak a run's MFU divides by, and the MFU (step_mfu.h); the FLOPs per token
 * are gpt_config_flops_per_token's, which the simulator counts too. */
#include "engine/train/step_mfu.h"

#include <math.h>
#include <stdio.h>

#include "core/error.h"
#include "engine/model/gpt.h"
#include "engine/plan/sim_hw.h"

/* The datasheet peak of dev for `compute` from the built-in row its product name matches; 0 with
 * the reason in m->peak_source when there is none. */
static double device_peak(step_mfu *m, const st_device *dev, st_dtype compute) {
  char product[DEVICE_NAME_SIZE] = "";
  if (device_product_name(dev, product) != ST_OK || product[0] == '\0') {
    snprintf(m->peak_source, sizeof m->peak_source,
             "no peak known for the %s device (--peak-tflops gives one)", dev->backend->name);
    st_error_clear();
    return 0;
  }
  sim_hardware hw;
  if (sim_hw_builtin_for_product(product, &hw) != ST_OK) {
    snprintf(m->peak_source, sizeof m->peak_source,
             "no peak known for the GPU '%s' (--peak-tflops gives one)", product);
    st_error_clear();
    return 0;
  }
  const double peak = sim_hw_peak(&hw, (int)dtype_size(compute));
  snprintf(m->peak_source, sizeof m->peak_source, "%s: %s datasheet peak, %s dense", product,
           hw.name, dtype_name(compute));
  return peak;
}

void step_mfu_init(step_mfu *m, const gpt_config *cfg, const st_device *dev, st_dtype param,
                   double peak_tflops, int devices) {
  *m = (step_mfu){.flops_per_token = gpt_config_flops_per_token(cfg, cfg->max_seq),
                  .devices = devices};
  if (peak_tflops > 0) {
    m->peak_flops = peak_tflops * 1e12;
    snprintf(m->peak_source, sizeof m->peak_source, "--peak-tflops");
    return;
  }
  m->peak_flops = device_peak(m, dev, gpt_activation_dtype(dev->backend->kind, param));
}

double step_mfu_of(const step_mfu *m, double tokens_per_s) {
  if (!(m->peak_flops > 0) || !(tokens_per_s > 0) || !isfinite(tokens_per_s)) return NAN;
  return tokens_per_s / m->devices * m->flops_per_token / m->peak_flops;
}
