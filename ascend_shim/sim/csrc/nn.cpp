// Kernels for ops that torch routes differently for an accelerator than for the CPU, so the CPU fallback never
// sees them: convolutions go to convolution_overrideable, LSTM/GRU cells to the fused _thnn_* cells (as on
// CUDA). Convolutions run the CPU convolution on host aliases; the fused cells follow the CUDA kernels' math
// (including their workspace layout) with npu ops.
#include "sim.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

namespace ascend_sim {
namespace {

void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* name) {
  TORCH_CHECK(!b.defined() || a.device() == b.device(),
              "Expected all tensors to be on the same device, but found at least two devices, ", a.device(),
              " and ", b.device(), "! (when checking argument for argument ", name, ")");
}

// ---- convolution -----------------------------------------------------------------------------------------

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
  check_same_device(input, weight, "weight");
  const at::Tensor b = bias.value_or(at::Tensor());
  check_same_device(input, b, "bias");
  const c10::DeviceGuard guard(input.device());
  const at::Tensor out = at::convolution(host_alias(input), host_alias(weight), host_alias(b), stride, padding,
                                         dilation, transposed, output_padding, groups);
  return adopt_host_tensor(out, input.device().index());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> output_mask) {
  check_same_device(input, grad_output, "grad_output");
  check_same_device(input, weight, "weight");
  const c10::DeviceGuard guard(input.device());
  // The bias gradient needs the number of output channels.
  const std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(host_alias(grad_output), host_alias(input), host_alias(weight),
                                               bias_sizes, stride, padding, dilation, transposed, output_padding,
                                               groups, output_mask);
  const auto index = input.device().index();
  return {adopt_host_tensor(gi, index), adopt_host_tensor(gw, index), adopt_host_tensor(gb, index)};
}

// ---- fused RNN cells -------------------------------------------------------------------------------------

at::Tensor with_biases(at::Tensor gates, const std::optional<at::Tensor>& b1, const std::optional<at::Tensor>& b2) {
  if (b1.has_value() && b1->defined()) gates = gates + *b1;
  if (b2.has_value() && b2->defined()) gates = gates + *b2;
  return gates;
}

// Returns (hy, cy, workspace); workspace holds the activated gates [i, f, g, o].
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell(const at::Tensor& input_gates,
                                                         const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                         const std::optional<at::Tensor>& input_bias,
                                                         const std::optional<at::Tensor>& hidden_bias) {
  const auto chunks = with_biases(input_gates + hidden_gates, input_bias, hidden_bias).chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid(), g = chunks[2].tanh(), o = chunks[3].sigmoid();
  const at::Tensor cy = f * cx + i * g;
  const at::Tensor hy = o * cy.tanh();
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

// Returns (grad_gates, grad_cx, grad_bias).
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                  const std::optional<at::Tensor>& grad_cy,
                                                                  const at::Tensor& cx, const at::Tensor& cy,
                                                                  const at::Tensor& workspace, bool has_bias) {
  const auto gates = workspace.chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor ghy = grad_hy.has_value() && grad_hy->defined() ? *grad_hy : at::zeros_like(cy);
  const at::Tensor tanh_cy = cy.tanh();
  const at::Tensor go = ghy * tanh_cy * o * (1 - o);
  at::Tensor gc = ghy * o * (1 - tanh_cy * tanh_cy);
  if (grad_cy.has_value() && grad_cy->defined()) gc = gc + *grad_cy;
  const at::Tensor gi = gc * g * i * (1 - i);
  const at::Tensor gf = gc * cx * f * (1 - f);
  const at::Tensor gg = gc * i * (1 - g * g);
  const at::Tensor grad_gates = at::cat({gi, gf, gg, go}, 1);
  return {grad_gates, gc * f, has_bias ? grad_gates.sum(0) : at::Tensor()};
}

// Returns (hy, workspace); workspace holds [r, i, n, hx, hn] as the CUDA kernel does.
std::tuple<at::Tensor, at::Tensor> gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                            const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                            const std::optional<at::Tensor>& hidden_bias) {
  const auto in = with_biases(input_gates, input_bias, std::nullopt).chunk(3, 1);
  const auto hid = with_biases(hidden_gates, hidden_bias, std::nullopt).chunk(3, 1);
  const at::Tensor r = (in[0] + hid[0]).sigmoid();
  const at::Tensor i = (in[1] + hid[1]).sigmoid();
  const at::Tensor n = (in[2] + r * hid[2]).tanh();
  const at::Tensor hy = n + i * (hx - n);
  return {hy, at::cat({r, i, n, hx, hid[2]}, 1)};
}

// Returns (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &i = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor gi = grad_hy * (hx - n) * i * (1 - i);
  const at::Tensor ghx = grad_hy * i;
  const at::Tensor gn = grad_hy * (1 - i) * (1 - n * n);
  const at::Tensor ghn = gn * r;
  const at::Tensor gr = gn * hn * r * (1 - r);
  const at::Tensor grad_input_gates = at::cat({gr, gi, gn}, 1);
  const at::Tensor grad_hidden_gates = at::cat({gr, gi, ghn}, 1);
  if (!has_bias) return {grad_input_gates, grad_hidden_gates, ghx, at::Tensor(), at::Tensor()};
  return {grad_input_gates, grad_hidden_gates, ghx, grad_input_gates.sum(0), grad_hidden_gates.sum(0)};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", convolution);
  m.impl("convolution_backward_overrideable", convolution_backward);
  m.impl("_thnn_fused_lstm_cell", lstm_cell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  m.impl("_thnn_fused_gru_cell", gru_cell);
  m.impl("_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace
}  // namespace ascend_sim
