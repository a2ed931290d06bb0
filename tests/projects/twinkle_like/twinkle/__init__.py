"""Test fixture (written for ascend_shim, not Twinkle's code): Twinkle's CUDA-first device choice in a few lines.

Named ``twinkle`` so that the twinkle patch set's gate (twinkle/version.py of a checkout) applies to it.
"""
