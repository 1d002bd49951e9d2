"""The Python tests run against the module built in build/python (PYTHONPATH, set by ctest's Python.pytest), on the
CPU device unless MOJO_JIT_DEVICE says otherwise."""
import os

os.environ.setdefault("MOJO_JIT_DEVICE", "cpu")
os.environ.setdefault("MOJO_JIT_LOG", "warn")
