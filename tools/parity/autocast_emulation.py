"""CUDA autocast(bfloat16)'s casting policy for the ops the official VAR sampler runs, as explicit
casts (a TorchFunctionMode), so the same arithmetic can run anywhere (the CPU's own autocast has
other op lists) and be compared op for op with varscope's bf16-autocast mode.

Policy (ATen/autocast_mode.h, torch 2.11, CUDA lists): linear / conv2d / matmul / SDPA run in
bf16 (floating inputs cast); layer_norm and the exp / upsampling / norm ops run in fp32
(linalg_vector_norm gets dtype=float); everything else runs on its inputs' dtypes with the usual
promotion. Only the ops the official VAR sampler and VQVAE decoder use are listed.
"""
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_BF16_OPS = {F.linear, F.conv2d, torch.matmul, torch.Tensor.matmul, torch.bmm, torch.mm,
             torch.addmm, torch.baddbmm, F.scaled_dot_product_attention}
_FP32_OPS = {F.layer_norm, F.group_norm, torch.exp, torch.Tensor.exp,
             torch._C._nn.upsample_bicubic2d, torch._C._nn.upsample_nearest2d,
             torch._C._nn.upsample_bilinear2d}
_FP32_DTYPE_OPS = {torch.linalg.vector_norm, torch.softmax, torch.Tensor.softmax, F.softmax,
                   torch.sum, torch.Tensor.sum, torch.cumsum, torch.Tensor.cumsum}


def _cast(x, dtype):
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.float64:
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    return x


def _normalize(x, p=2.0, dim=1, eps=1e-12, out=None):
    # F.normalize's own body, with the norm as autocast runs it (the mode does not see the
    # calls made inside a function it intercepted).
    denom = torch.linalg.vector_norm(x, p, dim, keepdim=True,
                                     dtype=torch.float32 if x.is_floating_point() else None)
    return x / denom.clamp_min(eps).expand_as(x)


_paused = [0]  # > 0 inside a `with torch.autocast(..., enabled=False)` region


class _AutocastSwitch:
    """Stands in for torch.autocast, torch.amp.autocast and torch.cuda.amp.autocast (see
    install_autocast_switches): enabled=False pauses the emulation, as the real one pauses
    autocast; enabled=True changes nothing (the emulation is on or off as a whole)."""

    def __init__(self, *args, enabled=True, **kwargs):
        self.enabled = enabled

    def __enter__(self):
        if not self.enabled:
            _paused[0] += 1
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            _paused[0] -= 1
        return False


def install_autocast_switches():
    """Makes the official code's autocast-disabled regions pause CudaAutocastBf16. Call before
    importing the official modules (some bind `autocast` at import). Outside the emulation the
    switches do nothing, as the real context managers do on CPU tensors."""
    torch.autocast = torch.amp.autocast = torch.cuda.amp.autocast = _AutocastSwitch


class CudaAutocastBf16(TorchFunctionMode):
    """with CudaAutocastBf16(): ... runs fp32 code as CUDA autocast(bf16) would. Calls made inside
    an intercepted function are not seen, so composite functions that matter are rewritten."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _paused[0]:
            return func(*args, **kwargs)
        if func is F.normalize:
            return _normalize(*args, **kwargs)
        if func in _BF16_OPS:
            args, kwargs = _cast(args, torch.bfloat16), {k: _cast(v, torch.bfloat16)
                                                         for k, v in kwargs.items()}
        elif func in _FP32_OPS:
            args, kwargs = _cast(args, torch.float32), {k: _cast(v, torch.float32)
                                                        for k, v in kwargs.items()}
        elif func in _FP32_DTYPE_OPS and kwargs.get("dtype") is None:
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.is_floating_point():
                kwargs = {**kwargs, "dtype": torch.float32}
        return func(*args, **kwargs)
