/* fit.h - whether a training run fits the memory of its device, from the planner alone, and
 * when it does not, the cheapest change of the run that the planner predicts to fit. Pure
 * computation on plan_input: no MPI, no device; the start-up check of `shardtrain train`
 * (engine/train/train_fit.c) measures the limit and calls this.
 *
 * What counts against a limit (fit_need): on a device whose memory is host RAM (the CPU),
 * every byte of the plan, the offloaded optimizer state included; on a GPU only its device
 * memory (memory_plan.device_bytes): the host's pinned memory is not checked.
 *
 * The margin (fit_refused): a run is refused only when its prediction, less 3%, still exceeds
 * the limit. tests/train/planner_test.c holds every category, and the peak total, to within 3%
 * of what the allocator measures, so a run the check refuses would need at least its limit
 * from the allocator alone. What the planner does not count (kilobytes of bookkeeping, the
 * one-off scratch of initialisation and export, the MPI and CUDA runtimes, which already hold
 * their memory when the limit is read) only adds to the real need: it is given an allowance of
 * 0 here, so the check errs towards letting a run start, never towards refusing one that fits.
 * A suggested change must fit with no margin at all (its prediction <= the limit). */
#ifndef ST_ENGINE_PLAN_FIT_H
#define ST_ENGINE_PLAN_FIT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/plan/planner.h"

/* The planner's tolerance against the allocator, in percent. */
#define FIT_PLANNER_TOLERANCE_PERCENT 3

/* What a suggestion may change. */
typedef struct fit_bounds {
  int max_grad_accum; /* the most micro-batches per step a run may have */
  int max_ranks;      /* the largest world size worth suggesting */
  int bf16_possible;  /* the device can hold bf16 parameters */
} fit_bounds;

/* The changes tried, cheapest first; the first whose prediction fits is suggested. The order:
 * a higher ZeRO stage (communication only); recomputing the GELU output (one elementwise op
 * per block); a smaller micro-batch (smaller, less efficient products); recomputing whole
 * blocks (about a third more compute); bf16 (changes the numerics); the optimizer offloaded
 * (host link and host AdamW); more ranks. When none fits alone, every change but more ranks is
 * stacked in that order, each at its most (the smallest micro-batch, block recompute, ...),
 * until the stack fits at some ZeRO stage; failing that, the fewest ranks that fit, alone or
 * on top of the whole stack. What fits is then relieved of each change (or part of one) it
 * fits without, the costliest first, at the lowest stage that fits. */
typedef enum fit_change {
  FIT_NOTHING = 0,     /* nothing found, alone or together */
  FIT_ZERO = 1,        /* a higher ZeRO stage */
  FIT_MICRO_BATCH = 2, /* a smaller micro-batch, grad-accum raised to keep the global batch */
  FIT_BF16 = 3,        /* bf16 parameters (then bf16 gradients too) */
  FIT_OFFLOAD = 4,     /* the optimizer state in host memory (devices with their own memory) */
  FIT_RANKS = 5,       /* a larger shard group (ZeRO-3 if the stage alone does not do) */
  FIT_RECOMPUTE = 6,   /* activation recompute: the GELU output, else whole blocks */
  FIT_COMBINED = 7     /* several of the above: none fits alone */
} fit_change;

typedef struct fit_suggestion {
  fit_change change;
  plan_input run; /* the changed run (FIT_NOTHING: the original) */
  uint64_t need;  /* its bytes against the limit */
} fit_suggestion;

/* The bytes of `plan` (for the run `in`) that count against the device's limit. */
uint64_t fit_need(const plan_input *in, const memory_plan *plan);

/* 1 when `need` bytes are refused under `limit` (see the margin above). */
int fit_refused(uint64_t need, uint64_t limit);

/* The cheapest change of `in` whose prediction fits in `limit` bytes per rank, every rank
 * assumed to have the same limit. */
st_status fit_suggest(const plan_input *in, uint64_t limit, const fit_bounds *bounds,
                      fit_suggestion *out);

/* The suggestion as flags of `shardtrain train`, e.g. "--micro-batch 4 --grad-accum 8 (the
 * same global batch; predicted 1.20 GiB)", "16 ranks with this limit each (--dp-shard 16
 * --zero 3; a 16x larger global batch; predicted 1.79 GiB)", or a sentence saying that nothing
 * fits. */
void fit_describe(const plan_input *from, const fit_suggestion *s, const fit_bounds *bounds,
                  char *out, size_t size);

/* `bytes` as "20.9 GiB" (B, KiB, MiB, GiB or TiB, three significant digits). */
void fit_format_bytes(uint64_t bytes, char *out, size_t size);

#endif /* ST_ENGINE_PLAN_FIT_H */
