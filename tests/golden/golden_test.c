/* golden_test.c - the tiny GPT on one CPU rank against the JAX reference in
 * tiny_golden.safetensors (see README.md beside it): the loss at the reference's initial
 * weights to 1e-5, every parameter gradient to 1e-4 (max-norm and Frobenius relative), with the
 * LM head in one chunk (the default at this size) and forced into three (48, 48, 32 rows), then
 * five AdamW steps with warmup, cosine decay, weight decay and clipping: the loss, grad norm and
 * lr of each step, and every parameter after the last step to 1e-4 in the Frobenius norm and
 * 1e-3 in the max-norm. Adam turns rounding noise in near-zero gradients into updates of lr's
 * size, so the max-norm of final weights depends on the BLAS's summation order (README.md): 8.5e-5
 * measured on one machine, 2.2e-4 on another (one OpenBLAS thread, core Zen), 1.2e-4 for PyTorch;
 * the Frobenius bound still catches every optimizer mistake tried (3.1e-4 and more). */
#include <math.h>

#include "core/alloc.h"
#include "engine/model/gpt_io.h"
#include "engine/train/train_step.h"
#include "tests/golden/golden_testing.h"
#include "tests/testing.h"

enum { B = GOLDEN_B, T = GOLDEN_T, STEPS = 5 };

/* Compares every parameter (or its gradient) of the model with `<prefix><hf name>`: in the
 * max-norm, max |got - want| / max |want| <= max_tol, and in the Frobenius norm,
 * ||got - want|| / ||want|| <= frobenius_tol. */
static void compare_all(const gpt_model *m, const safetensors_reader *r, const char *prefix,
                        int gradients, double max_tol, double frobenius_tol) {
  for (int u = 0; u < m->n_units; u++) {
    const unit *un = &m->units[u];
    for (int k = 0; k < un->layout.count; k++) {
      const unit_param *p = &un->layout.params[k];
      char name[160];
      uint64_t n = 0;
      float *want = golden_param_read(m, r, prefix, u, k, name, sizeof name, &n);
      if (!want) continue;
      const st_tensor t = gradients ? unit_grad_tensor(un, k) : unit_param_tensor(un, k);
      CHECK_MSG(t.dtype == ST_FP32, "%s: the golden model is fp32", name);
      const float *got = t.data;
      CHECK_MSG(n == (uint64_t)p->numel, "%s: %llu elements, model has %lld", name,
                (unsigned long long)n, (long long)p->numel);
      double err = 0, ref = 0, err2 = 0, ref2 = 0;
      for (uint64_t i = 0; i < n && i < (uint64_t)p->numel; i++) {
        const double d = (double)got[i] - want[i];
        err = fmax(err, fabs(d));
        ref = fmax(ref, fabs(want[i]));
        err2 += d * d;
        ref2 += (double)want[i] * want[i];
      }
      const double rel = err / ref, frobenius = sqrt(err2 / ref2);
      CHECK_MSG(rel <= max_tol, "%s: relative error %.3g > %.1g (max-norm)", name, rel, max_tol);
      CHECK_MSG(frobenius <= frobenius_tol, "%s: relative error %.3g > %.1g (Frobenius)", name,
                frobenius, frobenius_tol);
      mem_free(want);
    }
  }
}

/* The loss and every gradient at the reference's initial weights (the model's). */
static void check_initial(gpt_model *m, const safetensors_reader *r, const int32_t *inputs,
                          const int32_t *targets) {
  float *loss_init = golden_read(r, "loss_init", NULL);
  const float loss = golden_loss_and_grads(m, inputs, targets, 0) / (B * T);
  CHECK_MSG(golden_relative(loss, loss_init[0]) <= 1e-5,
            "head in chunks of %lld: loss %.9g, reference %.9g", (long long)m->acts.head_rows, loss,
            loss_init[0]);
  compare_all(m, r, "grad.", 1, 1e-4, 1e-4);
  mem_free(loss_init);
}

int main(int argc, char **argv) {
  if (argc != 2) return test_check(0, __FILE__, __LINE__, "usage: golden_test FILE") ? 0 : 1;
  safetensors_reader *r = NULL;
  CHECK_OK(safetensors_reader_open(&r, argv[1]));
  if (!r) return test_finish("golden_test");

  gpt_config cfg;
  CHECK_OK(gpt_config_named("tiny", &cfg));
  CHECK_OK(gpt_config_finish(&cfg, 1));
  st_device cpu = device_cpu();
  gpt_model *m = NULL;
  CHECK_OK(gpt_create(&m, &cfg, &cpu, B, T, NULL));
  CHECK_OK(gpt_import(m, argv[1], "init."));

  int32_t inputs[B * T], targets[B * T];
  golden_batch(r, 0, B, inputs, targets);

  /* Loss and gradients at the initial weights, with the head in one chunk and in three. */
  check_initial(m, r, inputs, targets);
  gpt_model *chunked = NULL;
  CHECK_OK(gpt_create(&chunked, &cfg, &cpu, B, T, NULL));
  CHECK_OK(gpt_import(chunked, argv[1], "init."));
  CHECK_OK(gpt_set_head_rows(chunked, 48)); /* 48, 48 and 32 rows */
  check_initial(chunked, r, inputs, targets);
  gpt_destroy(chunked);

  /* Five steps on the same batch with the reference's hyperparameters. */
  train_hparams h = {.schedule = {LR_COSINE, 1e-3, 1e-4, 2, STEPS, 0},
                     .adam = ADAMW_HPARAMS_DEFAULT,
                     .weight_decay = 0.1f,
                     .clip = 0.5f,
                     .grad_accum = 1,
                     .global_tokens = B * T};
  float *ref_loss = golden_read(r, "step_loss", NULL),
        *ref_norm = golden_read(r, "step_grad_norm", NULL),
        *ref_lr = golden_read(r, "step_lr", NULL);
  CHECK_OK(train_state_reset(m));
  const int32_t *in[1] = {inputs}, *tg[1] = {targets};
  loss_scaler scaler;
  loss_scaler_init_none(&scaler);
  for (int step = 0; step < STEPS; step++) {
    step_stats s;
    CHECK_OK(train_step(m, &h, &scaler, step, in, tg, &s));
    CHECK_MSG(golden_relative(s.loss, ref_loss[step]) <= 1e-5, "step %d loss %.9g, reference %.9g",
              step, s.loss, ref_loss[step]);
    CHECK_MSG(golden_relative(s.grad_norm, ref_norm[step]) <= 1e-5,
              "step %d norm %.9g, reference %.9g", step, s.grad_norm, ref_norm[step]);
    CHECK_MSG(golden_relative(s.lr, ref_lr[step]) <= 1e-6, "step %d lr %.9g, reference %.9g", step,
              s.lr, ref_lr[step]);
  }
  compare_all(m, r, "final.", 0, 1e-3, 1e-4);

  mem_free(ref_lr);
  mem_free(ref_norm);
  mem_free(ref_loss);
  gpt_destroy(m);
  safetensors_reader_close(r);
  mem_stats stats;
  mem_stats_get(&stats);
  CHECK_EQ_INT(stats.live_blocks, 0);
  return test_finish("golden_test");
}
