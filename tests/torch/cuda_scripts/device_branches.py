"""The CUDA comparisons that make unmodified code silently take its CPU branch on an NPU."""
import torch

x = torch.randn(4, device="cuda")
took = []
if x.device.type == "cuda":
    took.append("device.type")
if str(x.device).startswith("cuda"):
    took.append("startswith")
if "cuda" in str(x.device):
    took.append("in")
if x.device.type != "cuda":
    took.append("WRONG")
device = "cuda"
if device == "cuda":
    took.append("plain string")
assert took == ["device.type", "startswith", "in", "plain string"], took
print("OK device_branches")
