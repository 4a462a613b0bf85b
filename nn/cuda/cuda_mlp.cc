#include "collie/nn/cuda/cuda_mlp.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "collie/nn/cuda/device_array.h"
#include "collie/nn/cuda/mlp_kernels.h"

#include "collie/base/check.h"
#include "collie/base/error.h"
#include "collie/base/logging.h"
#include "collie/base/str_cat.h"
#include "collie/runtime/cuda/cuda_device.h"

namespace collie::nn::cuda {

namespace {

void cublas_ok(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw BackendError(str_cat("cuBLAS ", what, " failed with status ", static_cast<int>(status)));
}

}  // namespace

struct CudaMlp::Impl {
  struct Layer {
    bool linear = false;  // else ReLU
    int64_t in = 0, out = 0;
    size_t weight = 0, bias = 0;      // offsets into params/grads
    size_t w_index = 0, b_index = 0;  // parameter indices (named_parameters order)
  };

  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<Layer> layers;
  std::vector<ParameterInfo> infos;   // named_parameters order
  std::vector<size_t> param_offsets;  // each one's offset in params/grads
  // Where each gradient lives now: its slice of `grads`, or a DDP bucket.
  std::vector<float*> grad_ptr;
  std::vector<DdpModel::Hook> hooks;
  int64_t in_features = 0, classes = 0;
  size_t num_params = 0;
  int64_t last_batch = 0;  // of the last forward, for backward's checks
  DeviceArray<float> params, grads;
  std::vector<std::unique_ptr<DeviceArray<float>>>
      acts;  // acts[0] input, acts[i+1] layer i's output
  DeviceArray<float> grad_a, grad_b, ones, row_loss;
  DeviceArray<int64_t> labels;

  ~Impl() {
    if (handle) cublasDestroy(handle);
    if (stream) cudaStreamDestroy(stream);
  }

  int64_t width_after(size_t i) const {
    return i == 0 ? in_features : (layers[i - 1].linear ? layers[i - 1].out : width_after(i - 1));
  }

  void ensure_batch(int64_t batch) {
    const size_t b = static_cast<size_t>(batch);
    acts.resize(layers.size() + 1);
    size_t widest = static_cast<size_t>(in_features);
    for (size_t i = 0; i <= layers.size(); ++i) {
      if (!acts[i]) acts[i] = std::make_unique<DeviceArray<float>>();
      acts[i]->reserve(b * static_cast<size_t>(width_after(i)));
      widest = std::max(widest, static_cast<size_t>(width_after(i)));
    }
    grad_a.reserve(b * widest);
    grad_b.reserve(b * widest);
    row_loss.reserve(b);
    labels.reserve(b);
    if (ones.size() < b) {
      ones.reserve(b);
      launch_fill(ones.get(), 1.0f, static_cast<int64_t>(b), stream);
    }
  }

  // Row-major Y[B, out] = X[B, in] W^T + b, i.e. column-major
  // Y^T[out, B] = W[out, in] (stored as W^T column-major, hence OP_T) X^T.
  void forward(int64_t batch) {
    const float one = 1.0f, zero = 0.0f;
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      const float* x = acts[i]->get();
      float* y = acts[i + 1]->get();
      if (l.linear) {
        cublas_ok(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(l.out),
                              static_cast<int>(batch), static_cast<int>(l.in), &one,
                              params.get() + l.weight, static_cast<int>(l.in), x,
                              static_cast<int>(l.in), &zero, y, static_cast<int>(l.out)),
                  "sgemm (forward)");
        launch_add_bias(y, params.get() + l.bias, batch, l.out, stream);
      } else {
        const int64_t n = batch * width_after(i);
        launch_relu_forward(x, y, n, stream);
      }
    }
  }

  float* own_grad(size_t i) const { return grads.get() + param_offsets[i]; }
  size_t numel(size_t i) const { return infos[i].numel(); }

  void fire_ready(size_t i) {
    if (hooks[i]) hooks[i]();
  }

  // dW[out, in] += dY^T X   (column-major: dW^T[in, out] += X^T[in, B] dY[B, out])
  // db[out]     += dY^T 1
  // dX[B, in]    = dY W     (column-major: dX^T[in, B] = W^T[in, out] dY^T[out, B])
  // Each Linear's weight and bias gradients are final once their products
  // are queued: their hooks fire then, before the input-gradient product.
  // Runs with `stream` current, so a collective a hook launches is ordered
  // after the products queued so far.
  void backward(int64_t batch, const float* grad_logits) {
    CurrentStreamGuard current(stream);
    const float one = 1.0f, zero = 0.0f;
    size_t first_linear = 0;
    while (first_linear < layers.size() && !layers[first_linear].linear) ++first_linear;
    const float* upstream = grad_logits;
    for (size_t k = layers.size(); k-- > first_linear;) {
      const Layer& l = layers[k];
      float* downstream =
          (k == first_linear) ? nullptr : (upstream == grad_a.get() ? grad_b.get() : grad_a.get());
      if (l.linear) {
        cublas_ok(
            cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(l.in),
                        static_cast<int>(l.out), static_cast<int>(batch), &one, acts[k]->get(),
                        static_cast<int>(l.in), upstream, static_cast<int>(l.out), &one,
                        grad_ptr[l.w_index], static_cast<int>(l.in)),
            "sgemm (weight gradient)");
        cublas_ok(cublasSgemv(handle, CUBLAS_OP_N, static_cast<int>(l.out), static_cast<int>(batch),
                              &one, upstream, static_cast<int>(l.out), ones.get(), 1, &one,
                              grad_ptr[l.b_index], 1),
                  "sgemv (bias gradient)");
        fire_ready(l.w_index);
        fire_ready(l.b_index);
        if (downstream)
          cublas_ok(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(l.in),
                                static_cast<int>(batch), static_cast<int>(l.out), &one,
                                params.get() + l.weight, static_cast<int>(l.in), upstream,
                                static_cast<int>(l.out), &zero, downstream, static_cast<int>(l.in)),
                    "sgemm (input gradient)");
      } else if (downstream) {
        const int64_t n = batch * width_after(k);
        launch_relu_backward(acts[k + 1]->get(), upstream, downstream, n, stream);
      }
      if (!downstream) break;
      upstream = downstream;
    }
  }

  void upload_input(const Tensor& input) {
    COLLIE_ARG_CHECK(input.ndim() >= 1 && input.dim(0) > 0, "CudaMlp needs a non-empty batch, got ",
                     shape_to_string(input.shape()));
    const int64_t batch = input.dim(0);
    COLLIE_ARG_CHECK_EQ(static_cast<int64_t>(input.numel()) / batch, in_features,
                        "CudaMlp input features");
    ensure_batch(batch);
    collie::cuda::check(cudaMemcpyAsync(acts[0]->get(), input.data(), input.numel() * sizeof(float),
                                        cudaMemcpyHostToDevice, stream),
                        "cudaMemcpyAsync (input)");
  }
};

CudaMlp::CudaMlp(Sequential& cpu_model, int device)
    : impl_(std::make_unique<Impl>()), device_(device) {
  Impl& m = *impl_;
  for (size_t i = 0; i < cpu_model.size(); ++i) {
    auto& layer = cpu_model.layer(i);
    if (auto* linear = dynamic_cast<Linear*>(&layer)) {
      COLLIE_ARG_CHECK(linear->bias() != nullptr, "CudaMlp: layer ", i,
                       " is a Linear without bias");
      Impl::Layer l{
          true, linear->in_features(), linear->out_features(), m.num_params,
          m.num_params + static_cast<size_t>(linear->in_features() * linear->out_features())};
      l.w_index = m.param_offsets.size();
      l.b_index = l.w_index + 1;
      m.param_offsets.push_back(l.weight);
      m.param_offsets.push_back(l.bias);
      COLLIE_ARG_CHECK(m.layers.empty() || m.classes == 0 || m.classes == l.in, "CudaMlp: layer ",
                       i, " expects ", l.in, " inputs but the previous Linear gives ", m.classes);
      if (m.in_features == 0) m.in_features = l.in;
      m.classes = l.out;
      m.num_params += static_cast<size_t>(l.in * l.out + l.out);
      m.layers.push_back(l);
    } else if (dynamic_cast<ReLU*>(&layer)) {
      m.layers.push_back(Impl::Layer{});
    } else if (!dynamic_cast<Flatten*>(&layer)) {
      throw InvalidArgument(str_cat("CudaMlp supports Flatten, Linear and ReLU; layer ", i, " is ",
                                    layer.describe()));
    }
  }
  COLLIE_ARG_CHECK(m.classes > 0, "CudaMlp: the model has no Linear layer");
  // Names and shapes are the CPU model's (weight, then bias, per Linear):
  // the same parameters, in the same order, as the flat buffers.
  for (auto& [name, p] : cpu_model.named_parameters()) m.infos.push_back({name, p->shape()});
  COLLIE_CHECK_EQ(m.infos.size(), m.param_offsets.size(), "CudaMlp parameter list");
  for (size_t i = 0; i < m.infos.size(); ++i) {
    const size_t end = i + 1 < m.param_offsets.size() ? m.param_offsets[i + 1] : m.num_params;
    COLLIE_CHECK_EQ(m.infos[i].numel(), end - m.param_offsets[i], "CudaMlp parameter ",
                    m.infos[i].name);
  }
  m.hooks.resize(m.infos.size());
  collie::cuda::set_device(device);
  collie::cuda::check(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking),
                      "cudaStreamCreate");
  cublas_ok(cublasCreate(&m.handle), "create");
  cublas_ok(cublasSetStream(m.handle, m.stream), "set stream");
  m.params.reserve(m.num_params);
  m.grads.reserve(m.num_params);
  for (size_t i = 0; i < m.infos.size(); ++i) m.grad_ptr.push_back(m.own_grad(i));
  ops_ = std::make_unique<CudaOps>(device, m.stream);
  std::vector<float> host;
  host.reserve(m.num_params);
  for (auto* p : cpu_model.parameters()) host.insert(host.end(), p->data(), p->data() + p->numel());
  COLLIE_CHECK_EQ(host.size(), m.num_params, "CudaMlp parameter count");
  collie::cuda::check(
      cudaMemcpy(m.params.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy (parameters)");
  zero_grad();
}

CudaMlp::~CudaMlp() = default;

void CudaMlp::forward(const Tensor& input, Tensor& logits) {
  Impl& m = *impl_;
  collie::cuda::set_device(device_);
  m.upload_input(input);
  const int64_t batch = input.dim(0);
  m.forward(batch);
  m.last_batch = batch;
  logits.resize({batch, m.classes});
  collie::cuda::check(
      cudaMemcpyAsync(logits.data(), m.acts.back()->get(), logits.numel() * sizeof(float),
                      cudaMemcpyDeviceToHost, m.stream),
      "cudaMemcpyAsync (logits)");
  collie::cuda::check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize");
}

float CudaMlp::forward_backward(const Tensor& input, std::span<const int64_t> labels) {
  Impl& m = *impl_;
  collie::cuda::set_device(device_);
  const int64_t batch = input.ndim() ? input.dim(0) : 0;
  COLLIE_ARG_CHECK_EQ(labels.size(), static_cast<size_t>(batch), "one label per example");
  for (size_t i = 0; i < labels.size(); ++i)
    COLLIE_ARG_CHECK(labels[i] >= 0 && labels[i] < m.classes, "label ", labels[i], " of example ",
                     i, " is outside [0, ", m.classes, ")");
  m.upload_input(input);
  collie::cuda::check(cudaMemcpyAsync(m.labels.get(), labels.data(), labels.size_bytes(),
                                      cudaMemcpyHostToDevice, m.stream),
                      "cudaMemcpyAsync (labels)");
  m.forward(batch);
  m.last_batch = batch;
  // The logits' gradient goes to grad_b: backward's first downstream
  // buffer is then grad_a, and the two ping-pong from there.
  launch_softmax_cross_entropy(m.acts.back()->get(), m.labels.get(), batch, m.classes,
                               1.0f / static_cast<float>(batch), m.grad_b.get(), m.row_loss.get(),
                               m.stream);
  m.backward(batch, m.grad_b.get());
  std::vector<float> losses(static_cast<size_t>(batch));
  collie::cuda::check(
      cudaMemcpyAsync(losses.data(), m.row_loss.get(), losses.size() * sizeof(float),
                      cudaMemcpyDeviceToHost, m.stream),
      "cudaMemcpyAsync (loss)");
  collie::cuda::check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize");
  double total = 0;
  for (float l : losses) total += l;
  return static_cast<float>(total / static_cast<double>(batch));
}

void CudaMlp::backward(const Tensor& input, const Tensor& logits, const Tensor& grad_logits) {
  Impl& m = *impl_;
  collie::cuda::set_device(device_);
  COLLIE_ARG_CHECK(m.last_batch > 0 && input.ndim() >= 1 && input.dim(0) == m.last_batch,
                   "CudaMlp::backward: the input is not the last forward's (batch ", m.last_batch,
                   ", got ", shape_to_string(input.shape()), ")");
  COLLIE_ARG_CHECK_EQ(grad_logits.numel(), static_cast<size_t>(m.last_batch * m.classes),
                      "CudaMlp::backward: d(loss)/d(logits) of shape ",
                      shape_to_string(grad_logits.shape()), " for a batch of ", m.last_batch,
                      " and ", m.classes, " classes");
  // The logits' gradient goes to grad_b, as in forward_backward.
  collie::cuda::check(
      cudaMemcpyAsync(m.grad_b.get(), grad_logits.data(), grad_logits.numel() * sizeof(float),
                      cudaMemcpyHostToDevice, m.stream),
      "cudaMemcpyAsync (logits gradient)");
  m.backward(m.last_batch, m.grad_b.get());
}

void CudaMlp::zero_grad() {
  Impl& m = *impl_;
  collie::cuda::set_device(device_);
  for (size_t i = 0; i < m.infos.size(); ++i)
    collie::cuda::check(cudaMemsetAsync(m.grad_ptr[i], 0, m.numel(i) * sizeof(float), m.stream),
                        "cudaMemsetAsync");
}

TensorView CudaMlp::parameters() {
  return TensorView{impl_->params.get(), impl_->num_params, DataType::kFloat32,
                    Device::cuda(device_)};
}

TensorView CudaMlp::gradients() {
  const Impl& m = *impl_;
  for (size_t i = 0; i < m.infos.size(); ++i)
    COLLIE_CHECK(m.grad_ptr[i] == m.own_grad(i), "CudaMlp::gradients(): gradient ", m.infos[i].name,
                 " lives in a DDP bucket, so the gradients are not one flat array now");
  return TensorView{m.grads.get(), m.num_params, DataType::kFloat32, Device::cuda(device_)};
}

TensorView CudaMlp::gradient(size_t i) {
  Impl& m = *impl_;
  COLLIE_ARG_CHECK_LT(i, m.infos.size(), "CudaMlp parameter index");
  return TensorView{m.grad_ptr[i], m.numel(i), DataType::kFloat32, Device::cuda(device_)};
}

std::vector<float> CudaMlp::gradients_to_host() const {
  const Impl& m = *impl_;
  collie::cuda::set_device(device_);
  std::vector<float> out(m.num_params);
  for (size_t i = 0; i < m.infos.size(); ++i)
    collie::cuda::check(
        cudaMemcpyAsync(out.data() + m.param_offsets[i], m.grad_ptr[i], m.numel(i) * sizeof(float),
                        cudaMemcpyDeviceToHost, m.stream),
        "cudaMemcpyAsync (gradients)");
  collie::cuda::check(cudaStreamSynchronize(m.stream), "cudaStreamSynchronize");
  return out;
}

void* CudaMlp::stream() const { return impl_->stream; }

std::vector<ParameterInfo> CudaMlp::parameter_info() { return impl_->infos; }

TensorView CudaMlp::parameter(size_t i) {
  Impl& m = *impl_;
  COLLIE_ARG_CHECK_LT(i, m.infos.size(), "CudaMlp parameter index");
  return TensorView{m.params.get() + m.param_offsets[i], m.numel(i), DataType::kFloat32,
                    Device::cuda(device_)};
}

void CudaMlp::use_grad_storage(size_t i, float* storage) {
  Impl& m = *impl_;
  COLLIE_ARG_CHECK_LT(i, m.infos.size(), "CudaMlp parameter index");
  collie::cuda::set_device(device_);
  if (storage != m.grad_ptr[i])
    collie::cuda::check(cudaMemcpyAsync(storage, m.grad_ptr[i], m.numel(i) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, m.stream),
                        "cudaMemcpyAsync (gradient into a DDP bucket)");
  m.grad_ptr[i] = storage;
}

void CudaMlp::use_own_grad_storage(size_t i) noexcept {
  Impl& m = *impl_;
  if (i >= m.infos.size() || m.grad_ptr[i] == m.own_grad(i)) return;
  cudaSetDevice(device_);
  // Queued on the stream before the bucket's cudaFree (CudaOps::deallocate
  // waits for the stream first).
  cudaError_t e = cudaMemcpyAsync(m.own_grad(i), m.grad_ptr[i], m.numel(i) * sizeof(float),
                                  cudaMemcpyDeviceToDevice, m.stream);
  if (e != cudaSuccess) {
    COLLIE_LOG(kWarn) << "CudaMlp: copying gradient " << m.infos[i].name
                      << " back from its DDP bucket failed: " << cudaGetErrorString(e);
  }
  m.grad_ptr[i] = m.own_grad(i);
}

void CudaMlp::set_grad_ready_hook(size_t i, Hook hook) { impl_->hooks.at(i) = std::move(hook); }

void CudaMlp::copy_parameters_to(Sequential& cpu_model) const {
  std::vector<float> host(impl_->num_params);
  collie::cuda::check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize");
  collie::cuda::check(cudaMemcpy(host.data(), impl_->params.get(), host.size() * sizeof(float),
                                 cudaMemcpyDeviceToHost),
                      "cudaMemcpy (parameters)");
  size_t pos = 0;
  for (auto* p : cpu_model.parameters()) {
    COLLIE_ARG_CHECK_LE(pos + p->numel(), host.size(),
                        "copy_parameters_to: a model of another size");
    std::copy(host.begin() + pos, host.begin() + pos + p->numel(), p->data());
    pos += p->numel();
  }
  COLLIE_ARG_CHECK_EQ(pos, host.size(), "copy_parameters_to: a model of another size");
}

}  // namespace collie::nn::cuda
