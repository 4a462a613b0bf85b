// The CudaMlp's elementwise kernels. Compiled as C++17 by nvcc, so this file
// and its header use no C++20 and no collie header beyond plain types.
#include "collie/nn/cuda/mlp_kernels.h"

#include <cuda_runtime.h>

namespace collie::nn::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void add_bias(float* y, const float* b, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * cols) y[i] += b[i % cols];
}

__global__ void relu_forward(const float* x, float* y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward(const float* y, const float* dy, float* dx, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void fill(float* x, float value, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

// One thread per row: classes are few (10), batches are what is wide.
__global__ void softmax_cross_entropy(const float* z, const int64_t* labels, int64_t rows,
                                      int64_t classes, float inv_rows, float* grad,
                                      float* row_loss) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* zr = z + r * classes;
  float shift = zr[0];
  for (int64_t c = 1; c < classes; ++c) shift = fmaxf(shift, zr[c]);
  float sum = 0.0f;
  for (int64_t c = 0; c < classes; ++c) sum += expf(zr[c] - shift);
  const float log_sum = logf(sum);
  const int64_t label = labels[r];
  row_loss[r] = log_sum + shift - zr[label];
  for (int64_t c = 0; c < classes; ++c)
    grad[r * classes + c] = expf(zr[c] - shift - log_sum) * inv_rows;
  grad[r * classes + label] -= inv_rows;
}

__global__ void scale(float* x, float factor, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

}  // namespace

// A launch error (bad configuration) is reported by the next CUDA call the
// caller checks, as with any asynchronous kernel.
void launch_add_bias(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols > 0) add_bias<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, b, rows, cols);
}

void launch_relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n > 0) relu_forward<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
}

void launch_relu_backward(const float* y, const float* dy, float* dx, int64_t n,
                          cudaStream_t stream) {
  if (n > 0) relu_backward<<<blocks_for(n), kThreads, 0, stream>>>(y, dy, dx, n);
}

void launch_fill(float* x, float value, int64_t n, cudaStream_t stream) {
  if (n > 0) fill<<<blocks_for(n), kThreads, 0, stream>>>(x, value, n);
}

void launch_softmax_cross_entropy(const float* z, const int64_t* labels, int64_t rows,
                                  int64_t classes, float inv_rows, float* grad, float* row_loss,
                                  cudaStream_t stream) {
  if (rows > 0)
    softmax_cross_entropy<<<blocks_for(rows), kThreads, 0, stream>>>(z, labels, rows, classes,
                                                                     inv_rows, grad, row_loss);
}

void launch_scale(float* x, float factor, int64_t n, cudaStream_t stream) {
  if (n > 0) scale<<<blocks_for(n), kThreads, 0, stream>>>(x, factor, n);
}

}  // namespace collie::nn::cuda
