/* gpt_recompute.h - activation recompute, a memory option that trades compute for fitting:
 * which forward activations the GPT keeps for its backward and which it computes again there.
 *
 *   none:  every block keeps all of its activations (gpt_layer_acts);
 *   gelu:  the MLP's GELU output (fch_gelu, 4C/tp wide) is one buffer shared by every block and
 *          is recomputed from the saved pre-activation (fch) right before the block's backward;
 *   block: each block keeps only its output (res3, the residual stream the next block reads);
 *          the rest is one set of buffers shared by every block, into which the backward
 *          recomputes the block's forward (its all-reduces included, under tensor parallelism)
 *          from the block's input right before the block's backward.
 * The last block needs no recompute: its activations are still in the shared buffers when the
 * backward reaches it. Recomputing runs the same kernels on the same inputs, so the results are
 * the same bits as `none` wherever the forward's kernels are deterministic (the CPU at every
 * dtype; see docs/GUIDE.md for the GPU's fused GELU epilogue). */
#ifndef ST_ENGINE_MODEL_GPT_RECOMPUTE_H
#define ST_ENGINE_MODEL_GPT_RECOMPUTE_H

typedef enum gpt_recompute {
  GPT_RECOMPUTE_NONE = 0,
  GPT_RECOMPUTE_GELU = 1,
  GPT_RECOMPUTE_BLOCK = 2,
  GPT_RECOMPUTE_COUNT
} gpt_recompute;

/* "none", "gelu" or "block". */
const char *gpt_recompute_name(gpt_recompute mode);

/* The mode named `name`, or -1 when it names none. */
int gpt_recompute_parse(const char *name);

#endif /* ST_ENGINE_MODEL_GPT_RECOMPUTE_H */
