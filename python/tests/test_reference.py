# SPDX-License-Identifier: Apache-2.0
"""Fp32 store, no cache, SGD against torch.nn.EmbeddingBag + torch.optim.SGD on the same weights.

Tolerances and why:
  * forward, sum without per-sample weights: bit for bit. Both add the bag's rows in index
    order starting from the first row (mpe: acc = add(acc, x) from 0; torch's CPU EmbeddingBag
    kernel likewise).
  * forward, mean: the sums are the same bits; mpe then multiplies by fl(1 / L) (its numerics
    contract), torch divides by L. Both are within 2^-24 (torch) and 2^-23 (mpe, two roundings)
    relative of the exact S / L, so |mpe - torch| <= 2^-22 |torch| (measured: 2 * 2^-24 at
    most). The test also checks mpe's mean == (torch's sum) * fl(1 / L) bit for bit.
  * forward with per-sample weights: mpe rounds w*x and then the sum (two roundings, FMA
    contraction off by contract); torch's CPU kernel may use a fused multiply-add (one
    rounding). Bound per output element: 2^-23 * L * sum_i |w_i x_i| (one extra relative
    rounding 2^-24 of each product, propagated through at most L partial sums; doubled).
  * one SGD step: mpe computes w - fl(lr * g) (two roundings); torch.optim.SGD's
    add_(g, alpha=-lr) may fuse it (one rounding), and for a row hit k >= 3 times the two may
    sum its gradient in a different order. Bound per element: 2^-23 * (|w| + lr * k * S)
    with S = sum over the row's occurrences of |coef * grad| (a few ulp of w and of the
    update).
"""
import pytest
import torch

import mpe_torch
from conftest import make_csr

U = 2.0 ** -23


def reference_bags(weights, indices, offsets, B, mode, psw=None):
    """Per table nn.EmbeddingBag with the given weights; returns (bags, outputs (B, sum D))."""
    T = len(weights)
    bags, outs = [], []
    for t, w in enumerate(weights):
        bag = torch.nn.EmbeddingBag(w.shape[0], w.shape[1], mode=mode, include_last_offset=True)
        with torch.no_grad():
            bag.weight.copy_(w)
        lo, hi = int(offsets[t * B]), int(offsets[(t + 1) * B])
        off = offsets[t * B:(t + 1) * B + 1] - lo
        out = bag(indices[lo:hi], off, per_sample_weights=None if psw is None else psw[lo:hi])
        bags.append(bag)
        outs.append(out)
    return bags, torch.cat(outs, dim=1)


def make_module(specs, mode, lr=0.05, seed=3):
    m = mpe_torch.TableBatchedEmbeddingBags(specs, storage="fp32", cache="none", optimizer="sgd",
                                            learning_rate=lr, pooling_mode=mode, seed=seed)
    g = torch.Generator().manual_seed(seed)
    weights = [torch.randn(r, d, generator=g) for r, d in specs]
    for t, w in enumerate(weights):
        m.set_weights(t, w)
    return m, weights


SPECS = [(40, 8), (7, 8), (100, 8)]


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_forward(mode):
    m, weights = make_module(SPECS, mode)
    B = 16
    idx, off = make_csr([r for r, _ in SPECS], B, 6, seed=1)
    out = m(idx, off)
    _, ref = reference_bags(weights, idx, off, B, mode)
    assert out.shape == (B, 24) and out.dtype == torch.float32
    if mode == "sum":
        assert torch.equal(out, ref)
    else:
        assert torch.all((out - ref).abs() <= 2.0 ** -22 * ref.abs())
        _, ref_sum = reference_bags(weights, idx, off, B, "sum")
        lengths = torch.stack([off[t * B + 1:(t + 1) * B + 1] - off[t * B:(t + 1) * B] for t in range(3)], 1)
        inv = torch.where(lengths > 0, 1.0 / lengths.clamp_min(1).float(), 0.0).repeat_interleave(8, 1)
        assert torch.equal(out, ref_sum * inv)
    m.eval()
    assert torch.equal(m(idx, off), out.detach())


def test_forward_per_sample_weights():
    m, weights = make_module(SPECS, "sum")
    B = 16
    idx, off = make_csr([r for r, _ in SPECS], B, 6, seed=2)
    psw = torch.rand(idx.numel(), generator=torch.Generator().manual_seed(5)) * 2 - 0.5
    out = m(idx, off, psw)
    _, ref = reference_bags(weights, idx, off, B, "sum", psw)
    # bound: 2^-23 * L * sum_i |w_i x_i| per element
    T = len(SPECS)
    for t in range(T):
        for b in range(B):
            lo, hi = int(off[t * B + b]), int(off[t * B + b + 1])
            L = hi - lo
            mag = (psw[lo:hi, None].abs() * weights[t][idx[lo:hi]].abs()).sum(0)
            diff = (out[b, 8 * t:8 * t + 8] - ref[b, 8 * t:8 * t + 8]).abs()
            assert torch.all(diff <= U * L * mag), (t, b, diff, mag)


def _sgd_reference(weights, idx, off, B, mode, psw, grad, lr):
    bags, ref = reference_bags(weights, idx, off, B, mode, psw)
    opt = torch.optim.SGD([b.weight for b in bags], lr=lr)
    ref.backward(grad)
    opt.step()
    return [b.weight.detach() for b in bags]


@pytest.mark.parametrize("mode,weighted", [("sum", False), ("mean", False), ("sum", True)])
def test_one_sgd_step(mode, weighted):
    lr = 0.05
    m, weights = make_module(SPECS, mode, lr=lr)
    B = 12
    idx, off = make_csr([r for r, _ in SPECS], B, 5, seed=7)
    psw = (torch.rand(idx.numel(), generator=torch.Generator().manual_seed(9)) + 0.5) if weighted else None
    grad = torch.randn(B, 24, generator=torch.Generator().manual_seed(11))
    out = m(idx, off, psw)
    out.backward(grad)
    assert m.step == 1
    ref_w = _sgd_reference(weights, idx, off, B, mode, psw, grad, lr)
    for t, (rows, D) in enumerate(SPECS):
        got = m.get_weights(t)
        # S[r] = sum over occurrences of |coef * grad|, k[r] = occurrences
        S = torch.zeros(rows, D)
        k = torch.zeros(rows, 1)
        for b in range(B):
            lo, hi = int(off[t * B + b]), int(off[t * B + b + 1])
            for p in range(lo, hi):
                coef = float(psw[p]) if weighted else (1.0 / (hi - lo) if mode == "mean" else 1.0)
                S[idx[p]] += abs(coef) * grad[b, D * t:D * t + D].abs()
                k[idx[p]] += 1
        tol = U * (ref_w[t].abs() + lr * k * S)
        assert torch.all((got - ref_w[t]).abs() <= tol), t
        untouched = k[:, 0] == 0
        assert torch.equal(got[untouched], weights[t][untouched])


def test_no_parameters_and_no_grad():
    m, _ = make_module(SPECS, "sum")
    assert list(m.parameters()) == []
    idx, off = make_csr([r for r, _ in SPECS], 4, 3, seed=1)
    out = m(idx, off)
    assert out.requires_grad
    out.sum().backward()  # expanded gradient: made contiguous inside
    assert m.step == 1
    with torch.no_grad():
        assert not m(idx, off).requires_grad
