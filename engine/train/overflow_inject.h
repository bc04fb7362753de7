/* overflow_inject.h - the test hook ST_TEST_INJECT_OVERFLOW (core/env.h): at the step and on the
 * world rank it names, the training step writes an inf into the rank's first owned gradient,
 * as an fp16 overflow would, so tests can check that every rank skips the step together. It
 * only ever touches the one element; with the variable unset it does nothing. */
#ifndef ST_ENGINE_TRAIN_OVERFLOW_INJECT_H
#define ST_ENGINE_TRAIN_OVERFLOW_INJECT_H

#include "engine/model/gpt.h"

/* Writes the inf into unit 0's first owned gradient when ST_TEST_INJECT_OVERFLOW is
 * "<step>:<world rank>" for this step and rank. A value that is neither "none" nor two
 * non-negative integers joined by ':' is ST_ERR_INVALID_ARG. */
st_status overflow_inject(gpt_model *model, int step);

#endif /* ST_ENGINE_TRAIN_OVERFLOW_INJECT_H */
