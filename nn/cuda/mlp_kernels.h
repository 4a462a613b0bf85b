// Launchers of CudaMlp's elementwise kernels (nn/cuda/mlp_kernels.cu), all
// asynchronous on `stream`. A private header of nn/cuda: it includes
// cuda_runtime.h and is C++17, which is what nvcc compiles here.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace collie::nn::cuda {

// y[r, c] += b[c] over a row-major [rows, cols] matrix.
void launch_add_bias(float* y, const float* b, int64_t rows, int64_t cols, cudaStream_t stream);
void launch_relu_forward(const float* x, float* y, int64_t n, cudaStream_t stream);
// dx = dy where y > 0, else 0.
void launch_relu_backward(const float* y, const float* dy, float* dx, int64_t n,
                          cudaStream_t stream);
void launch_fill(float* x, float value, int64_t n, cudaStream_t stream);
// Per row: loss = logsumexp(z) - z[label]; grad = (softmax(z) - onehot) * inv_rows.
void launch_softmax_cross_entropy(const float* z, const int64_t* labels, int64_t rows,
                                  int64_t classes, float inv_rows, float* grad, float* row_loss,
                                  cudaStream_t stream);
// x[i] *= factor (DDP divides a bucket by the world size before the sum).
void launch_scale(float* x, float factor, int64_t n, cudaStream_t stream);

}  // namespace collie::nn::cuda
