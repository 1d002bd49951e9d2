"""mojo-jit: LLM operator kernels, JIT-compiled for NVIDIA GPUs (or run on the CPU device, an emulator of one).

    import numpy as np, mojo_jit
    x = np.random.randn(4, 896).astype(np.float32)
    w = np.ones(896, np.float32)
    y = mojo_jit.ops.rms_norm(x, w, eps=1e-6, device="cpu")     # a numpy array

Every op of `mojo-jit list` is a function in mojo_jit.ops; mojo_jit.torch registers them as torch ops. The first call
of a specialization compiles it (one INFO line on stderr says so) and caches it on disk; later calls launch it.
"""
import os as _os

# A first call compiles, which takes a while: say so (one line each) unless the user chose a level.
_os.environ.setdefault("MOJO_JIT_LOG", "info")

from . import _C  # noqa: E402
from ._C import (  # noqa: E402,F401
    ArchError,
    CacheMissError,
    CompileError,
    DeviceError,
    DTypeError,
    Error,
    InternalError,
    InvalidArgumentError,
    NoDeviceError,
    PointerError,
    ShapeError,
    TemplateNotFoundError,
    UnknownOpError,
    device_available,
)
from ._runtime import Runtime, cache, default_device, describe, emit, op_info, op_names, prewarm, runtime  # noqa: E402,F401
from . import ops  # noqa: E402,F401

__version__ = _C.__version__
