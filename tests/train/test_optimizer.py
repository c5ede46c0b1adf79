"""The trainer's optimizers: torch's fused implementation where the device has one, the same
updates as the default implementation (up to rounding), and the default elsewhere."""
import pytest
import torch

from rnnlens.config import TrainConfig
from rnnlens.train.trainer import make_optimizer


def _params(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(50, 8, generator=g, dtype=dtype)),
            torch.nn.Parameter(torch.randn(8, generator=g, dtype=dtype)),
            torch.nn.Parameter(torch.randn(3, 3, generator=g, dtype=dtype), requires_grad=False)]


@pytest.mark.parametrize("kind", ["adagrad", "adam", "sgd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_on_the_cpu_and_the_same_steps_as_the_default(kind, dtype):
    cfg = TrainConfig(optimizer=kind, lr=0.05, weight_decay=1e-3)
    fused_p, plain_p = _params(dtype), _params(dtype)
    opt = make_optimizer(fused_p, cfg)
    assert opt.param_groups[0].get("fused") is True
    ref = {"adagrad": torch.optim.Adagrad, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}[kind](
        plain_p, lr=0.05, weight_decay=1e-3)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        grads = [torch.randn(p.shape, generator=g, dtype=dtype) for p in fused_p[:2]]
        for ps, o in ((fused_p, opt), (plain_p, ref)):
            o.zero_grad()
            for p, gr in zip(ps, grads):
                p.grad = gr.clone()
            o.step()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for a, b in zip(fused_p, plain_p):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=tol, atol=tol)


def test_parameters_on_a_device_without_a_fused_kernel_take_the_default():
    cfg = TrainConfig(optimizer="adagrad", lr=0.05)
    p = [torch.nn.Parameter(torch.randn(3, device="meta"))]
    assert not make_optimizer(p, cfg).param_groups[0].get("fused")
