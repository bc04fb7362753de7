/* sim_hw.h - the machine the step-time simulator predicts for: per-device peaks, the links
 * between devices, how many devices a node holds, and the efficiency each class of op reaches
 * against its roofline (the calibration). A description comes from the built-in table (h100,
 * h200, a100: datasheet peaks, uncalibrated) or from a `--hardware` file of `key = value` lines
 * (docs/SIMULATOR.md lists the keys). Every required field must be present and every number
 * finite and non-negative; a description is checked before anything is simulated.
 *
 * It knows nothing of models or schedules: it only describes hardware. */
#ifndef ST_ENGINE_PLAN_SIM_HW_H
#define ST_ENGINE_PLAN_SIM_HW_H

#include "engine/plan/sim_curve.h"
#include "shardtrain.h"

/* The classes of ops whose achieved fraction of the roofline is calibrated separately, as one
 * number or as a curve by the call's size (sim_class_key): ops of one class cost the same per
 * FLOP or per byte at the same size (checked per shape by benchmarks/kernels/op_timings). */
typedef enum sim_op_class {
  SIM_MATMUL,        /* linear layers and the LM head, forward and backward */
  SIM_ATTENTION_FWD, /* attention: scores, softmax, weighted sum */
  SIM_ATTENTION_BWD,
  SIM_NORM_FWD, /* LayerNorm (fused: with the residual add) */
  SIM_NORM_BWD,
  SIM_GELU_FWD, /* GELU: a tanh per element (fused kernels fold it into the matmul) */
  SIM_GELU_BWD,
  SIM_ELEMENTWISE, /* residual adds, embeddings */
  SIM_FILL,        /* zero-fills of gradient buffers */
  SIM_LOSS_FWD,    /* softmax cross-entropy over the vocabulary (fused: with its gradient) */
  SIM_LOSS_BWD,
  SIM_OPTIMIZER, /* AdamW over the owned shard */
  SIM_GRAD_NORM, /* the gradient's sum of squares (and fp16's finite check) over the shard */
  SIM_CAST,      /* dtype conversions (fp32 compute copies of bf16 buffers on the CPU) */
  SIM_CLASS_COUNT
} sim_op_class;

const char *sim_op_class_name(sim_op_class c);

/* The collectives whose achieved fraction of the link bandwidth is calibrated separately. */
typedef enum sim_collective {
  SIM_ALL_GATHER,
  SIM_REDUCE_SCATTER,
  SIM_ALL_REDUCE,
  SIM_COLLECTIVE_COUNT
} sim_collective;

const char *sim_collective_name(sim_collective c);

/* What an op class's curve is keyed by: a size of the call. */
typedef enum sim_class_key {
  SIM_KEY_ROOFLINE, /* `eff_<class> = SECONDS:EFF ...`: its roofline time at efficiency 1 */
  SIM_KEY_GEMM_DIM  /* `eff_matmul@dim = DIM:EFF ...` (the matmul class only): the smallest of
                       the GEMM's m, n and k. A GEMM with a small dimension reaches less of the
                       peak than a square one of the same roofline time: on the CPU machine
                       (benchmarks/hardware/epyc_2core.txt), M2's 64-row matmuls 0.914 of the
                       sgemm peak, M1's 1024-row ones 0.971 (0.921 where tp 2 leaves 128) */
} sim_class_key;

/* A kernel call's sizes, the keys of its class's curve. */
typedef struct sim_call_size {
  double roofline_s; /* roofline time at efficiency 1 */
  double gemm_dim;   /* the smallest of a GEMM's three dimensions; 0 for other ops */
} sim_call_size;

/* The size `key` picks from `size`. */
double sim_call_size_key(sim_call_size size, sim_class_key key);

/* Which kernels the device runs, and so which op list a step is made of. */
typedef enum sim_kernels {
  SIM_KERNELS_CPU,  /* kernels/cpu: unfused ops in fp32, attention over dense T x T scores */
  SIM_KERNELS_FUSED /* the CUDA design (DESIGN.md): bias/GELU epilogues, LayerNorm fused with
                       the residual add, a fused classifier, causal flash attention; compute in
                       the param dtype */
} sim_kernels;

typedef struct sim_hardware {
  char name[64];
  double peak_flops;      /* per device, dense, in the 16-bit compute dtype (FLOP/s) */
  double peak_flops_fp32; /* per device in fp32 (FLOP/s); the CPU computes only in fp32 */
  double mem_bw;          /* per device (bytes/s) */
  double intra_bw;        /* per rank, to ranks of its node, one direction (bytes/s) */
  double intra_latency;   /* per message step inside a node (s) */
  double inter_bw;        /* per rank, to other nodes, one direction (bytes/s) */
  double inter_latency;   /* per message step between nodes (s) */
  double memory_gib;      /* per device; 0: unknown */
  double host_link_bw;    /* per device, to and from its host, one direction (bytes/s): the
                             offloaded optimizer's copies; 0: unknown (offload not simulated) */
  double host_mem_bw;     /* the host memory bandwidth one device's offloaded AdamW gets
                             (bytes/s); 0: unknown */
  int gpus_per_node;      /* devices (ranks) per node */
  int compute_slots;      /* ranks of a node that run at once (CPU cores); 0: all of them. With
                             more ranks than slots, compute and the CPU's copies for
                             collectives both stretch by ranks / slots */
  int overlap;            /* 1: collectives progress while the device computes (NCCL streams);
                             0: only while the rank waits for them (MPI on the CPU) */
  sim_kernels kernels;
  double efficiency[SIM_CLASS_COUNT]; /* achieved fraction of the roofline, per class */
  /* Where measured: the fraction by the call's size (sim_curve.h), keyed as efficiency_key
   * says; a class with a curve (points >= 1) ignores its efficiency. */
  sim_curve efficiency_curve[SIM_CLASS_COUNT];
  sim_class_key efficiency_key[SIM_CLASS_COUNT];
  double comm_efficiency[SIM_COLLECTIVE_COUNT]; /* achieved fraction of the link bandwidth */
  /* Where measured: the fraction by buffer size, per group size; a collective with a curve
   * ignores its comm_efficiency. */
  sim_group_curve comm_curves[SIM_COLLECTIVE_COUNT][SIM_CURVE_GROUPS];
  double op_overhead;    /* seconds added to every kernel call */
  char calibration[160]; /* where the efficiencies come from */
} sim_hardware;

/* The fraction of its roofline a call of class `c` and sizes `size` reaches: its class's curve's
 * at the size the curve is keyed by where the description has one, else its class's one
 * efficiency. */
double sim_hw_class_efficiency(const sim_hardware *hw, sim_op_class c, sim_call_size size);

/* Multiplies every op class's efficiency, curves included, by `factor` (--efficiency-scale). */
void sim_hw_scale_class_efficiency(sim_hardware *hw, double factor);

/* The fraction of the link bandwidth collective `c` reaches on a group of `ranks` over a buffer
 * of `bytes`: its curve's where the description has one (sim_group_curve_for), else its one
 * comm_efficiency. */
double sim_hw_comm_efficiency(const sim_hardware *hw, sim_collective c, int ranks, double bytes);

/* The built-in description of a GPU named as its driver names it (device_product_name): "H100"
 * (the SXM part: not "PCIe" or "NVL", whose peaks are lower) is h100, "H200" (not "NVL") h200,
 * "A100" a100. ST_ERR_INVALID_ARG naming the GPU when no built-in row describes it. */
st_status sim_hw_builtin_for_product(const char *product, sim_hardware *out);

/* 1 when the description gives the host link and host memory an offloaded optimizer uses. */
int sim_hw_has_host_link(const sim_hardware *hw);

/* The built-in description `name` (h100, h200, a100). ST_ERR_INVALID_ARG naming the known
 * ones otherwise. */
st_status sim_hw_builtin(const char *name, sim_hardware *out);

/* Reads a `key = value` file ('#' starts a comment). The required keys are peak_flops,
 * mem_bw, intra_bw, intra_latency, inter_bw and inter_latency; a missing one, a negative or
 * malformed number, a value sim_hw_check refuses, an unknown key or a line of more than 1023
 * characters is ST_ERR_INVALID_ARG naming the file, the line and the key.
 * `eff_<class> = SECONDS:EFF ...` gives an op class's curve (one number: its constant),
 * `eff_matmul@dim = DIM:EFF ...` the matmul class's curve by the GEMM's smallest dimension, and
 * `eff_<collective>@<ranks> = BYTES:EFF ...` a collective's curve for groups of <ranks> (one line
 * per group size). */
st_status sim_hw_load(const char *path, sim_hardware *out);

/* Checks a description (also run by the two functions above): peaks, bandwidths and
 * efficiencies > 0, latencies, memory, host links and op_overhead >= 0, all finite, curves
 * well formed, gpus_per_node 1 to PLAN_MAX_RANKS, compute_slots 0 to PLAN_MAX_RANKS, overlap 0
 * or 1. Efficiencies above 1 are allowed: no call computes faster than the peak (sim_ops.h). */
st_status sim_hw_check(const sim_hardware *hw);

/* Whether `gpus` can be a cluster of this hardware: one node or part of one, or whole nodes. */
int sim_hw_whole_nodes(const sim_hardware *hw, long long gpus);

/* The peak for the dtype a step computes in: the CPU kernels compute in fp32 whatever the
 * param dtype; fused kernels in the param dtype (bytes_per_element 4: fp32). */
double sim_hw_peak(const sim_hardware *hw, int param_bytes);

#endif /* ST_ENGINE_PLAN_SIM_HW_H */
