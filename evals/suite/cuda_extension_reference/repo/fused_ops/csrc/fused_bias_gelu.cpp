// Python bindings for the fused bias + GELU (tanh approximation) kernels.
#include <torch/extension.h>

torch::Tensor fused_bias_gelu_forward_cuda(torch::Tensor x, torch::Tensor bias);
torch::Tensor fused_bias_gelu_backward_cuda(torch::Tensor grad, torch::Tensor x, torch::Tensor bias);

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x)

torch::Tensor forward(torch::Tensor x, torch::Tensor bias) {
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  TORCH_CHECK(x.size(-1) == bias.size(0), "bias must match the last dimension of x");
  return fused_bias_gelu_forward_cuda(x, bias);
}

torch::Tensor backward(torch::Tensor grad, torch::Tensor x, torch::Tensor bias) {
  CHECK_INPUT(grad);
  CHECK_INPUT(x);
  CHECK_INPUT(bias);
  return fused_bias_gelu_backward_cuda(grad, x, bias);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "fused bias + GELU forward (CUDA)");
  m.def("backward", &backward, "fused bias + GELU backward (CUDA)");
}
