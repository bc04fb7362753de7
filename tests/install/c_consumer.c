/* A C program using an installed libshardtrain (tests/install/install_test.sh builds it with
 * the C compiler against the static archive and the shared library): it defines, for its own
 * use and with other meanings, names the library uses internally (install_test.sh checks that
 * the archive has each of them), then trains one unit sharded over every rank. Were any of the
 * library's internal calls bound to the program's definitions, the step would crash or go
 * wrong; with the library's names kept local it links, Adam's first moment holds the mean of
 * the ranks' different gradients, and the parameters move as AdamW's first step moves them,
 * computed here in double. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "shardtrain.h"

/* The program's own: variables and functions under the library's internal names. */
int mem_alloc = 1;
double dtype_size[4] = {1.0, 2.0, 3.0, 4.0};
int unit_init(const char *who) { return who != NULL; }
int comm_all_reduce(int value) { return -value; }
void mem_free(void *pointer) { (void)pointer; }
const char *st_error = "the program's own st_error";
int st_log = 7;

enum { N = 13 };

static int fail(const char *what, st_status status) {
  fprintf(stderr, "c_consumer: %s: %s (%s)\n", what, st_status_string(status), st_last_error());
  return 1;
}

#define CHECK(call)                                    \
  do {                                                 \
    st_status status_ = (call);                        \
    if (status_ != ST_OK) return fail(#call, status_); \
  } while (0)

static int train(int rank, int world) {
  st_mesh_config mesh_config = ST_MESH_CONFIG_INIT;
  mesh_config.device = "cpu";
  st_mesh *mesh = NULL;
  CHECK(st_mesh_create(&mesh, &mesh_config));
  st_unit_config unit_config = ST_UNIT_CONFIG_INIT;
  unit_config.zero_stage = 3;
  st_unit *unit = NULL;
  CHECK(st_unit_create(&unit, mesh, "layer", &unit_config));
  const int64_t shape[1] = {N};
  CHECK(st_unit_add_param(unit, "w", 1, shape, ST_TP_REPLICATED, NULL));
  CHECK(st_unit_finalize(unit));

  float initial[N], target[N];
  for (int i = 0; i < N; i++) {
    initial[i] = 0.25f * (float)(i - 6);
    target[i] = (i % 3 == 0) ? 1.0f : -0.5f;
  }
  CHECK(st_unit_set_param(unit, 0, initial));
  CHECK(st_unit_optimizer_reset(unit));

  /* Rank r adds (r + 1) times the gradient of 0.5 * |w - target|^2; the reduce sums them over
   * the ranks and grad_scale 1 / world takes the mean, (world + 1) / 2 times that gradient. */
  CHECK(st_unit_zero_grads(unit));
  CHECK(st_unit_gather(unit));
  CHECK(st_unit_begin_backward(unit));
  float *w = NULL, *grad = NULL;
  CHECK(st_unit_param_data(unit, 0, &w));
  CHECK(st_unit_grad_data(unit, 0, &grad));
  for (int i = 0; i < N; i++) grad[i] += (float)(rank + 1) * (w[i] - target[i]);
  CHECK(st_unit_release(unit));
  CHECK(st_unit_reduce_grads(unit));
  st_adamw_config adamw = ST_ADAMW_CONFIG_INIT;
  const float lr = 0.01f;
  CHECK(st_unit_adamw_step(unit, &adamw, 1, lr, 1.0f / (float)world));

  /* AdamW's first step: m = (1 - b1) g, v = (1 - b2) g^2, bias-corrected to g and g^2, so
   * w -= lr * g / (|g| + eps) whatever g's scale; weight decay leaves a 1-d parameter alone. m,
   * read on the part this rank owns, shows the reduced gradient itself. */
  const double mean_factor = (world + 1) / 2.0;
  int64_t first = 0, count = 0;
  CHECK(st_unit_owned_range(unit, 0, &first, &count));
  float m[N];
  CHECK(st_unit_read_state(unit, 0, ST_STATE_ADAM_M, m));
  int wrong = 0;
  for (int64_t k = 0; k < count; k++) {
    const int64_t i = first + k;
    double want = (1.0 - adamw.beta1) * mean_factor * ((double)initial[i] - (double)target[i]);
    if (fabs(m[k] - want) > 1e-6) {
      fprintf(stderr, "c_consumer: rank %d: Adam's m[%lld] = %.8f, want %.8f\n", rank, (long long)i,
              m[k], want);
      wrong = 1;
    }
  }
  CHECK(st_unit_gather(unit));
  CHECK(st_unit_param_data(unit, 0, &w));
  for (int i = 0; i < N; i++) {
    double g = (double)initial[i] - (double)target[i];
    double want = initial[i] - lr * g / (fabs(g) + (double)adamw.eps);
    if (fabs(w[i] - want) > 1e-6) {
      fprintf(stderr, "c_consumer: w[%d] = %.8f after the step, want %.8f\n", i, w[i], want);
      wrong = 1;
    }
  }
  CHECK(st_unit_release(unit));
  st_unit_destroy(unit);
  st_mesh_destroy(mesh);
  return wrong;
}

int main(int argc, char **argv) {
  CHECK(st_init(&argc, &argv));
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int wrong = train(rank, world);
  /* The program's own definitions are still its own. */
  if (mem_alloc != 1 || dtype_size[3] != 4.0 || unit_init("x") != 1 || comm_all_reduce(2) != -2 ||
      st_log != 7 || st_error[0] != 't') {
    fprintf(stderr, "c_consumer: the program's own definitions were changed\n");
    wrong = 1;
  }
  mem_free(NULL);
  CHECK(st_finalize());
  if (!wrong) printf("c_consumer: rank %d of %d passed\n", rank, world);
  return wrong;
}
