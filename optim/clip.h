/* clip.h - global-norm gradient clipping. The norm itself is a sum of squares over the owned
 * shards, reduced over the shard and tp groups by the engine; this is the scalar rule applied
 * to it, identical to torch.nn.utils.clip_grad_norm_: scale = min(1, max_norm / (norm + 1e-6)).
 * max_norm <= 0 disables clipping (scale 1). */
#ifndef ST_OPTIM_CLIP_H
#define ST_OPTIM_CLIP_H

float clip_scale(double global_norm, double max_norm);

#endif /* ST_OPTIM_CLIP_H */
