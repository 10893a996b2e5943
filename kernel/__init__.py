"""What a commit supplies: the fused Triton backward of the attention output projection with reshape.

The harness replaces this package by the commit's own ``kernel/`` when it measures a commit; everything the
harness owns (cases, tolerances, SOL model, float32 reference, correctness rule) lives in ``problem``.
"""

from kernel.backward import attn_output_proj_backward, kernel_config
from kernel.configs import KernelConfig, config_for

__all__ = ["KernelConfig", "attn_output_proj_backward", "config_for", "kernel_config"]
