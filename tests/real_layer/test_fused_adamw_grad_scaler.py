"""The shim's NpuFusedAdamW (``optim='adamw_torch_fused'``) under Huawei's ``torch.npu.amp.GradScaler``, which
unscales and inf-checks the fused optimizer's combined gradient buffers, not ``.grad``: with the gradients zeroed by
``Module.zero_grad()`` (``set_to_none=True``, as the HF Trainer does every step), each backward's new ``.grad`` must
reach those buffers before ``unscale_`` -- else it stays scaled (the Trainer logged grad_norm x65536 from step 2 and
clipped scaled gradients), an overflow in it goes unseen, and a skipped first step's inf skips every later step."""
from .conftest import run_shim

_SCRIPT = """
import torch
from ascend_shim.targets._shared.fused_adamw import fused_adamw_class

torch.manual_seed(0)
model = torch.nn.Linear(8, 4).cuda()
opt = fused_adamw_class()(model.parameters(), lr=1e-3)
scaler = torch.npu.amp.GradScaler(init_scale=1024.0)
x = torch.randn(16, 8).cuda()
for step in range(4):
    model.zero_grad()  # set_to_none=True
    loss = model(x).pow(2).mean()
    want = torch.stack([g.norm() for g in torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)])
    scaler.scale(loss).backward()
    if step in (0, 2):  # an overflow: the first step's (fp16's usual one) and a later one
        with torch.no_grad():
            model.weight.grad[0, 0] = float("inf")
    before = model.weight.detach().clone()
    scaler.unscale_(opt)
    got = torch.stack([p.grad.norm() for p in model.parameters()])
    ratio = (got / want).max().item() if step not in (0, 2) else float("nan")
    scaler.step(opt)
    scaler.update()
    print(f"step {step} ratio {ratio:.6g} scale {scaler.get_scale():g} "
          f"updated {not torch.equal(before, model.weight)} finite {bool(model.weight.isfinite().all())}")
"""


def test_grad_scaler_unscales_the_new_grads_of_the_fused_adamw(prepared, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(_SCRIPT)
    done = run_shim("real", "--log-level", "off", str(script))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("step ")]
    assert lines == ["step 0 ratio nan scale 512 updated False finite True",  # skipped: the overflow is seen
                     "step 1 ratio 1 scale 512 updated True finite True",  # unscaled, and the step not skipped
                     "step 2 ratio nan scale 256 updated False finite True",  # the new grad's overflow is seen
                     "step 3 ratio 1 scale 256 updated True finite True"], done.stdout
