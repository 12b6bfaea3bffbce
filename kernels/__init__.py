"""Triton kernels for the engine, each beside a plain-torch reference of the same function."""
