"""``torch_npu.utils``: the parts libraries query (``collect_env``)."""
