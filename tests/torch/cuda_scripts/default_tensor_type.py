"""Meta's original llama code: new tensors are CUDA half ones by default."""
import torch

torch.set_default_tensor_type(torch.cuda.HalfTensor)
x = torch.empty(3)
assert x.is_cuda and x.dtype == torch.float16 and torch.get_default_dtype() == torch.float16, (x.device, x.dtype)
assert x.type() == "torch.cuda.HalfTensor", x.type()
layer = torch.nn.Linear(4, 4)
assert layer.weight.is_cuda and layer.weight.dtype == torch.float16
assert torch.tensor([1, 2]).is_cuda  # every new tensor, as with a CUDA default type
torch.set_default_tensor_type("torch.cuda.BFloat16Tensor")
assert torch.zeros(2).dtype == torch.bfloat16 and torch.zeros(2).is_cuda
try:
    torch.set_default_tensor_type(torch.cuda.LongTensor)
except TypeError as exc:  # as on CUDA: floating-point types only
    assert "floating" in str(exc), exc
else:
    raise AssertionError("an integer default type must be refused")
torch.set_default_tensor_type(torch.FloatTensor)
y = torch.empty(3)
assert not y.is_cuda and y.dtype == torch.float32, (y.device, y.dtype)
print("OK default_tensor_type")
