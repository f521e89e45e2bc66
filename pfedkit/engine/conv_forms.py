"""The form a cohort step's 2-D convolutions take (`run.conv_form`).

Under vmap the convolution of every stacked client becomes one grouped convolution, which on a GPU runs cuDNN's
generic kernels; written as unfold + one batched matmul per layer it runs matmul kernels instead. Which is faster
depends on the layer's shape, the clients and the batch, so `ConvForms` decides per layer shape: "grouped" (vmap's
own, and every convolution outside a cohort step), "unfold", or "auto": on a GPU each shape's two forms are timed once,
forward and backward at the step's clients and batch, and the faster is kept; off a GPU "auto" is "grouped". The run's
summary lists each shape's form and times. The forms agree to float rounding (tests/test_conv_forms.py).

The choice reaches `nn.Conv2d` through a context variable read in its `_conv_forward` (patched once, the first time a
form other than "grouped" is asked): outside a cohort step, and in every other thread, a convolution is torch's own.
"""

from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import grad, vmap

FORMS = ("grouped", "unfold")
MODES = ("auto", *FORMS)
TIMED_REPEATS = 10  # timed runs of each form per shape (after 3 warm-up runs): the least is kept

# (in channels, out channels, kernel, stride, padding, dilation, bias, input height, input width, dtype)
Shape = tuple[int, int, tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int], bool, int, int, Any]
Timer = Callable[[Shape, int, int, torch.device], dict[str, float]]

_ACTIVE: ContextVar[Optional["ConvForms"]] = ContextVar("pfedkit_conv_forms", default=None)
_torch_conv_forward: Optional[Callable] = None


def _conv_forward(module: nn.Conv2d, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> Any:
    forms = _ACTIVE.get()
    if forms is not None:
        return forms.convolve(module, x, weight, bias)
    return _torch_conv_forward(module, x, weight, bias)


def install() -> None:
    """Route nn.Conv2d through the active forms (idempotent); with none active it calls torch's own."""
    global _torch_conv_forward
    if _torch_conv_forward is None:
        _torch_conv_forward = nn.Conv2d._conv_forward
        nn.Conv2d._conv_forward = _conv_forward


def layer_shape(module: nn.Conv2d, x: torch.Tensor) -> Optional[Shape]:
    """The shape a form is chosen for; None for a convolution only the grouped form computes (groups, string
    padding, a padding mode other than zeros, a non-4-D input)."""
    if module.groups != 1 or isinstance(module.padding, str) or module.padding_mode != "zeros" or x.dim() != 4:
        return None
    return (
        module.in_channels,
        module.out_channels,
        tuple(module.kernel_size),
        tuple(module.stride),
        tuple(module.padding),
        tuple(module.dilation),
        module.bias is not None,
        x.shape[-2],
        x.shape[-1],
        x.dtype,
    )


def unfold_conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> torch.Tensor:
    """conv2d of one client's batch x [B, C, H, W] as unfold + one matmul [O, C*k*k] @ [C*k*k, B*L]: under vmap a
    single batched matmul over the clients."""
    batch, out_channels = x.shape[0], weight.shape[0]
    kernel = weight.shape[-2:]
    cols = F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)  # [B, C*k*k, L]
    positions = cols.shape[-1]
    out = weight.flatten(1) @ cols.transpose(0, 1).reshape(cols.shape[1], batch * positions)  # [O, B*L]
    out = out.view(out_channels, batch, positions).transpose(0, 1)
    if bias is not None:
        out = out + bias[:, None]
    height = (x.shape[-2] + 2 * padding[0] - dilation[0] * (kernel[0] - 1) - 1) // stride[0] + 1
    return out.reshape(batch, out_channels, height, positions // height)


def time_forms(shape: Shape, clients: int, batch: int, device: torch.device) -> dict[str, float]:
    """Milliseconds of forward and backward (to weights and inputs) of one layer shape in each form, over `clients`
    stacked clients' batches of `batch`, under vmap as a cohort step runs it; the least of TIMED_REPEATS runs."""
    in_ch, out_ch, kernel, stride, padding, dilation, has_bias, height, width, dtype = shape
    x = torch.randn(clients, batch, in_ch, height, width, device=device, dtype=dtype)
    weight = torch.randn(clients, out_ch, in_ch, *kernel, device=device, dtype=dtype)
    bias = torch.randn(clients, out_ch, device=device, dtype=dtype) if has_bias else None

    def grouped(xc: torch.Tensor, wc: torch.Tensor, bc: Optional[torch.Tensor]) -> torch.Tensor:
        return F.conv2d(xc, wc, bc, stride, padding, dilation).square().sum()

    def unfolded(xc: torch.Tensor, wc: torch.Tensor, bc: Optional[torch.Tensor]) -> torch.Tensor:
        return unfold_conv(xc, wc, bc, stride, padding, dilation).square().sum()

    times = {}
    for form, fn in (("grouped", grouped), ("unfold", unfolded)):
        step = vmap(grad(fn, argnums=(0, 1)), in_dims=(0, 0, None if bias is None else 0))
        for _ in range(3):
            step(x, weight, bias)
        runs = []
        for _ in range(TIMED_REPEATS):
            synchronize(device)
            start = time.perf_counter()
            step(x, weight, bias)
            synchronize(device)
            runs.append((time.perf_counter() - start) * 1e3)
        times[form] = min(runs)
    return times


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe(shape: Shape) -> str:
    in_ch, out_ch, kernel, stride, padding, dilation, has_bias, height, width, _ = shape
    extras = "".join(
        f" {name} {value[0]}" + (f"x{value[1]}" if value[1] != value[0] else "")
        for name, value, plain in (("stride", stride, 1), ("padding", padding, 0), ("dilation", dilation, 1))
        if value != (plain, plain)
    )
    return f"{in_ch}->{out_ch} {kernel[0]}x{kernel[1]}{extras} on {height}x{width}" + ("" if has_bias else " no bias")


class ConvForms:
    """The form of each convolution shape in one cohort's steps. `mode` "auto" times a shape's forms the first time
    a step meets it (`settle`, with that step's clients and batch); `timer` is for tests."""

    def __init__(self, mode: str = "grouped", device: Optional[torch.device] = None, timer: Optional[Timer] = None):
        if mode not in MODES:
            raise ValueError(f"unknown conv form {mode!r}; forms: {', '.join(MODES)}")
        if mode == "auto" and timer is None and (device is None or device.type != "cuda"):
            mode = "grouped"  # off a GPU vmap's grouped convolution is the fast form: nothing to time
        self.mode, self.timer = mode, timer or time_forms
        self.chosen: dict[Shape, str] = {}
        self.times: dict[Shape, dict[str, float]] = {}
        self.pending: set[Shape] = set()
        if mode != "grouped":
            install()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Convolutions in this block take the chosen forms (nothing to do when every form is grouped)."""
        if self.mode == "grouped":
            yield
            return
        token = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(token)

    def convolve(
        self, module: nn.Conv2d, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]
    ) -> torch.Tensor:
        shape = layer_shape(module, x)
        form = "grouped" if shape is None else self.form_of(shape)
        if form == "unfold":
            return unfold_conv(x, weight, bias, module.stride, module.padding, module.dilation)
        return _torch_conv_forward(module, x, weight, bias)

    def form_of(self, shape: Shape) -> str:
        if self.mode != "auto":
            return self.mode
        form = self.chosen.get(shape)
        if form is None:  # this step runs it grouped; `settle` times it before the next
            self.pending.add(shape)
            return "grouped"
        return form

    def settle(self, clients: int, batch: int, device: torch.device) -> None:
        """Time the shapes the last step met for the first time, at its clients and batch, and keep the faster form."""
        while self.pending:
            shape = self.pending.pop()
            with torch_convolutions(), torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                times = self.timer(shape, clients, batch, device)  # its random tensors leave the run's draws alone
            self.times[shape] = times
            self.chosen[shape] = min(FORMS, key=lambda form: times[form])

    def record(self) -> dict[str, Any]:
        """For the run's summary: the mode, where not grouped, and each timed shape's form and milliseconds."""
        if self.mode != "auto":
            return {} if self.mode == "grouped" else {"conv_form": self.mode}
        return {
            "conv_form": "auto",
            "conv_forms": {
                describe(shape): f"{self.chosen[shape]} ("
                + ", ".join(f"{form} {times[form]:.3f} ms" for form in FORMS)
                + ")"
                for shape, times in self.times.items()
            },
        }


@contextlib.contextmanager
def torch_convolutions() -> Iterator[None]:
    """torch's own convolutions in this block (the timing of forms runs each form itself)."""
    token = _ACTIVE.set(None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
