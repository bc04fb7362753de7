/* adamw.h - AdamW's hyperparameters, as the trainer's flags, checkpoints and the public API
 * hold them. The update itself is kernels.h's kernel_adamw (PyTorch's torch.optim.AdamW over a
 * flat range), which unit_optim.h runs on a unit's owned range. */
#ifndef ST_OPTIM_ADAMW_H
#define ST_OPTIM_ADAMW_H

typedef struct adamw_hparams {
  float beta1;
  float beta2;
  float eps;
} adamw_hparams;

#define ADAMW_HPARAMS_DEFAULT \
  { 0.9f, 0.95f, 1e-8f }

#endif /* ST_OPTIM_ADAMW_H */
