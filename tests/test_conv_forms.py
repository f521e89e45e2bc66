"""A cohort step's convolution forms (run.conv_form, engine/conv_forms.py): unfold + batched matmul computes what
vmap's grouped convolution does, forward and gradients; "auto" keeps the faster form per layer shape."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import grad, vmap

from pfedkit.engine import conv_forms
from pfedkit.engine.conv_forms import ConvForms, unfold_conv
from tests.test_cohort import check_cohort_against_one_client_at_a_time, full_precision_on_the_gpu  # noqa: F401

LAYERS = [  # (in, out, kernel, stride, padding, dilation, bias, height, width)
    (3, 4, (5, 5), (1, 1), (0, 0), (1, 1), True, 12, 12),
    (2, 3, (3, 3), (2, 2), (1, 1), (1, 1), False, 9, 7),
    (4, 2, (3, 1), (1, 2), (2, 0), (2, 1), True, 8, 10),
]


def both_forms(layer, device=torch.device("cpu"), clients: int = 3, batch: int = 4):
    """(output, gradients to inputs, weights and bias) of each form, over stacked clients under vmap."""
    in_ch, out_ch, kernel, stride, padding, dilation, has_bias, height, width = layer
    g = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(clients, batch, in_ch, height, width, generator=g).to(device)
    w = torch.randn(clients, out_ch, in_ch, *kernel, generator=g).to(device)
    b = torch.randn(clients, out_ch, generator=g).to(device) if has_bias else None
    target = torch.randn_like(vmap(lambda xc, wc: F.conv2d(xc, wc, None, stride, padding, dilation))(x, w))

    def grouped(xc, wc, bc, tc):
        return F.conv2d(xc, wc, bc, stride, padding, dilation)

    def unfolded(xc, wc, bc, tc):
        return unfold_conv(xc, wc, bc, stride, padding, dilation)

    out = {}
    for name, form in (("grouped", grouped), ("unfold", unfolded)):
        loss = lambda xc, wc, bc, tc, form=form: (form(xc, wc, bc, tc) * tc).sum()  # noqa: E731
        argnums = (0, 1, 2) if has_bias else (0, 1)
        dims = (0, 0, 0 if has_bias else None, 0)
        out[name] = (vmap(form, dims)(x, w, b, target), vmap(grad(loss, argnums=argnums), dims)(x, w, b, target))
    return out


@pytest.mark.parametrize("layer", LAYERS, ids=["5x5", "stride2-pad1-nobias", "rect-dilated"])
def test_unfold_and_matmul_equals_the_grouped_convolution_forward_and_backward(layer):
    forms = both_forms(layer)
    (want_out, want_grads), (got_out, got_grads) = forms["grouped"], forms["unfold"]
    assert got_out.shape == want_out.shape
    torch.testing.assert_close(got_out, want_out, atol=2e-5, rtol=1e-4)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


def test_a_cohort_in_the_unfold_form_gives_what_one_client_at_a_time_gives():
    for name in ("fedavg", "fedrep", "fedafk"):  # a plan's phases, a head alone, a Joint step
        cohort = check_cohort_against_one_client_at_a_time(name, True, torch.device("cpu"), conv_form="unfold")
        assert cohort.runner.record()["conv_form"] == "unfold"


def test_auto_keeps_the_faster_form_of_each_shape_and_says_so(monkeypatch):
    timed, unfolded = [], []

    def timer(shape, clients, batch, device):  # unfold faster for 3 input channels, grouped otherwise
        timed.append((shape, clients, batch))
        return {"grouped": 2.0, "unfold": 1.0 if shape[0] == 3 else 3.0}

    real = conv_forms.unfold_conv
    monkeypatch.setattr(conv_forms, "unfold_conv", lambda *a: unfolded.append(a[0].shape) or real(*a))
    forms = ConvForms("auto", timer=timer)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Conv2d(4, 2, 3))
    x = torch.randn(2, 3, 8, 8)
    with forms.active():
        model(x)  # the first step meets both shapes: grouped, then timed
        assert not unfolded
        forms.settle(clients=5, batch=2, device=torch.device("cpu"))
        model(x)
    assert [t[0][0] for t in timed] in ([3, 4], [4, 3]) and {t[1:] for t in timed} == {(5, 2)}
    assert unfolded == [torch.Size([2, 3, 8, 8])], "only the first layer takes the unfold form"
    record = forms.record()["conv_forms"]
    assert record["3->4 3x3 on 8x8"].startswith("unfold (grouped 2.000 ms, unfold 1.000 ms")
    assert record["4->2 3x3 on 6x6"].startswith("grouped")


def test_outside_a_cohort_step_a_convolution_is_torchs_own():
    ConvForms("unfold")  # routes nn.Conv2d through the forms from now on
    conv, x = nn.Conv2d(3, 4, 3), torch.randn(2, 3, 7, 7)
    assert torch.equal(conv(x), F.conv2d(x, conv.weight, conv.bias))
    off_gpu = ConvForms("auto", device=torch.device("cpu"))
    assert off_gpu.mode == "grouped" and off_gpu.record() == {}


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("layer", LAYERS, ids=["5x5", "stride2-pad1-nobias", "rect-dilated"])
def test_on_a_gpu_unfold_equals_grouped(layer, full_precision_on_the_gpu):  # noqa: F811
    forms = both_forms(layer, torch.device("cuda"))
    torch.testing.assert_close(forms["unfold"][0], forms["grouped"][0], atol=2e-5, rtol=1e-4)
    for got, want in zip(forms["unfold"][1], forms["grouped"][1]):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("conv_form", ["unfold", "auto"])
def test_on_a_gpu_a_cohort_in_each_form_gives_what_one_client_at_a_time_gives(conv_form, full_precision_on_the_gpu):  # noqa: F811
    cohort = check_cohort_against_one_client_at_a_time("fedavg", True, torch.device("cuda"), conv_form=conv_form)
    record = cohort.runner.record()
    assert record["conv_form"] == conv_form and (conv_form != "auto" or record["conv_forms"])


def test_the_timer_measures_both_forms_of_a_shape_with_and_without_bias():
    for has_bias in (True, False):
        shape = (2, 3, (3, 3), (1, 1), (1, 1), (1, 1), has_bias, 6, 6, torch.float32)
        times = conv_forms.time_forms(shape, clients=2, batch=3, device=torch.device("cpu"))
        assert set(times) == {"grouped", "unfold"} and all(t > 0 for t in times.values())
