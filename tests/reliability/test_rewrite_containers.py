"""Rewritten membership tests (``"cuda:0" in c``) keep each container's own semantics.

Mappings and sets answer by their own lookup, so ``in`` never disagrees with ``d[k]``, ``d.get(k)`` or
``s.remove(k)``; sequences, strings and one-shot iterators (plain values, no lookup of their own) compare an npu
element as its CUDA counterpart; a display of CUDA literals matches an npu value (``v in {"cuda", "xpu"}``).
"""
import collections
import collections.abc
import textwrap

import pytest
import torch

from ascend_shim.rewrite import rewrite_source


def run(source: str, **values):
    code, sites = rewrite_source(textwrap.dedent(source), "<containers>")
    assert any(s.rewritten for s in sites), f"nothing rewritten in {source!r}"
    namespace = dict(values, torch=torch)
    exec(code, namespace)
    return namespace


class DeviceTable(collections.abc.Mapping):
    """A mapping that is not a dict."""

    def __init__(self, data):
        self.data = dict(data)

    def __getitem__(self, key):
        return self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self):
        return len(self.data)


class Recorder:
    """A container with its own ``__contains__``: asked once, answer kept."""

    def __init__(self):
        self.asked = []

    def __contains__(self, item):
        self.asked.append(item)
        return False


@pytest.mark.parametrize("make", [dict, collections.OrderedDict, lambda d: collections.defaultdict(int, d),
                                  DeviceTable], ids=["dict", "OrderedDict", "defaultdict", "Mapping"])
def test_mapping_membership_agrees_with_its_lookup(make):
    t = torch.ones(1, device="npu")
    d = make({str(t.device): 1, t.device.type: 2})  # keys "npu:0", "npu"
    g = run("""
        r0 = "cuda:0" in d
        r1 = "cuda" not in d
        r2 = "npu:0" in d
    """, d=d)
    assert g["r0"] is False and g["r1"] is True and g["r2"] is True
    assert "cuda:0" not in dict(d)  # what d["cuda:0"] / d.get("cuda:0") see: no such key
    g = run('r = "cuda:0" in d.keys()', d=d)
    assert g["r"] is False


def test_device_keys_answer_by_their_own_lookup():
    d = {torch.device("npu", 0): "weights"}
    assert run('r = torch.device("cuda", 0) in d', d=d)["r"] is False  # d[torch.device("cuda", 0)] fails too
    assert run('r = torch.device("cuda", 0) in [v]', v=torch.device("npu", 0))["r"] is True  # a list: values


@pytest.mark.parametrize("make", [set, frozenset])
def test_set_membership_agrees_with_its_lookup(make):
    s = make({"npu:0", "npu"})
    g = run("""
        r0 = "cuda:0" in s
        r1 = "cuda" not in s
    """, s=s)
    assert g["r0"] is False and g["r1"] is True
    with pytest.raises(KeyError):
        set(s).remove("cuda:0")  # the lookup the answer agrees with


def test_a_set_display_of_cuda_literals_matches_an_npu_value():
    npu = torch.device("npu", 0)
    g = run("""
        r0 = v.type in {"cuda", "xpu"}
        r1 = v.type not in {"cuda", "xpu"}
        r2 = s in {"cuda:0", "cuda:1"}
        r3 = "gloo" in {"nccl"}
        r4 = b in {"nccl", "gloo"}
    """, v=npu, s="npu:1", b="hccl")
    assert (g["r0"], g["r1"], g["r2"], g["r3"], g["r4"]) == (True, False, True, False, True)


@pytest.mark.parametrize("make", [list, tuple, collections.deque])
def test_sequences_compare_npu_elements_as_cuda(make):
    t = torch.ones(1, device="npu")
    seq = make([str(t.device), "cpu"])
    g = run("""
        r0 = "cuda:0" in seq
        r1 = "cuda:1" in seq
        r2 = "cuda" in seq
        r3 = v in ("cuda", "mps")
    """, seq=seq, v="npu")
    assert (g["r0"], g["r1"], g["r2"], g["r3"]) == (True, False, False, True)  # "cuda" != "cuda:0" on CUDA too


def test_strings_keep_device_string_semantics():
    g = run("""
        r0 = "cuda" in s
        r1 = "cuda" in other
    """, s="npu:0", other="running on npu:0")
    assert g["r0"] is True and g["r1"] is False


def test_a_generator_is_walked_once_as_in_walks_it():
    devices = ["cpu", "npu", "meta"]
    gen = (d for d in devices)
    g = run('r = "cuda" in gen', gen=gen)
    assert g["r"] is True and list(gen) == ["meta"]  # stopped at the match, like `in`
    gen = (d for d in devices)
    g = run('r = "cuda:3" in gen', gen=gen)
    assert g["r"] is False and list(gen) == []


def test_other_containers_give_their_own_answer_once():
    box = Recorder()
    g = run('r = "cuda" in box', box=box)
    assert g["r"] is False and box.asked == ["cuda"]
