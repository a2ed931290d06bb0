"""Rotary and padding helpers (flash_attn.layers.rotary, flash_attn.bert_padding) on npu."""
import pytest
import torch

from .conftest import rope_ref


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("offsets", ["int", "tensor", "varlen"])
def test_apply_rotary_emb(fa, interleaved, offsets):
    from flash_attn.layers.rotary import apply_rotary_emb

    torch.manual_seed(0)
    B, S, H, D, rd = 2, 6, 2, 32, 16
    ang = torch.arange(32).float()[:, None] * torch.rand(rd // 2)[None]
    cos, sin = ang.cos().half(), ang.sin().half()
    x = torch.randn(B, S, H, D, dtype=torch.float16)
    if offsets == "varlen":
        xin, cu = x.reshape(B * S, H, D), torch.tensor([0, 4, 12], dtype=torch.int32)
        pos = torch.cat([torch.arange(4), torch.arange(8)]) + 3
        ref = rope_ref(xin, cos, sin, pos, interleaved)
        xn = xin.npu().requires_grad_()
        out = apply_rotary_emb(xn, cos.npu(), sin.npu(), interleaved, seqlen_offsets=3, cu_seqlens=cu.npu(),
                               max_seqlen=8)
    else:
        off = 3 if offsets == "int" else torch.tensor([1, 5], dtype=torch.int32)
        pos = (torch.arange(S) + 3).expand(B, S) if offsets == "int" else off.long()[:, None] + torch.arange(S)
        ref = rope_ref(x, cos, sin, pos, interleaved)
        xn = x.npu().requires_grad_()
        out = apply_rotary_emb(xn, cos.npu(), sin.npu(), interleaved, seqlen_offsets=off if offsets == "int"
                               else off.npu())
    assert (out.float().cpu() - ref).abs().max() < 4e-3
    out.float().pow(2).sum().backward()  # a rotation preserves norms: d|R x|^2/dx = 2x on the rotated part too
    torch.testing.assert_close(xn.grad.float().cpu(), 2 * xn.detach().float().cpu(), atol=2e-2, rtol=1e-2)


def test_rotary_embedding_module_in_place(fa):
    from flash_attn.layers.rotary import RotaryEmbedding

    rot = RotaryEmbedding(16).npu()
    qkv = torch.randn(1, 5, 3, 2, 16, dtype=torch.bfloat16).npu()
    before = qkv.clone()
    out = rot(qkv)
    assert out is qkv
    assert torch.equal(qkv[:, :, 2].cpu(), before[:, :, 2].cpu())  # v untouched
    assert not torch.equal(qkv[:, 1:, 0].cpu(), before[:, 1:, 0].cpu())
    torch.testing.assert_close(qkv[:, 0].cpu(), before[:, 0].cpu())  # position 0: identity


def test_bert_padding_round_trip(fa):
    from flash_attn.bert_padding import index_first_axis, pad_input, unpad_input

    x = torch.randn(2, 5, 3, 8).npu().requires_grad_()
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]]).npu()
    res = unpad_input(x, mask)
    assert len(res) == 5
    h, idx, cu, maxlen, used = res
    assert cu.dtype == torch.int32 and cu.cpu().tolist() == [0, 3, 7] and maxlen == 4 and isinstance(maxlen, int)
    assert used.cpu().tolist() == [3, 4] and h.shape == (7, 3, 8)
    back = pad_input(h, idx, 2, 5)
    torch.testing.assert_close(back.detach().cpu(), (x * mask[..., None, None]).detach().cpu())
    back.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), mask[..., None, None].float().expand_as(x).cpu())
    assert torch.equal(index_first_axis(x.reshape(10, 3, 8), idx).detach().cpu(), h.detach().cpu())
