/* comm_exposed_test.c - the time each rank's compute stream waited on communication in a
 * training step (step_stats.comm_exposed_ms, sharding/comm_exposure.h), on every rank, over
 * two steps (the second reuses the first's events):
 *   - one rank communicates nothing, at ZeRO-0 and at ZeRO-3 (its gathers and reductions are
 *     copies on a group of one): exactly 0;
 *   - two ranks at dp_shard 2 and ZeRO-3 wait for their gathers, reduce-scatters and the
 *     norm's and loss's all-reduces (collectives that block on the CPU): > 0 on every rank, as
 *     are two ranks at tp 2 (the blocks' all-reduces).
 * Only signs and exact zeros are checked: times are not. */
#include <mpi.h>
#include <stdio.h>

#include "tests/testing_mpi.h"
#include "tests/train/test_step.h"

enum { B = 2, SEQ = 32 };

typedef struct rig {
  st_mesh *mesh;
  gpt_model *model;
} rig;

static int rig_open(rig *k, int S, int T, int stage) {
  st_mesh_config mc = ST_MESH_CONFIG_INIT;
  mc.dp_shard = S;
  mc.tp = T;
  mc.device = "cpu";
  k->mesh = NULL;
  k->model = NULL;
  CHECK_OK(st_mesh_create(&k->mesh, &mc));
  if (!k->mesh) return 0;
  gpt_config cfg = {.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab = 256, .max_seq = SEQ};
  CHECK_OK(gpt_config_finish(&cfg, T));
  gpt_parallel par = {.mesh = k->mesh, .stage = stage, .prefetch = 1, .reshard_after_forward = 1};
  CHECK_OK(gpt_create(&k->model, &cfg, mesh_device(k->mesh), B, SEQ, &par));
  if (!k->model) return 0;
  CHECK_OK(gpt_init_params(k->model, 3));
  CHECK_OK(train_state_reset(k->model));
  return 1;
}

static void rig_close(rig *k) {
  gpt_destroy(k->model);
  st_mesh_destroy(k->mesh);
}

/* One training step on the rig; its comm_exposed_ms. */
static double step(rig *k, int S, int index) {
  int32_t inputs[B * SEQ], targets[B * SEQ];
  test_step_tokens(inputs, targets, B * SEQ);
  const int32_t *in[1] = {inputs}, *tg[1] = {targets};
  const train_hparams h = test_step_hparams((int64_t)B * SEQ * S);
  loss_scaler scaler;
  loss_scaler_init_none(&scaler);
  step_stats s = {.comm_exposed_ms = -1};
  CHECK_OK(train_step(k->model, &h, &scaler, index, in, tg, &s));
  return s.comm_exposed_ms;
}

static void check_mesh(int S, int T, int stage, int communicates) {
  rig k;
  if (!rig_open(&k, S, T, stage)) {
    rig_close(&k);
    return;
  }
  for (int i = 0; i < 2; i++) {
    const double ms = step(&k, S, i);
    if (communicates) {
      CHECK_MSG(ms > 0, "S %d T %d stage %d step %d: comm_exposed_ms %g, want > 0", S, T, stage, i,
                ms);
    } else {
      CHECK_MSG(ms == 0.0, "S %d T %d stage %d step %d: comm_exposed_ms %g, want 0 exactly", S, T,
                stage, i, ms);
    }
  }
  rig_close(&k);
}

int main(int argc, char **argv) {
  CHECK_OK(st_init(&argc, &argv));
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world == 1) {
    check_mesh(1, 1, 0, 0);
    check_mesh(1, 1, 3, 0);
  } else {
    check_mesh(world, 1, 3, 1);
    check_mesh(1, world, 0, 1);
  }
  int failed = test_finish_mpi("comm_exposed_test");
  st_finalize();
  return failed;
}
