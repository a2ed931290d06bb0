"""Test fixture (written for ascend_shim, not AReaL's code): the CUDA patterns of AReaL main in a few lines.

Named ``areal`` so that the areal patch set's gate (areal/version.py of a checkout) and its NPU-native
registration apply to it exactly as to the real package.
"""
