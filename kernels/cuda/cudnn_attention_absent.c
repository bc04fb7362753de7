/* cudnn_attention_absent.c - cudnn_attention.h in a CUDA build made without the cuDNN
 * frontend's headers (tools/setup.sh installs them; kernels/cuda/BUILD chooses this file): there
 * is no cuDNN attention, so a context asking for it runs the other kinds (context.cu). */
#include "core/error.h"
#include "kernels/cuda/cudnn_attention.h"

int cuda_cudnn_attention_built(void) { return 0; }

st_status cuda_cudnn_attention_create(cuda_cudnn_attention **out, int sm_version, void *workspace,
                                      size_t workspace_bytes) {
  (void)sm_version;
  (void)workspace;
  (void)workspace_bytes;
  *out = NULL;
  return st_error(ST_ERR_UNSUPPORTED,
                  "this build has no cuDNN attention: the cuDNN frontend headers were not "
                  "installed when it was built (tools/setup.sh)");
}

void cuda_cudnn_attention_destroy(cuda_cudnn_attention *a) { (void)a; }

st_status cuda_cudnn_attention_forward(cuda_cudnn_attention *a, const st_tensor *out,
                                       const st_tensor *state, const st_tensor *qkv, int64_t n_head,
                                       const st_stream *stream, int *ran) {
  (void)a;
  (void)out;
  (void)state;
  (void)qkv;
  (void)n_head;
  (void)stream;
  *ran = 0;
  return ST_OK;
}

st_status cuda_cudnn_attention_backward(cuda_cudnn_attention *a, const st_tensor *dqkv,
                                        const st_tensor *dout, const st_tensor *qkv,
                                        const st_tensor *out, const st_tensor *state,
                                        int64_t n_head, const st_stream *stream, int *ran) {
  (void)a;
  (void)dqkv;
  (void)dout;
  (void)qkv;
  (void)out;
  (void)state;
  (void)n_head;
  (void)stream;
  *ran = 0;
  return ST_OK;
}
