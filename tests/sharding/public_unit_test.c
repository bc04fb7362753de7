/* public_unit_test.c - the public st_unit calls on one rank without a mesh: every call out of
 * order or with a bad argument returns ST_ERR_INVALID_ARG and names the call and what was
 * missing; a correct sequence gives the parameters, gradients, norm and AdamW step computed
 * here by hand, in fp32 and with bf16 parameters and gradients (rounded where the unit holds
 * them, the master exact); a dtype the CPU cannot train with is refused; an allocation
 * failure anywhere comes back as ST_ERR_OOM with nothing leaked; the optimizer state calls
 * (checkpointing) refuse what is out of order and round-trip what they are given, the
 * parameters taking the master as the unit holds it.
 * (The order is enforced identically at every stage, so one rank covers it; the sharded
 * results are tests/cxx/mlp_consumer's.) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/dtype.h"
#include "tests/testing.h"

/* The call fails with ST_ERR_INVALID_ARG and st_last_error() contains both phrases. */
#define CHECK_REFUSED(expr, phrase1, phrase2)                                              \
  do {                                                                                     \
    st_status refused_s_ = (expr);                                                         \
    const char *refused_m_ = st_last_error();                                              \
    CHECK_MSG(refused_s_ == ST_ERR_INVALID_ARG && strstr(refused_m_, phrase1) &&           \
                  strstr(refused_m_, phrase2),                                             \
              "%s -> %s: '%s' (expected '%s', '%s')", #expr, st_status_string(refused_s_), \
              refused_m_, phrase1, phrase2);                                               \
  } while (0)

static const int64_t kWeightShape[2] = {2, 3};
static const int64_t kBiasShape[1] = {3};

/* A unit "layer" with weight [2, 3] (index 0) and bias [3] (index 1), not finalized. */
static st_unit *declared_unit(const st_unit_config *config) {
  st_unit *u = NULL;
  CHECK_OK(st_unit_create(&u, NULL, "layer", config));
  CHECK_OK(st_unit_add_param(u, "weight", 2, kWeightShape, ST_TP_REPLICATED, NULL));
  CHECK_OK(st_unit_add_param(u, "bias", 1, kBiasShape, ST_TP_REPLICATED, NULL));
  return u;
}

static void test_null_handle(void) {
  float value = 0, *data = NULL;
  double sumsq = 0;
  int64_t numel = 0;
  CHECK_REFUSED(st_unit_add_param(NULL, "w", 1, kBiasShape, ST_TP_REPLICATED, NULL),
                "st_unit_add_param", "NULL");
  CHECK_REFUSED(st_unit_finalize(NULL), "st_unit_finalize", "NULL");
  CHECK_REFUSED(st_unit_param_numel(NULL, 0, &numel), "st_unit_param_numel", "NULL");
  CHECK_REFUSED(st_unit_set_param(NULL, 0, &value), "st_unit_set_param", "NULL");
  CHECK_REFUSED(st_unit_gather(NULL), "st_unit_gather", "NULL");
  CHECK_REFUSED(st_unit_release(NULL), "st_unit_release", "NULL");
  CHECK_REFUSED(st_unit_param_data(NULL, 0, &data), "st_unit_param_data", "NULL");
  CHECK_REFUSED(st_unit_zero_grads(NULL), "st_unit_zero_grads", "NULL");
  CHECK_REFUSED(st_unit_begin_backward(NULL), "st_unit_begin_backward", "NULL");
  CHECK_REFUSED(st_unit_grad_data(NULL, 0, &data), "st_unit_grad_data", "NULL");
  CHECK_REFUSED(st_unit_reduce_grads(NULL), "st_unit_reduce_grads", "NULL");
  CHECK_REFUSED(st_unit_grad_sumsq(NULL, &sumsq), "st_unit_grad_sumsq", "NULL");
  CHECK_REFUSED(st_unit_optimizer_reset(NULL), "st_unit_optimizer_reset", "NULL");
  CHECK_REFUSED(st_unit_adamw_step(NULL, NULL, 1, 0.1f, 1.0f), "st_unit_adamw_step", "NULL");
  CHECK_REFUSED(st_memory_live_bytes(NULL), "st_memory_live_bytes", "NULL");
  int64_t first = 0;
  CHECK_REFUSED(st_unit_owned_range(NULL, 0, &first, &numel), "st_unit_owned_range", "NULL");
  CHECK_REFUSED(st_unit_read_state(NULL, 0, ST_STATE_MASTER, &value), "st_unit_read_state", "NULL");
  CHECK_REFUSED(st_unit_write_state(NULL, 0, &value, &value, &value), "st_unit_write_state",
                "NULL");
  CHECK_REFUSED(st_unit_publish_state(NULL), "st_unit_publish_state", "NULL");
  st_unit_destroy(NULL);
}

/* A name of ST_UNIT_NAME_MAX characters is kept whole (the messages quote it); one more is
 * refused, naming the limit, not cut short. */
static void test_name_length(void) {
  char name[ST_UNIT_NAME_MAX + 2];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  st_unit *u = (st_unit *)&u;
  CHECK_REFUSED(st_unit_create(&u, NULL, name, NULL), "st_unit_create", "64 characters");
  CHECK_MSG(strstr(st_last_error(), "limit of 63") != NULL, "message '%s'", st_last_error());
  CHECK(u == NULL);
  name[ST_UNIT_NAME_MAX] = '\0';
  CHECK_OK(st_unit_create(&u, NULL, name, NULL));
  char quoted[ST_UNIT_NAME_MAX + 8];
  snprintf(quoted, sizeof quoted, "'%s'", name);
  CHECK_REFUSED(st_unit_finalize(u), quoted, "has no parameters");
  st_unit_destroy(u);
}

/* A parameter name of ST_PARAM_NAME_MAX bytes is taken, one longer is refused. */
static void test_param_name_length(void) {
  st_unit *u = declared_unit(NULL);
  char name[ST_PARAM_NAME_MAX + 2];
  memset(name, 'p', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  CHECK_REFUSED(st_unit_add_param(u, name, 1, kBiasShape, ST_TP_REPLICATED, NULL),
                "st_unit_add_param: unit 'layer'", "is longer than 95 bytes");
  name[ST_PARAM_NAME_MAX] = '\0';
  CHECK_OK(st_unit_add_param(u, name, 1, kBiasShape, ST_TP_REPLICATED, NULL));
  st_unit_destroy(u);
}

static void test_bad_create(void) {
  st_unit *u = (st_unit *)&u; /* not NULL: a failing create must clear it */
  CHECK_REFUSED(st_unit_create(NULL, NULL, "layer", NULL), "st_unit_create", "out");
  CHECK_REFUSED(st_unit_create(&u, NULL, NULL, NULL), "st_unit_create", "name");
  CHECK(u == NULL);
  test_name_length();
  test_param_name_length();
  st_unit_config config = ST_UNIT_CONFIG_INIT;
  config.struct_size = 1;
  CHECK_REFUSED(st_unit_create(&u, NULL, "layer", &config), "st_unit_config.struct_size",
                "ST_UNIT_CONFIG_INIT");
  config = (st_unit_config)ST_UNIT_CONFIG_INIT;
  config.zero_stage = 3;
  CHECK_REFUSED(st_unit_create(&u, NULL, "layer", &config),
                "st_unit_create: unit layer: ", "stage 3 needs a mesh");
  config.zero_stage = 4;
  CHECK_REFUSED(st_unit_create(&u, NULL, "layer", &config), "stage 4", "not 0, 1, 2 or 3");
  config = (st_unit_config)ST_UNIT_CONFIG_INIT;
  config.reduce_dtype = (st_dtype)7;
  CHECK_REFUSED(st_unit_create(&u, NULL, "layer", &config), "reduce dtype 7", "not a dtype");
  config = (st_unit_config)ST_UNIT_CONFIG_INIT;
  config.param_dtype = (st_dtype)9;
  CHECK_REFUSED(st_unit_create(&u, NULL, "layer", &config), "param dtype 9", "not a dtype");
  CHECK(u == NULL);
  /* fp16 is a storage dtype on the CPU, like bf16 (the caller scales the loss) */
  config = (st_unit_config){sizeof config, 0, ST_FP16, ST_FP16};
  CHECK_OK(st_unit_create(&u, NULL, "layer", &config));
  CHECK(u != NULL);
  st_unit_destroy(u);
}

static void test_bad_declarations(void) {
  st_unit *u = declared_unit(NULL);
  const int64_t bad_shape[2] = {2, 0};
  CHECK_REFUSED(st_unit_add_param(u, NULL, 1, kBiasShape, ST_TP_REPLICATED, NULL),
                "st_unit_add_param", "name is NULL");
  CHECK_REFUSED(st_unit_add_param(u, "x", 1, NULL, ST_TP_REPLICATED, NULL), "st_unit_add_param",
                "shape is NULL");
  CHECK_REFUSED(st_unit_add_param(u, "x", 5, kWeightShape, ST_TP_REPLICATED, NULL), "x",
                "5 dimensions");
  CHECK_REFUSED(st_unit_add_param(u, "x", 2, bad_shape, ST_TP_REPLICATED, NULL),
                "st_unit_add_param: unit 'layer': parameter x",
                "extent 0 in dimension 1 (each must be >= 1)");
  CHECK_REFUSED(st_unit_add_param(u, "x", 1, kBiasShape, (st_tp_split)7, NULL),
                "st_unit_add_param: unit 'layer': parameter x",
                "split 7 is not replicated (0), column (1) or row (2)");
  CHECK_REFUSED(st_unit_add_param(u, "bias", 1, kBiasShape, ST_TP_REPLICATED, NULL), "bias",
                "declared twice");
  int64_t numel = 0;
  CHECK_OK(st_unit_param_numel(u, 0, &numel));
  CHECK_EQ_INT(numel, 6);
  CHECK_REFUSED(st_unit_param_numel(u, 2, &numel), "st_unit_param_numel", "no index 2");
  CHECK_REFUSED(st_unit_param_numel(u, 0, NULL), "st_unit_param_numel", "numel is NULL");

  const char *not_finalized = "not finalized";
  float values[6] = {0}, *data = NULL;
  double sumsq = 0;
  CHECK_REFUSED(st_unit_set_param(u, 0, values), "st_unit_set_param", not_finalized);
  CHECK_REFUSED(st_unit_gather(u), "st_unit_gather", not_finalized);
  CHECK_REFUSED(st_unit_release(u), "st_unit_release", not_finalized);
  CHECK_REFUSED(st_unit_param_data(u, 0, &data), "st_unit_param_data", not_finalized);
  CHECK_REFUSED(st_unit_zero_grads(u), "st_unit_zero_grads", not_finalized);
  CHECK_REFUSED(st_unit_begin_backward(u), "st_unit_begin_backward", not_finalized);
  CHECK_REFUSED(st_unit_grad_data(u, 0, &data), "st_unit_grad_data", not_finalized);
  CHECK_REFUSED(st_unit_reduce_grads(u), "st_unit_reduce_grads", not_finalized);
  CHECK_REFUSED(st_unit_grad_sumsq(u, &sumsq), "st_unit_grad_sumsq", not_finalized);
  CHECK_REFUSED(st_unit_optimizer_reset(u), "st_unit_optimizer_reset", not_finalized);
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f), "st_unit_adamw_step", not_finalized);

  CHECK_OK(st_unit_finalize(u));
  CHECK_REFUSED(st_unit_add_param(u, "late", 1, kBiasShape, ST_TP_REPLICATED, NULL),
                "st_unit_add_param", "before st_unit_finalize");
  CHECK_REFUSED(st_unit_finalize(u), "st_unit_finalize", "is finalized");
  st_unit_destroy(u);

  CHECK_OK(st_unit_create(&u, NULL, "empty", NULL));
  CHECK_REFUSED(st_unit_finalize(u), "'empty'", "has no parameters");
  st_unit_destroy(u);
}

static void test_bad_order(void) {
  st_unit *u = declared_unit(NULL);
  CHECK_OK(st_unit_finalize(u));
  float values[6] = {0}, *data = NULL;
  double sumsq = 0;
  CHECK_REFUSED(st_unit_set_param(u, -1, values), "st_unit_set_param", "no index -1");
  CHECK_REFUSED(st_unit_set_param(u, 0, NULL), "st_unit_set_param", "values is NULL");
  CHECK_REFUSED(st_unit_param_data(u, 0, &data), "st_unit_param_data", "call st_unit_gather");
  CHECK_OK(st_unit_gather(u));
  CHECK_REFUSED(st_unit_param_data(u, 2, &data), "st_unit_param_data", "no index 2");
  CHECK_REFUSED(st_unit_param_data(u, 0, NULL), "st_unit_param_data", "data is NULL");
  void *typed = NULL;
  st_dtype dtype = ST_FP32;
  CHECK_REFUSED(st_unit_param_data_typed(u, 0, &typed, NULL), "st_unit_param_data_typed",
                "dtype is NULL");
  CHECK_REFUSED(st_unit_grad_data_typed(u, 0, &typed, &dtype), "st_unit_grad_data_typed",
                "st_unit_begin_backward");
  CHECK_OK(st_unit_release(u));
  CHECK_REFUSED(st_unit_param_data(u, 0, &data), "st_unit_param_data", "is released");

  CHECK_OK(st_unit_zero_grads(u));
  CHECK_REFUSED(st_unit_grad_data(u, 0, &data), "st_unit_grad_data", "st_unit_begin_backward");
  CHECK_REFUSED(st_unit_reduce_grads(u), "st_unit_reduce_grads", "st_unit_begin_backward");
  CHECK_REFUSED(st_unit_grad_sumsq(u, &sumsq), "st_unit_grad_sumsq", "st_unit_reduce_grads");
  CHECK_OK(st_unit_begin_backward(u));
  CHECK_REFUSED(st_unit_grad_data(u, 7, &data), "st_unit_grad_data", "no index 7");
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f), "st_unit_adamw_step",
                "st_unit_reduce_grads");
  /* The backward releases the unit before it reduces, as the header's order says. */
  CHECK_OK(st_unit_gather(u));
  CHECK_REFUSED(st_unit_reduce_grads(u), "st_unit_reduce_grads", "call st_unit_release first");
  CHECK_OK(st_unit_release(u));
  CHECK_OK(st_unit_reduce_grads(u));
  CHECK_REFUSED(st_unit_grad_data(u, 0, &data), "st_unit_grad_data", "st_unit_begin_backward");
  CHECK_REFUSED(st_unit_begin_backward(u), "st_unit_begin_backward", "st_unit_zero_grads");
  CHECK_REFUSED(st_unit_grad_sumsq(u, NULL), "st_unit_grad_sumsq", "local is NULL");

  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f), "st_unit_adamw_step",
                "st_unit_optimizer_reset");
  CHECK_OK(st_unit_optimizer_reset(u));
  CHECK_OK(st_unit_gather(u));
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f), "st_unit_adamw_step",
                "call st_unit_release");
  CHECK_OK(st_unit_release(u));
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 0, 0.1f, 1.0f), "st_unit_adamw_step", "step 0");
  st_adamw_config adamw = ST_ADAMW_CONFIG_INIT;
  adamw.beta1 = 1.0f;
  CHECK_REFUSED(st_unit_adamw_step(u, &adamw, 1, 0.1f, 1.0f), "st_adamw_config", "beta1 1");
  adamw = (st_adamw_config)ST_ADAMW_CONFIG_INIT;
  adamw.struct_size = 0;
  CHECK_REFUSED(st_unit_adamw_step(u, &adamw, 1, 0.1f, 1.0f), "st_adamw_config.struct_size",
                "ST_ADAMW_CONFIG_INIT");
  /* lr and grad_scale: a NaN, infinite or negative factor would make every weight NaN; lr 0 (a
   * warm-up's first step) is a step that moves nothing but the moments. */
  const float nan = NAN, inf = INFINITY;
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, nan, 1.0f), "st_unit_adamw_step", "lr nan");
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, inf, 1.0f), "st_unit_adamw_step", "lr inf");
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, -0.1f, 1.0f), "st_unit_adamw_step", "lr -0.1");
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, inf), "st_unit_adamw_step", "grad_scale inf");
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, nan), "st_unit_adamw_step", "grad_scale nan");
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, 0.0f), "st_unit_adamw_step", "grad_scale 0");
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, -1.0f), "st_unit_adamw_step", "grad_scale -1");
  /* An infinite eps would stop every update, an infinite weight decay turn the weights NaN. */
  adamw = (st_adamw_config)ST_ADAMW_CONFIG_INIT;
  adamw.eps = inf;
  CHECK_REFUSED(st_unit_adamw_step(u, &adamw, 1, 0.1f, 1.0f), "st_adamw_config", "eps inf");
  adamw = (st_adamw_config)ST_ADAMW_CONFIG_INIT;
  adamw.weight_decay = inf;
  CHECK_REFUSED(st_unit_adamw_step(u, &adamw, 1, 0.1f, 1.0f), "st_adamw_config",
                "weight_decay inf");
  CHECK_OK(st_unit_adamw_step(u, NULL, 1, 0.0f, 1.0f));
  CHECK_OK(st_unit_set_param(u, 0, values));
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f), "st_unit_adamw_step",
                "st_unit_optimizer_reset");
  st_unit_destroy(u);
}

/* Sizes whose element or byte counts overflow int64_t are refused where they are declared,
 * naming the parameter; the unit stays usable for the parameters before. */
static void test_size_overflow(void) {
  st_unit *u = NULL;
  CHECK_OK(st_unit_create(&u, NULL, "big", NULL));
  const int64_t huge[1] = {((int64_t)1 << 62) + 64},
                square[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  const int64_t half[1] = {INT64_MAX / 2}, most[1] = {INT64_MAX / 8 - 64};
  CHECK_REFUSED(st_unit_add_param(u, "huge", 1, huge, ST_TP_REPLICATED, NULL), "huge", "more than");
  CHECK_REFUSED(st_unit_add_param(u, "square", 2, square, ST_TP_REPLICATED, NULL), "square",
                "more than");
  CHECK_REFUSED(st_unit_add_param(u, "half", 1, half, ST_TP_REPLICATED, NULL), "half", "more than");
  CHECK_OK(st_unit_add_param(u, "a", 1, most, ST_TP_REPLICATED, NULL));
  CHECK_REFUSED(st_unit_add_param(u, "b", 1, most, ST_TP_REPLICATED, NULL), "parameter b",
                "exceed");
  int64_t numel = 0;
  CHECK_OK(st_unit_param_numel(u, 0, &numel));
  CHECK(numel == most[0]);
  st_unit_destroy(u);
}

/* x as a unit of `dtype` holds it. */
static double held(st_dtype dtype, double x) {
  return dtype == ST_BF16 ? f32_from_bf16(bf16_from_f32((float)x)) : (float)x;
}

/* One step by hand, with parameters and gradients in `dtype`: weight all 1.003, bias all 2,
 * every gradient 0.3, each as the unit holds them (bf16: 1.0 and 0.30078125). AdamW's first
 * step moves each element by lr * g / (|g| + eps) ~ lr against the gradient, after decoupled
 * decay (weight only: a 2-D parameter) p *= 1 - lr * wd, on the fp32 master, which keeps the
 * exact 1.003 (a master taken from the bf16 weight would land one bf16 step lower). */
static void test_correct_sequence(st_dtype dtype) {
  st_unit_config config = ST_UNIT_CONFIG_INIT;
  config.param_dtype = config.reduce_dtype = dtype;
  st_unit *u = declared_unit(&config);
  CHECK_OK(st_unit_finalize(u));
  const float w0[6] = {1.003f, 1.003f, 1.003f, 1.003f, 1.003f, 1.003f}, b0[3] = {2, 2, 2};
  CHECK_OK(st_unit_set_param(u, 0, w0));
  CHECK_OK(st_unit_set_param(u, 1, b0));
  CHECK_OK(st_unit_optimizer_reset(u));
  float *w = NULL, *b = NULL, *gw = NULL, *gb = NULL;
  void *typed = NULL;
  st_dtype typed_dtype = ST_FP16;
  CHECK_OK(st_unit_gather(u));
  CHECK_OK(st_unit_param_data(u, 0, &w));
  CHECK_OK(st_unit_param_data(u, 1, &b));
  if (w && b) CHECK(w[5] == held(dtype, 1.003) && b[0] == 2.0f && b[2] == 2.0f);
  /* The CPU computes in fp32: the typed form hands out the same fp32 data (a bf16 unit's copy). */
  CHECK_OK(st_unit_param_data_typed(u, 1, &typed, &typed_dtype));
  CHECK(typed == (void *)b && typed_dtype == ST_FP32);
  CHECK_OK(st_unit_release(u));

  CHECK_OK(st_unit_zero_grads(u));
  CHECK_OK(st_unit_begin_backward(u));
  CHECK_OK(st_unit_grad_data(u, 0, &gw));
  CHECK_OK(st_unit_grad_data(u, 1, &gb));
  typed_dtype = ST_FP16;
  CHECK_OK(st_unit_grad_data_typed(u, 0, &typed, &typed_dtype));
  CHECK(typed == (void *)gw && typed_dtype == ST_FP32);
  if (gw && gb) {
    for (int i = 0; i < 6; i++) gw[i] += 0.3f;
    for (int i = 0; i < 3; i++) gb[i] += 0.3f;
  }
  CHECK_OK(st_unit_reduce_grads(u));
  double sumsq = 0;
  CHECK_OK(st_unit_grad_sumsq(u, &sumsq));
  /* Summed in an fp32 device scalar: one fp32 rounding of 0.81. */
  CHECK_NEAR(sumsq, 9 * held(dtype, 0.3) * held(dtype, 0.3), 1e-7);

  st_adamw_config adamw = ST_ADAMW_CONFIG_INIT;
  const float lr = 0.1f;
  CHECK_OK(st_unit_adamw_step(u, &adamw, 1, lr, 1.0f));
  CHECK_OK(st_unit_gather(u));
  CHECK_OK(st_unit_param_data(u, 0, &w));
  CHECK_OK(st_unit_param_data(u, 1, &b));
  if (w && b) {
    CHECK_NEAR(w[0], held(dtype, 1.003 * (1 - lr * adamw.weight_decay) - lr), 1e-6);
    CHECK_NEAR(b[2], held(dtype, 2.0 - lr), 1e-6);
  }
  CHECK_OK(st_unit_release(u));
  st_unit_destroy(u);
}

/* The optimizer state of a unit on one rank (it owns every element): refused out of order or
 * with bad arguments (between a write and its publish: no gather, set, reset, read or step; no
 * write with gradients in progress); written values read back exactly, the parameters the
 * master as the unit holds it (bf16: rounded). */
static void test_optimizer_state(st_dtype dtype) {
  st_unit_config config = ST_UNIT_CONFIG_INIT;
  config.param_dtype = config.reduce_dtype = dtype;
  st_unit *u = declared_unit(&config);
  int64_t first = -1, count = -1;
  float out[6] = {0};
  CHECK_REFUSED(st_unit_owned_range(u, 0, &first, &count), "'layer'", "st_unit_finalize first");
  CHECK_OK(st_unit_finalize(u));
  CHECK_OK(st_unit_owned_range(u, 0, &first, &count));
  CHECK(first == 0 && count == 6);
  CHECK_REFUSED(st_unit_owned_range(u, 2, &first, &count), "st_unit_owned_range", "no index 2");
  CHECK_REFUSED(st_unit_owned_range(u, 0, NULL, &count), "st_unit_owned_range", "first is NULL");
  CHECK_REFUSED(st_unit_read_state(u, 0, ST_STATE_MASTER, out), "st_unit_read_state",
                "st_unit_optimizer_reset first");
  CHECK_REFUSED(st_unit_publish_state(u), "st_unit_publish_state",
                "call st_unit_write_state or st_unit_optimizer_reset first");
  CHECK_OK(st_unit_optimizer_reset(u));
  CHECK_REFUSED(st_unit_read_state(u, 0, (st_optimizer_state)3, out), "st_unit_read_state",
                "state 3 is not");
  CHECK_REFUSED(st_unit_read_state(u, 0, ST_STATE_MASTER, NULL), "st_unit_read_state",
                "out is NULL");

  const float master[6] = {1.003f, -2.5f, 3.25f, 0.1f, -0.7f, 5e-3f};
  const float m[6] = {0.01f, 0.02f, 0.03f, 0.04f, 0.05f, 0.06f}, v[6] = {1, 2, 3, 4, 5, 6};
  const float bias[3] = {0.5f, 0.25f, -1.1f}, zero[3] = {0, 0, 0};
  CHECK_OK(st_unit_gather(u));
  CHECK_REFUSED(st_unit_write_state(u, 0, master, m, v), "st_unit_write_state",
                "st_unit_release first");
  CHECK_OK(st_unit_release(u));
  CHECK_REFUSED(st_unit_write_state(u, 0, master, NULL, v), "st_unit_write_state",
                "adam_m is NULL");
  CHECK_OK(st_unit_write_state(u, 0, master, m, v));
  CHECK_OK(st_unit_write_state(u, 1, bias, zero, zero));
  CHECK_REFUSED(st_unit_gather(u), "st_unit_gather", "st_unit_publish_state first");
  CHECK_REFUSED(st_unit_set_param(u, 1, bias), "st_unit_set_param", "st_unit_publish_state first");
  CHECK_REFUSED(st_unit_optimizer_reset(u), "st_unit_optimizer_reset",
                "st_unit_publish_state first");
  CHECK_OK(st_unit_zero_grads(u));
  CHECK_OK(st_unit_begin_backward(u));
  CHECK_OK(st_unit_reduce_grads(u));
  CHECK_REFUSED(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f), "st_unit_adamw_step",
                "st_unit_publish_state first");
  CHECK_REFUSED(st_unit_read_state(u, 0, ST_STATE_MASTER, out), "st_unit_read_state",
                "st_unit_publish_state first");
  CHECK_OK(st_unit_publish_state(u));

  const float *want[3] = {master, m, v};
  for (int st = 0; st < 3; st++) {
    CHECK_OK(st_unit_read_state(u, 0, (st_optimizer_state)st, out));
    CHECK_MSG(memcmp(out, want[st], sizeof out) == 0, "%s: state %d read back as written",
              dtype_name(dtype), st);
  }
  float *w = NULL;
  CHECK_OK(st_unit_gather(u));
  CHECK_OK(st_unit_param_data(u, 0, &w));
  for (int i = 0; w && i < 6; i++) {
    CHECK_MSG(w[i] == (float)held(dtype, master[i]), "%s: weight %d is %.9g, master %.9g",
              dtype_name(dtype), i, w[i], master[i]);
  }
  CHECK_OK(st_unit_release(u));
  CHECK_OK(st_unit_adamw_step(u, NULL, 1, 0.1f, 1.0f));
  CHECK_REFUSED(st_unit_write_state(u, 0, master, m, v), "st_unit_write_state",
                "st_unit_zero_grads first");
  /* Published again without a new write (a rank that owns none of the parameters may). */
  CHECK_OK(st_unit_publish_state(u));
  st_unit_destroy(u);
}

/* Fails the n-th allocation of a whole unit life, for every n until one succeeds. */
static void test_allocation_failures(void) {
  uint64_t before = 0, after = 0;
  CHECK_OK(st_memory_live_bytes(&before));
  for (long n = 1;; n++) {
    mem_fail_nth(n);
    st_unit *u = NULL;
    st_status s = st_unit_create(&u, NULL, "layer", NULL);
    if (s == ST_OK) s = st_unit_add_param(u, "weight", 2, kWeightShape, ST_TP_REPLICATED, NULL);
    if (s == ST_OK) s = st_unit_finalize(u);
    if (s == ST_OK) s = st_unit_gather(u);
    if (s == ST_OK) s = st_unit_begin_backward(u);
    st_unit_destroy(u);
    mem_fail_nth(0);
    CHECK_OK(st_memory_live_bytes(&after));
    CHECK_MSG(after == before, "allocation %ld failed: %llu bytes live, %llu before", n,
              (unsigned long long)after, (unsigned long long)before);
    if (s == ST_OK) break;
    CHECK_MSG(s == ST_ERR_OOM, "allocation %ld failed as %s", n, st_status_string(s));
    if (n > 100) {
      CHECK_MSG(0, "a unit's life still fails after %ld allocations", n);
      break;
    }
  }
}

int main(void) {
  test_null_handle();
  test_bad_create();
  test_bad_declarations();
  test_bad_order();
  test_size_overflow();
  test_correct_sequence(ST_FP32);
  test_correct_sequence(ST_BF16);
  test_optimizer_state(ST_FP32);
  test_optimizer_state(ST_BF16);
  test_allocation_failures();
  uint64_t live = 1;
  CHECK_OK(st_memory_live_bytes(&live));
  CHECK_EQ_INT(live, 0);
  return test_finish("public_unit_test");
}
