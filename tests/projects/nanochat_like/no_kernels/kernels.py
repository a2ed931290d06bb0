"""Makes `import kernels` fail as on a machine without the kernels package (ascend_shim tests)."""
raise ImportError("No module named 'kernels' (nanochat_like/no_kernels stand-in)")
