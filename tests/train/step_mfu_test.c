/* step_mfu_test.c - the MFU's parts against numbers computed by hand (engine/train/step_mfu.h):
 *   - FLOPs per token 6N + 6LCT (gpt_config_flops_per_token, which the simulator counts too):
 *     tiny (N = 120576, L 2, C 64, T 64) 772608; d12 (N =
 *     124439808, GPT-2 124M without the vocabulary's padding, L 12, C 768, T 1024) 803261952;
 *   - GPUs by the name their driver gives: an H100 SXM and an H200 989 TFLOP/s in bf16 and 67
 *     in fp32, an A100 312 and 19.5; an H100 PCIe or NVL, or an unknown GPU: none;
 *   - the peak by device: --peak-tflops wins; a GPU's in the dtype its kernels compute in; the
 *     CPU has none, and then no MFU (NaN), never a made-up one;
 *   - MFU = tokens/s / devices x FLOPs per token / peak. */
#include "engine/train/step_mfu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/plan/sim_hw.h"
#include "tests/testing.h"

static void test_flops_per_token(void) {
  gpt_config tiny, d12;
  CHECK_OK(gpt_config_named("tiny", &tiny));
  CHECK_OK(gpt_config_finish(&tiny, 1));
  CHECK_OK(gpt_config_named("d12", &d12));
  CHECK_OK(gpt_config_finish(&d12, 1));
  CHECK(gpt_config_trained_params(&tiny) == 120576);
  CHECK(gpt_config_trained_params(&d12) == 124439808);
  CHECK(gpt_config_flops_per_token(&tiny, tiny.max_seq) == 772608.0);
  CHECK(gpt_config_flops_per_token(&d12, d12.max_seq) == 803261952.0);
  step_mfu m;
  const st_device cpu = device_cpu();
  step_mfu_init(&m, &d12, &cpu, ST_FP32, 1, 1);
  CHECK(m.flops_per_token == 803261952.0);
}

static void test_products(void) {
  const struct {
    const char *product;
    double bf16, fp32; /* TFLOP/s; 0: no row */
  } cases[] = {{"NVIDIA H100 80GB HBM3", 989, 67},
               {"NVIDIA H200", 989, 67},
               {"NVIDIA A100-SXM4-80GB", 312, 19.5},
               {"NVIDIA A100 80GB PCIe", 312, 19.5},
               {"NVIDIA H100 PCIe", 0, 0},
               {"NVIDIA H100 NVL", 0, 0},
               {"NVIDIA H200 NVL", 0, 0},
               {"NVIDIA GeForce RTX 4090", 0, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sim_hardware hw;
    const st_status status = sim_hw_builtin_for_product(cases[i].product, &hw);
    if (cases[i].bf16 == 0) {
      CHECK_MSG(status == ST_ERR_INVALID_ARG && strstr(st_last_error(), cases[i].product),
                "%s: a row where none applies (%s)", cases[i].product, st_last_error());
      continue;
    }
    if (!CHECK_MSG(status == ST_OK, "%s: %s", cases[i].product, st_last_error())) continue;
    CHECK_MSG(
        sim_hw_peak(&hw, 2) == cases[i].bf16 * 1e12 && sim_hw_peak(&hw, 4) == cases[i].fp32 * 1e12,
        "%s: %g and %g FLOP/s", cases[i].product, sim_hw_peak(&hw, 2), sim_hw_peak(&hw, 4));
  }
}

static st_status h100_name(int ordinal, char *out, size_t size) {
  (void)ordinal;
  snprintf(out, size, "NVIDIA H100 80GB HBM3");
  return ST_OK;
}

static void test_peaks_and_mfu(void) {
  gpt_config tiny;
  CHECK_OK(gpt_config_named("tiny", &tiny));
  CHECK_OK(gpt_config_finish(&tiny, 1));
  const st_device cpu = device_cpu();
  step_mfu m;

  step_mfu_init(&m, &tiny, &cpu, ST_BF16, 0, 4);
  CHECK(m.peak_flops == 0);
  CHECK(isnan(step_mfu_of(&m, 1e6)));
  CHECK_MSG(strstr(m.peak_source, "cpu") != NULL, "why: %s", m.peak_source);

  step_mfu_init(&m, &tiny, &cpu, ST_FP32, 2.5, 4);
  CHECK(m.peak_flops == 2.5e12);
  /* 1e6 tok/s over 4 devices x 772608 FLOPs / 2.5e12 FLOP/s */
  CHECK(fabs(step_mfu_of(&m, 1e6) - 0.0772608) < 1e-15);
  CHECK(isnan(step_mfu_of(&m, 0)) && isnan(step_mfu_of(&m, INFINITY)));

  /* A GPU's peak in the dtype its kernels compute in: bf16, in every build. */
  const device_backend gpu = {.name = "gpu", .kind = ST_DEVICE_CUDA, .product_name = h100_name};
  const st_device h100 = {.backend = &gpu, .ordinal = 0};
  step_mfu_init(&m, &tiny, &h100, ST_BF16, 0, 8);
  CHECK_MSG(m.peak_flops == 989e12, "H100 bf16: %g (%s)", m.peak_flops, m.peak_source);
  step_mfu_init(&m, &tiny, &h100, ST_FP32, 0, 8);
  CHECK_MSG(m.peak_flops == 67e12, "H100 fp32: %g (%s)", m.peak_flops, m.peak_source);
  CHECK_MSG(strstr(m.peak_source, "NVIDIA H100 80GB HBM3") != NULL, "source: %s", m.peak_source);
  step_mfu_init(&m, &tiny, &h100, ST_BF16, 100, 8);
  CHECK(m.peak_flops == 100e12);
}

int main(void) {
  test_flops_per_token();
  test_products();
  test_peaks_and_mfu();
  return test_finish("step_mfu_test");
}
