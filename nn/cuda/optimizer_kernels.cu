// The optimizers' update kernels (CudaSgd, CudaAdamW). Compiled as C++17 by
// nvcc, so this file and its header use no C++20 and no collie header beyond
// plain types.
#include "collie/nn/cuda/optimizer_kernels.h"

#include <cuda_runtime.h>

namespace collie::nn::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float wd,
                           float momentum, float keep, bool nesterov, bool first) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float d = g[i];
  if (wd != 0.0f) d = d + wd * w[i];
  if (momentum != 0.0f) {
    buf[i] = first ? d : buf[i] * momentum + keep * d;
    d = nesterov ? d + momentum * buf[i] : buf[i];
  }
  w[i] = w[i] - lr * d;
}

// The same float operations, in the same order, as AdamW::step's loop.
__global__ void adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float decay,
                             float beta1, float beta2, float step_size, float bc2_sqrt, float eps) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float gi = g[i];
  float wi = w[i] * decay;
  const float mi = m[i] * beta1 + (1.0f - beta1) * gi;
  const float vi = v[i] * beta2 + (1.0f - beta2) * gi * gi;
  m[i] = mi;
  v[i] = vi;
  const float denom = sqrtf(vi) / bc2_sqrt + eps;
  wi -= step_size * (mi / denom);
  w[i] = wi;
}

}  // namespace

// A launch error (bad configuration) is reported by the next CUDA call the
// caller checks, as with any asynchronous kernel.
void launch_sgd_update(float* w, const float* g, float* buf, int64_t n, float lr, float wd,
                       float momentum, float keep, bool nesterov, bool first, cudaStream_t stream) {
  if (n > 0)
    sgd_update<<<blocks_for(n), kThreads, 0, stream>>>(w, g, buf, n, lr, wd, momentum, keep,
                                                       nesterov, first);
}

void launch_adamw_update(float* w, const float* g, float* m, float* v, int64_t n, float decay,
                         float beta1, float beta2, float step_size, float bc2_sqrt, float eps,
                         cudaStream_t stream) {
  if (n > 0)
    adamw_update<<<blocks_for(n), kThreads, 0, stream>>>(w, g, m, v, n, decay, beta1, beta2,
                                                         step_size, bc2_sqrt, eps);
}

}  // namespace collie::nn::cuda
