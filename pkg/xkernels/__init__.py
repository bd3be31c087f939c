"""xkernels: framework-agnostic CUDA kernels for LLM workloads, exported through Apache TVM-FFI.

`import xkernels` imports no framework. Framework adapters: `xkernels.torch`.
"""

__version__ = "0.1.0"

from .ops import OPS, Op  # noqa: F401
