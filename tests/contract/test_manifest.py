"""The committed manifest is what the extraction script makes of the wheels: structure and known facts."""
from __future__ import annotations

from .conftest import line

OPS = ("npu_fusion_attention", "npu_fusion_attention_grad", "npu_prompt_flash_attention",
       "npu_incre_flash_attention", "npu_fused_infer_attention_score", "npu_rotary_mul", "npu_rms_norm",
       "npu_swiglu")


def test_one_release_per_line_of_the_declared_range(releases):
    assert sorted({line(v) for v in releases}) == [(2, minor) for minor in range(4, 15)]
    assert len(releases) == 11


def test_every_release_has_the_names_and_the_ops(releases):
    for version, rel in releases.items():
        assert len(rel["npu_all"]) == len(set(rel["npu_all"])) > 100, version
        assert set(rel["npu_all"]) <= set(rel["npu_names"]), version
        assert sorted(rel["ops"]) == sorted(OPS), version
        assert [name for name, _ in rel["NpuFusedAdamW"]["args"]][:2] == ["params", "lr"], version


def test_facts_of_the_real_wheels(releases):
    assert len(releases["2.13.0"]["npu_all"]) == 144
    assert "ExternalStream" not in releases["2.9.1"]["npu_all"]
    assert "ExternalStream" in releases["2.13.0"]["npu_all"]
    assert releases["2.5.1.post1"]["ops"]["npu_fusion_attention_grad"]["returns"] == 4
    assert releases["2.13.0"]["ops"]["npu_fusion_attention_grad"]["returns"] == 5
    assert releases["2.13.0"]["ops"]["npu_fusion_attention"]["returns"] == 7
