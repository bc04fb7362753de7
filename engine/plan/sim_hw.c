/* sim_hw.c - built-in hardware descriptions and the `--hardware` file reader (see sim_hw.h).
 *
 * The built-in GPU rows are datasheet peaks (NVIDIA's H100 SXM, H200 SXM and A100 SXM 80GB
 * datasheets; DGX nodes: 8 GPUs on NVLink, one InfiniBand port per GPU: 400 Gb/s on DGX
 * H100/H200, 200 Gb/s on DGX A100) scaled by efficiency factors that are NOT calibrated by
 * kernel timings yet: matmul and attention take the large-GEMM ceiling measured on this
 * project's H100 and H200 (docs/ENVIRONMENT.md: 798 and 790 of 989 TFLOP/s), the memory-bound
 * classes its device-to-device copy ceiling (3.0 of 3.35 TB/s, 4.3 of 4.8 TB/s); the A100 row
 * borrows the H100's ratios. Link latencies are assumptions (none is measured yet). The GPU
 * session replaces these with per-kernel timings (docs/SIMULATOR.md, "Calibration"). */
#include "engine/plan/sim_hw.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "engine/plan/planner.h"

static const char *const class_names[SIM_CLASS_COUNT] = {
    "matmul",   "attention_fwd", "attention_bwd", "norm_fwd", "norm_bwd",
    "gelu_fwd", "gelu_bwd",      "elementwise",   "fill",     "loss_fwd",
    "loss_bwd", "optimizer",     "grad_norm",     "cast"};

const char *sim_op_class_name(sim_op_class c) {
  return c >= 0 && c < SIM_CLASS_COUNT ? class_names[c] : "?";
}

static const char *const collective_names[SIM_COLLECTIVE_COUNT] = {"all_gather", "reduce_scatter",
                                                                   "all_reduce"};

const char *sim_collective_name(sim_collective c) {
  return c >= 0 && c < SIM_COLLECTIVE_COUNT ? collective_names[c] : "?";
}

/* A GPU row: peaks, the efficiency of the compute-bound and the memory-bound classes. */
static sim_hardware gpu_row(const char *name, double bf16, double fp32, double hbm, double nvlink,
                            double network, double pcie, double gib, double compute_eff,
                            double memory_eff, const char *calibration) {
  sim_hardware h = {.peak_flops = bf16,
                    .peak_flops_fp32 = fp32,
                    .mem_bw = hbm,
                    .intra_bw = nvlink,
                    .intra_latency = 5e-6, /* assumed, not measured */
                    .inter_bw = network,
                    .inter_latency = 10e-6, /* assumed, not measured */
                    .memory_gib = gib,
                    .host_link_bw = pcie,
                    /* assumed: an 8-GPU node's two sockets of DDR5 (~600 GB/s) shared by 8 */
                    .host_mem_bw = 75e9,
                    .gpus_per_node = 8,
                    .compute_slots = 0,
                    .overlap = 1,
                    .kernels = SIM_KERNELS_FUSED,
                    .op_overhead = 0};
  snprintf(h.name, sizeof h.name, "%s", name);
  snprintf(h.calibration, sizeof h.calibration, "%s", calibration);
  for (int c = 0; c < SIM_COLLECTIVE_COUNT; c++) h.comm_efficiency[c] = 1.0;
  for (int c = 0; c < SIM_CLASS_COUNT; c++) {
    h.efficiency[c] = c == SIM_MATMUL || c == SIM_ATTENTION_FWD || c == SIM_ATTENTION_BWD
                          ? compute_eff
                          : memory_eff;
  }
  return h;
}

st_status sim_hw_builtin(const char *name, sim_hardware *out) {
  const double GB = 1e9, GiB_of_GB = 1e9 / 1073741824.0;
  if (strcmp(name, "h100") == 0) {
    *out = gpu_row("h100", 989e12, 67e12, 3.35e12, 450 * GB, 50 * GB, 50 * GB, 80 * GiB_of_GB,
                   798.0 / 989.0, 3.0 / 3.35,
                   "uncalibrated: datasheet peaks x measured GEMM and copy ceilings");
  } else if (strcmp(name, "h200") == 0) {
    *out = gpu_row("h200", 989e12, 67e12, 4.8e12, 450 * GB, 50 * GB, 50 * GB, 141 * GiB_of_GB,
                   790.0 / 989.0, 4.3 / 4.8,
                   "uncalibrated: datasheet peaks x measured GEMM and copy ceilings");
  } else if (strcmp(name, "a100") == 0) {
    *out = gpu_row("a100", 312e12, 19.5e12, 2.039e12, 300 * GB, 25 * GB, 25 * GB, 80 * GiB_of_GB,
                   798.0 / 989.0, 3.0 / 3.35,
                   "uncalibrated: datasheet peaks x the H100's ceiling ratios");
  } else {
    return st_error(ST_ERR_INVALID_ARG,
                    "--gpu '%s' is not one of h100, h200, a100 (or give "
                    "--hardware FILE)",
                    name);
  }
  return ST_OK;
}

st_status sim_hw_builtin_for_product(const char *product, sim_hardware *out) {
  static const struct {
    const char *marker, *row;
    const char *unlike[2]; /* variants of the part whose peaks differ */
  } parts[] = {{"H100", "h100", {"PCIe", "NVL"}},
               {"H200", "h200", {"NVL", NULL}},
               {"A100", "a100", {NULL, NULL}}}; /* the SXM and PCIe A100 share their peaks */
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    if (!strstr(product, parts[i].marker)) continue;
    int variant = 0;
    for (int v = 0; v < 2; v++)
      variant |= parts[i].unlike[v] && strstr(product, parts[i].unlike[v]);
    if (!variant) return sim_hw_builtin(parts[i].row, out);
  }
  return st_error(ST_ERR_INVALID_ARG, "no built-in hardware row describes the GPU '%s'", product);
}

int sim_hw_has_host_link(const sim_hardware *hw) {
  return hw->host_link_bw > 0 && hw->host_mem_bw > 0;
}

double sim_call_size_key(sim_call_size size, sim_class_key key) {
  return key == SIM_KEY_GEMM_DIM ? size.gemm_dim : size.roofline_s;
}

double sim_hw_class_efficiency(const sim_hardware *hw, sim_op_class c, sim_call_size size) {
  const sim_curve *curve = &hw->efficiency_curve[c];
  if (curve->points == 0) return hw->efficiency[c];
  return sim_curve_at(curve, sim_call_size_key(size, hw->efficiency_key[c]));
}

void sim_hw_scale_class_efficiency(sim_hardware *hw, double factor) {
  for (int c = 0; c < SIM_CLASS_COUNT; c++) {
    hw->efficiency[c] *= factor;
    sim_curve_scale(&hw->efficiency_curve[c], factor);
  }
}

double sim_hw_comm_efficiency(const sim_hardware *hw, sim_collective c, int ranks, double bytes) {
  const sim_curve *curve = sim_group_curve_for(hw->comm_curves[c], ranks);
  return curve ? sim_curve_at(curve, bytes) : hw->comm_efficiency[c];
}

double sim_hw_peak(const sim_hardware *hw, int param_bytes) {
  if (hw->kernels == SIM_KERNELS_CPU || param_bytes >= 4) return hw->peak_flops_fp32;
  return hw->peak_flops;
}

/* The whole-number fields and their ranges, for the file reader and the check alike. */
enum { HW_INT_FIELDS = 3, HW_KEY_LEN = 96 };
static const struct {
  const char *key;
  int min, max;
} int_ranges[HW_INT_FIELDS] = {
    {"gpus_per_node", 1, PLAN_MAX_RANKS}, {"compute_slots", 0, PLAN_MAX_RANKS}, {"overlap", 0, 1}};

/* "1 to 1048576", or "0 or 1". */
static const char *range_text(int i, char *buf, size_t size) {
  const int lo = int_ranges[i].min, hi = int_ranges[i].max;
  snprintf(buf, size, hi == lo + 1 ? "%d or %d" : "%d to %d", lo, hi);
  return buf;
}

/* The keys a hardware file set and their lines, so that a field the check refuses is named with
 * the line that set it. */
typedef struct hw_lines {
  const char *path;
  char (*keys)[HW_KEY_LEN];
  const int *lines;
  int count;
} hw_lines;

/* Where an error in field `key` points: the file and line that set it (`w`: a file's keys), else
 * the description's name. */
static const char *where(const sim_hardware *h, const hw_lines *w, const char *key, char *buf,
                         size_t size) {
  if (!w) {
    snprintf(buf, size, "hardware '%s'", h->name);
    return buf;
  }
  int i = 0;
  while (i < w->count && strcmp(w->keys[i], key) != 0) i++;
  if (i < w->count) {
    snprintf(buf, size, "hardware file %s line %d", w->path, w->lines[i]);
  } else {
    snprintf(buf, size, "hardware file %s", w->path);
  }
  return buf;
}

static st_status check(const sim_hardware *h, const hw_lines *w) {
  char at[1200], key[HW_KEY_LEN], what[1400]; /* the file, line and key */
  const struct {
    const char *key;
    double value;
    int positive; /* must be > 0, else >= 0 */
  } fields[] = {{"peak_flops", h->peak_flops, 1},
                {"peak_flops_fp32", h->peak_flops_fp32, 1},
                {"mem_bw", h->mem_bw, 1},
                {"intra_bw", h->intra_bw, 1},
                {"intra_latency", h->intra_latency, 0},
                {"inter_bw", h->inter_bw, 1},
                {"inter_latency", h->inter_latency, 0},
                {"memory_gib", h->memory_gib, 0},
                {"host_link_bw", h->host_link_bw, 0},
                {"host_mem_bw", h->host_mem_bw, 0},
                {"op_overhead", h->op_overhead, 0}};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
    double v = fields[i].value;
    if (!isfinite(v) || v < 0 || (fields[i].positive && v == 0)) {
      return st_error(ST_ERR_INVALID_ARG, "%s: %s = %g must be %s",
                      where(h, w, fields[i].key, at, sizeof at), fields[i].key, v,
                      fields[i].positive ? "> 0" : ">= 0");
    }
  }
  for (int c = 0; c < SIM_CLASS_COUNT; c++) {
    snprintf(key, sizeof key, "eff_%s", class_names[c]);
    if (!isfinite(h->efficiency[c]) || h->efficiency[c] <= 0) {
      return st_error(ST_ERR_INVALID_ARG, "%s: %s = %g must be > 0",
                      where(h, w, key, at, sizeof at), key, h->efficiency[c]);
    }
    if (h->efficiency_curve[c].points == 0) continue;
    if (h->efficiency_key[c] == SIM_KEY_GEMM_DIM) snprintf(key, sizeof key, "eff_matmul@dim");
    snprintf(what, sizeof what, "%s: %s", where(h, w, key, at, sizeof at), key);
    ST_CHECK(sim_curve_check(&h->efficiency_curve[c], what));
  }
  for (int c = 0; c < SIM_COLLECTIVE_COUNT; c++) {
    snprintf(key, sizeof key, "eff_%s", collective_names[c]);
    if (!isfinite(h->comm_efficiency[c]) || h->comm_efficiency[c] <= 0) {
      return st_error(ST_ERR_INVALID_ARG, "%s: %s = %g must be > 0",
                      where(h, w, key, at, sizeof at), key, h->comm_efficiency[c]);
    }
  }
  for (int c = 0; c < SIM_COLLECTIVE_COUNT; c++) {
    for (int k = 0; k < SIM_CURVE_GROUPS; k++) {
      const sim_group_curve *g = &h->comm_curves[c][k];
      if (g->ranks == 0) continue;
      snprintf(key, sizeof key, "eff_%s@%d", collective_names[c], g->ranks);
      snprintf(what, sizeof what, "%s: %s", where(h, w, key, at, sizeof at), key);
      if (g->ranks < 0) return st_error(ST_ERR_INVALID_ARG, "%s: ranks must be >= 1", what);
      ST_CHECK(sim_curve_check(&g->curve, what));
    }
  }
  const int ints[HW_INT_FIELDS] = {h->gpus_per_node, h->compute_slots, h->overlap};
  for (int i = 0; i < HW_INT_FIELDS; i++) {
    if (ints[i] < int_ranges[i].min || ints[i] > int_ranges[i].max) {
      char range[32];
      return st_error(ST_ERR_INVALID_ARG, "%s: %s = %d must be %s",
                      where(h, w, int_ranges[i].key, at, sizeof at), int_ranges[i].key, ints[i],
                      range_text(i, range, sizeof range));
    }
  }
  return ST_OK;
}

st_status sim_hw_check(const sim_hardware *h) { return check(h, NULL); }

int sim_hw_whole_nodes(const sim_hardware *hw, long long gpus) {
  return gpus <= hw->gpus_per_node || gpus % hw->gpus_per_node == 0;
}

/* ---- the file reader --------------------------------------------------------------------- */

enum { REQUIRED = 6 };
static const char *const required_keys[REQUIRED] = {"peak_flops",    "mem_bw",   "intra_bw",
                                                    "intra_latency", "inter_bw", "inter_latency"};

/* Where a numeric key's value goes; NULL for keys that are not plain doubles. */
static double *double_field(sim_hardware *h, const char *key) {
  static const char *const names[] = {"peak_flops",    "peak_flops_fp32", "mem_bw",
                                      "intra_bw",      "intra_latency",   "inter_bw",
                                      "inter_latency", "memory_gib",      "host_link_bw",
                                      "host_mem_bw",   "op_overhead"};
  double *fields[] = {&h->peak_flops,    &h->peak_flops_fp32, &h->mem_bw,        &h->intra_bw,
                      &h->intra_latency, &h->inter_bw,        &h->inter_latency, &h->memory_gib,
                      &h->host_link_bw,  &h->host_mem_bw,     &h->op_overhead};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcmp(key, names[i]) == 0) return fields[i];
  }
  for (int c = 0; c < SIM_COLLECTIVE_COUNT; c++) {
    if (strncmp(key, "eff_", 4) == 0 && strcmp(key + 4, collective_names[c]) == 0) {
      return &h->comm_efficiency[c];
    }
  }
  return NULL;
}

static char *trim(char *s) {
  while (isspace((unsigned char)*s)) s++;
  char *end = s + strlen(s);
  while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
  return s;
}

static st_status parse_number(const char *path, int line, const char *key, const char *text,
                              double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v) || v < 0) {
    return st_error(ST_ERR_INVALID_ARG,
                    "hardware file %s line %d: %s = '%s' is not a finite number >= 0", path, line,
                    key, text);
  }
  *out = v;
  return ST_OK;
}

/* The op class a key `eff_<class>` names; SIM_CLASS_COUNT for any other key. */
static sim_op_class class_of_key(const char *key) {
  int c = 0;
  if (strncmp(key, "eff_", 4) != 0) return SIM_CLASS_COUNT;
  while (c < SIM_CLASS_COUNT && strcmp(key + 4, class_names[c]) != 0) c++;
  return (sim_op_class)c;
}

/* `eff_<class> = EFF` (a constant) or `= SECONDS:EFF ...` (a curve by roofline time); the
 * class's last line counts. */
static st_status parse_class_efficiency(const char *path, int line, const char *key,
                                        const char *value, sim_op_class c, sim_hardware *h) {
  sim_curve *curve = &h->efficiency_curve[c];
  h->efficiency_key[c] = SIM_KEY_ROOFLINE;
  if (!strchr(value, ':')) {
    curve->points = 0;
    return parse_number(path, line, key, value, &h->efficiency[c]);
  }
  char what[1200]; /* the path, line and key */
  snprintf(what, sizeof what, "hardware file %s line %d: %s", path, line, key);
  return sim_curve_parse(value, what, curve);
}

/* `eff_matmul@dim = DIM:EFF ...`: the matmul class's curve by the GEMM's smallest dimension;
 * the class's last line counts. */
static st_status parse_dim_curve(const char *path, int line, const char *key, const char *value,
                                 sim_hardware *h) {
  char what[1200]; /* the path, line and key */
  snprintf(what, sizeof what, "hardware file %s line %d: %s", path, line, key);
  char class_key[64];
  snprintf(class_key, sizeof class_key, "%.*s", (int)(strlen(key) - strlen("@dim")), key);
  if (class_of_key(class_key) != SIM_MATMUL) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: only eff_matmul is keyed by a dimension (@dim); other classes by "
                    "roofline time",
                    what);
  }
  ST_CHECK(sim_curve_parse(value, what, &h->efficiency_curve[SIM_MATMUL]));
  h->efficiency_key[SIM_MATMUL] = SIM_KEY_GEMM_DIM;
  return ST_OK;
}

/* `eff_<collective>@<ranks> = BYTES:EFF ...`: a collective's curve for groups of <ranks>. */
static st_status parse_collective_curve(const char *path, int line, const char *key,
                                        const char *value, sim_hardware *h) {
  const char *at = strchr(key, '@');
  char what[1200]; /* the path, line and key */
  snprintf(what, sizeof what, "hardware file %s line %d: %s", path, line, key);
  char name[32];
  snprintf(name, sizeof name, "%.*s", (int)(at - key - 4), key + 4);
  int c = 0;
  while (c < SIM_COLLECTIVE_COUNT && strcmp(name, collective_names[c]) != 0) c++;
  char *end = NULL;
  const long ranks = strtol(at + 1, &end, 10);
  if (c == SIM_COLLECTIVE_COUNT || end == at + 1 || *end != '\0' || ranks < 1 || ranks > 1 << 20) {
    return st_error(ST_ERR_INVALID_ARG,
                    "%s: not eff_<all_gather|reduce_scatter|all_reduce>@<ranks >= 1>", what);
  }
  sim_group_curve *slot = NULL;
  for (int k = 0; k < SIM_CURVE_GROUPS && !slot; k++) {
    sim_group_curve *g = &h->comm_curves[c][k];
    if (g->ranks == ranks) return st_error(ST_ERR_INVALID_ARG, "%s: given twice", what);
    if (g->ranks == 0) slot = g;
  }
  if (!slot) {
    return st_error(ST_ERR_INVALID_ARG, "%s: more than %d group sizes for %s", what,
                    SIM_CURVE_GROUPS, collective_names[c]);
  }
  ST_CHECK(sim_curve_parse(value, what, &slot->curve));
  slot->ranks = (int)ranks;
  return ST_OK;
}

/* The index of a whole-number key in int_ranges; HW_INT_FIELDS for any other key. */
static int int_index(const char *key) {
  int i = 0;
  while (i < HW_INT_FIELDS && strcmp(key, int_ranges[i].key) != 0) i++;
  return i;
}

/* One `key = value` line into the description; `seen` marks the required keys found. */
static st_status parse_line(const char *path, int line, char *key, char *value, sim_hardware *h,
                            int seen[REQUIRED]) {
  for (int i = 0; i < REQUIRED; i++) {
    if (strcmp(key, required_keys[i]) == 0) seen[i] = 1;
  }
  const int efficiency_key = strncmp(key, "eff_", 4) == 0;
  if (efficiency_key && strncmp(h->calibration, "none", 4) == 0) {
    snprintf(h->calibration, sizeof h->calibration, "efficiencies from %s", path);
  }
  const char *at = efficiency_key ? strchr(key, '@') : NULL;
  if (at && strcmp(at, "@dim") == 0) return parse_dim_curve(path, line, key, value, h);
  if (at) return parse_collective_curve(path, line, key, value, h);
  const sim_op_class c = class_of_key(key);
  if (c != SIM_CLASS_COUNT) return parse_class_efficiency(path, line, key, value, c, h);
  double *field = double_field(h, key);
  if (field) return parse_number(path, line, key, value, field);
  const int whole = int_index(key);
  if (strcmp(key, "name") == 0) {
    snprintf(h->name, sizeof h->name, "%s", value);
  } else if (strcmp(key, "calibration") == 0) {
    snprintf(h->calibration, sizeof h->calibration, "%s", value);
  } else if (strcmp(key, "kernels") == 0) {
    if (strcmp(value, "cpu") != 0 && strcmp(value, "fused") != 0) {
      return st_error(ST_ERR_INVALID_ARG,
                      "hardware file %s line %d: kernels = '%s' is not cpu "
                      "or fused",
                      path, line, value);
    }
    h->kernels = strcmp(value, "cpu") == 0 ? SIM_KERNELS_CPU : SIM_KERNELS_FUSED;
  } else if (whole < HW_INT_FIELDS) {
    double v = 0;
    char range[32];
    ST_CHECK(parse_number(path, line, key, value, &v));
    if (v != floor(v)) {
      return st_error(ST_ERR_INVALID_ARG,
                      "hardware file %s line %d: %s = '%s' is not a whole number", path, line, key,
                      value);
    }
    if (v < int_ranges[whole].min || v > int_ranges[whole].max) {
      return st_error(ST_ERR_INVALID_ARG, "hardware file %s line %d: %s = %s must be %s", path,
                      line, key, value, range_text(whole, range, sizeof range));
    }
    int *const targets[HW_INT_FIELDS] = {&h->gpus_per_node, &h->compute_slots, &h->overlap};
    *targets[whole] = (int)v;
  } else {
    return st_error(ST_ERR_INVALID_ARG, "hardware file %s line %d: unknown key '%s'", path, line,
                    key);
  }
  return ST_OK;
}

enum { HW_MAX_KEYS = 512 };

/* Refuses a key given on an earlier line: a silent "last one wins" hides typos in long files. */
static st_status note_key(const char *path, int line, const char *key, char (*keys)[HW_KEY_LEN],
                          int *lines, int *count) {
  for (int i = 0; i < *count; i++) {
    if (strncmp(keys[i], key, HW_KEY_LEN - 1) == 0) {
      return st_error(ST_ERR_INVALID_ARG,
                      "hardware file %s line %d: key '%s' is given twice (first on line %d)", path,
                      line, key, lines[i]);
    }
  }
  if (*count == HW_MAX_KEYS) {
    return st_error(ST_ERR_INVALID_ARG, "hardware file %s line %d: more than %d keys", path, line,
                    HW_MAX_KEYS);
  }
  snprintf(keys[*count], HW_KEY_LEN, "%s", key);
  lines[(*count)++] = line;
  return ST_OK;
}

st_status sim_hw_load(const char *path, sim_hardware *out) {
  FILE *f = fopen(path, "r");
  if (!f)
    return st_error(ST_ERR_INVALID_ARG, "--hardware %s: cannot open (%s)", path, strerror(errno));
  struct stat sb; /* a directory opens for reading, then reads as nothing */
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    return st_error(ST_ERR_INVALID_ARG, "--hardware %s is a directory, not a hardware file", path);
  }
  sim_hardware h = {
      .peak_flops_fp32 = -1, .gpus_per_node = 8, .overlap = 1, .kernels = SIM_KERNELS_FUSED};
  snprintf(h.name, sizeof h.name, "%s", path);
  /* Without a calibration key: say whether the file sets any efficiency. */
  snprintf(h.calibration, sizeof h.calibration, "none (efficiency 1: the roofline itself)");
  for (int c = 0; c < SIM_CLASS_COUNT; c++) h.efficiency[c] = 1.0;
  for (int c = 0; c < SIM_COLLECTIVE_COUNT; c++) h.comm_efficiency[c] = 1.0;
  int seen[REQUIRED] = {0}, number = 0;
  char buf[1024];                     /* a line: a curve's 16 points at full precision fit */
  char keys[HW_MAX_KEYS][HW_KEY_LEN]; /* 48 KiB on the stack, once per load */
  int key_lines[HW_MAX_KEYS], nkeys = 0;
  st_status status = ST_OK;
  while (status == ST_OK && fgets(buf, sizeof buf, f)) {
    number++;
    /* A longer line would be read as two, its tail as a line of its own. */
    const size_t len = strlen(buf);
    if (len == sizeof buf - 1 && buf[len - 1] != '\n') {
      const int next = getc(f);
      if (next != EOF && next != '\n') {
        status =
            st_error(ST_ERR_INVALID_ARG, "hardware file %s line %d: longer than %zu characters",
                     path, number, sizeof buf - 1);
        break;
      }
    }
    char *hash = strchr(buf, '#');
    if (hash) *hash = '\0';
    char *text = trim(buf);
    if (!*text) continue;
    char *eq = strchr(text, '=');
    if (!eq) {
      status = st_error(ST_ERR_INVALID_ARG, "hardware file %s line %d: '%s' is not key = value",
                        path, number, text);
      break;
    }
    *eq = '\0';
    char *key = trim(text);
    status = parse_line(path, number, key, trim(eq + 1), &h, seen);
    if (status == ST_OK) status = note_key(path, number, key, keys, key_lines, &nkeys);
  }
  if (status == ST_OK && ferror(f)) {
    status = st_error(ST_ERR_INVALID_ARG, "--hardware %s: cannot read (%s)", path, strerror(errno));
  }
  fclose(f);
  ST_CHECK(status);
  for (int i = 0; i < REQUIRED; i++) {
    if (!seen[i]) {
      return st_error(ST_ERR_INVALID_ARG, "hardware file %s: missing required key '%s'", path,
                      required_keys[i]);
    }
  }
  if (h.peak_flops_fp32 < 0) h.peak_flops_fp32 = h.peak_flops;
  ST_CHECK(check(&h, &(hw_lines){path, keys, key_lines, nkeys}));
  *out = h;
  return ST_OK;
}
