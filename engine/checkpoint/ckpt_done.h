/* ckpt_done.h - a checkpoint directory's last two files: manifest.json, then DONE, which marks
 * the directory complete and records the step and the manifest's SHA-256 (the manifest records
 * the rank files'), so that every byte of a checkpoint is checked before it is trusted: an
 * edited manifest (say, another vocabulary) would otherwise be read as the truth. */
#ifndef ST_ENGINE_CHECKPOINT_CKPT_DONE_H
#define ST_ENGINE_CHECKPOINT_CKPT_DONE_H

#include "engine/checkpoint/ckpt_manifest.h"

/* Writes dir/manifest.json, then dir/DONE: "step <N>\nmanifest sha256 <hex>\n". */
st_status ckpt_done_write(const char *dir, const ckpt_manifest *m);

/* Checks `dir`, whose DONE exists and whose manifest `m` was read, against its marks: DONE's
 * step and the directory's name (when it is step_<N>) are the manifest's, and the manifest's
 * SHA-256 is the one DONE records (a DONE written before 2026-11-29 records none: its step is
 * checked alone). ST_ERR_FORMAT naming the file and the difference otherwise. */
st_status ckpt_done_check(const char *dir, const ckpt_manifest *m);

#endif /* ST_ENGINE_CHECKPOINT_CKPT_DONE_H */
