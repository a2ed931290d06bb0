"""Like nanochat/fp8.py: Linear layers swapped for fp8 ones whose matmul is torch._scaled_mm."""
import torch
import torch.nn as nn


class Float8Linear(nn.Linear):
    def forward(self, x):
        xf = x.reshape(-1, x.size(-1)).to(torch.float8_e4m3fn)
        wf = self.weight.to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=x.device)
        out = torch._scaled_mm(xf, wf, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return out.reshape(*x.shape[:-1], -1)


def convert_to_float8_training(module, *, config=None, module_filter_fn=None):
    for name, child in list(module.named_children()):
        convert_to_float8_training(child, config=config, module_filter_fn=module_filter_fn)
        if type(child) is nn.Linear and (module_filter_fn is None or module_filter_fn(child, name)):
            new = Float8Linear(child.in_features, child.out_features, bias=child.bias is not None)
            new.weight = child.weight
            setattr(module, name, new)
    return module
