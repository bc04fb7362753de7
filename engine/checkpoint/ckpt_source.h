/* ckpt_source.h - reading a checkpoint step directory on any mesh: its manifest, the files'
 * checksums, and any range of any parameter's TP slice for a layout of the reader's choosing.
 * A read maps each element through the logical tensor to the tp rank and piece that hold it,
 * in runs of consecutive elements, and opens only the files those pieces are in. */
#ifndef ST_ENGINE_CHECKPOINT_CKPT_SOURCE_H
#define ST_ENGINE_CHECKPOINT_CKPT_SOURCE_H

#include "engine/checkpoint/ckpt_manifest.h"

/* Elements every checkpoint reader and writer moves through memory at a time (1 MiB of fp32
 * per buffer), so saving, restoring and the offline tools need no more, whatever the model. */
#define CKPT_CHUNK_ELEMENTS ((int64_t)1 << 18)

typedef struct ckpt_source ckpt_source;

/* Opens `dir` (a step directory): it must hold DONE and a valid manifest. Files are opened on
 * first use. A path that is not a step directory (missing, a file, a directory without any
 * checkpoint file such as the --ckpt-dir above the step directories) is ST_ERR_INVALID_ARG; an
 * incomplete or damaged checkpoint is ST_ERR_FORMAT or ST_ERR_IO naming the file. */
st_status ckpt_source_open(ckpt_source **out, const char *dir);
void ckpt_source_close(ckpt_source *src);

const ckpt_manifest *ckpt_source_manifest(const ckpt_source *src);
const char *ckpt_source_dir(const ckpt_source *src);

/* Checks file f's size and SHA-256 against the manifest. */
st_status ckpt_source_verify(const ckpt_source *src, int f);

/* Checks that the checkpoint holds the model `cfg` describes (every dimension but the padding
 * of the vocabulary, which depends on the tp size). */
st_status ckpt_source_check_model(const ckpt_source *src, const gpt_config *cfg);

/* Reads elements [first, first + count) of `state` of the parameter called `name`, as laid out
 * in `p`'s slice for tp rank t of T, into dst. p's logical shape must be the checkpoint's,
 * except that a replicated parameter may have more or fewer rows (wte's padding): rows the
 * checkpoint lacks read as zero. */
st_status ckpt_source_read(ckpt_source *src, ckpt_state state, const char *name,
                           const unit_param *p, int T, int t, int64_t first, int64_t count,
                           float *dst);

#endif /* ST_ENGINE_CHECKPOINT_CKPT_SOURCE_H */
