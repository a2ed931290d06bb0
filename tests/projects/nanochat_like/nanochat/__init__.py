"""A nanochat-shaped package written for ascend_shim's tests: the CUDA patterns of karpathy/nanochat @ 92d63d4
(module names, the attributes the shim patches, the call shapes), none of its code."""
