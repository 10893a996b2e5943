"""The fused Triton backward of the attention output projection with reshape."""

from kernel.attn_output_proj_backward import attn_output_proj_backward, kernel_config
from kernel.configs import KernelConfig, config_for
from kernel.reference import attn_output_proj_backward_eager, attn_output_proj_backward_ref, two_matmuls

__all__ = [
    "KernelConfig",
    "attn_output_proj_backward",
    "attn_output_proj_backward_eager",
    "attn_output_proj_backward_ref",
    "config_for",
    "kernel_config",
    "two_matmuls",
]
