/* step_mfu.h - model FLOPs utilisation of a training run: the fraction of the devices' peak
 * that the model's arithmetic would take at the measured throughput.
 *
 *   FLOPs per token = 6 N + 6 L C T   (gpt_config_flops_per_token, which the simulator's MFU
 *                                      counts too)
 *   MFU = (tokens/s / devices) x FLOPs per token / peak of one device
 *
 * N is the parameter count the trainer reports (gpt_config_trained_params: every trained
 * parameter, embeddings, biases and norms included, the vocabulary's padding rows not), L the
 * layers, C the width, T the sequence length (the config's max_seq, which training uses).
 * Every rank of the mesh is a device, tensor-parallel ranks too.
 *
 * The peak is --peak-tflops when given, else the datasheet's dense peak of the GPU, found by its
 * product name in the simulator's built-in rows (engine/plan/sim_hw.h: the one table), in the
 * dtype the kernels compute in. Without either (the CPU, an unknown GPU) there is no MFU:
 * never a made-up peak. */
#ifndef ST_ENGINE_TRAIN_STEP_MFU_H
#define ST_ENGINE_TRAIN_STEP_MFU_H

#include "core/device.h"
#include "engine/model/gpt_config.h"

typedef struct step_mfu {
  double flops_per_token;
  double peak_flops;                        /* of one device, FLOP/s; 0: unknown (no MFU) */
  int devices;                              /* ranks of the mesh */
  char peak_source[DEVICE_NAME_SIZE + 128]; /* where the peak comes from, or why none */
} step_mfu;

/* The basis of the MFU for a run of `cfg` on `devices` ranks of `dev`, with parameters in `param`
 * and --peak-tflops `peak_tflops` (0: from the device's name). Never fails: a device whose peak
 * is unknown leaves peak_flops 0 and says why in peak_source. */
void step_mfu_init(step_mfu *m, const gpt_config *cfg, const st_device *dev, st_dtype param,
                   double peak_tflops, int devices);

/* The MFU (a fraction: 0.41 is 41%) at `tokens_per_s` over all devices; NaN when the peak is
 * unknown or the throughput is not a positive finite number. */
double step_mfu_of(const step_mfu *m, double tokens_per_s);

#endif /* ST_ENGINE_TRAIN_STEP_MFU_H */
