"""The part of a reproducer script for the eager checks (``eager_vjp``, ``eager_jvp``,
``eager_vjp_of_vjp``): eager autograd only, no torch.func, against float64 finite
differences. Appended after ``script_autodiff.AUTODIFF``, whose helpers it uses."""

from __future__ import annotations

EAGER = '''

def check_eager(f, xs):
    """The eager checks: torch.autograd.grad / torch.autograd.forward_ad / double backward of
    the Function (no torch.func), against central finite differences in float64."""
    import torch.autograd.forward_ad as fwAD

    n = len(xs)
    jac, outs = fd_jacobian(f, xs)
    if CHECK == "eager_vjp":
        cs = randn_like_all(outs, "cotangents")
        actual = eager_vjp(f, n)(*xs, *cs)
        if GRADIENT == "custom":
            # a deliberate gradient: the suite holds it to itself (non-contiguous inputs)
            strided = [torch.stack([x, torch.zeros_like(x)], -1).select(-1, 0) for x in xs]
            again = eager_vjp(f, n)(*strided, *cs)
            return compare("eager backward, non-contiguous vs contiguous inputs", again, actual)
        expected = tuple(
            sum((jac[i][j].T @ cs[i].flatten() for i in range(len(outs)))).view_as(xs[j])
            for j in range(n)
        )
        return compare("torch.autograd.grad (eager backward) vs finite differences", actual, expected)
    if CHECK == "eager_jvp":
        ts = randn_like_all(xs, "tangents")
        with fwAD.dual_level():
            duals = [fwAD.make_dual(x.detach().clone(), t) for x, t in zip(xs, ts)]
            unpacked = [fwAD.unpack_dual(o) for o in f(*duals)]
            actual = tuple(torch.zeros_like(u.primal) if u.tangent is None else u.tangent.clone()
                           for u in unpacked)
        refs = [jac] + ([backward_jacobian(f, xs)[0]] if GRADIENT == "custom" else [])
        found = []
        for ref in refs:
            expected = tuple(
                sum((ref[i][j] @ ts[j].flatten() for j in range(n))).view_as(outs[i])
                for i in range(len(outs))
            )
            found.append(compare("torch.autograd.forward_ad (eager jvp) vs reference", actual, expected))
        return [] if any(not p for p in found) else [p for ps in found for p in ps]
    # eager_vjp_of_vjp: eager double backward vs finite differences of the eager vjp
    cs = randn_like_all(outs, "cotangents")
    primals = [*xs, *cs]
    w = randn_like_all(xs, "outer cotangents")
    with torch.enable_grad():
        leaves = [p.detach().clone().requires_grad_(True) for p in primals]
        first = eager_vjp(f, n, create_graph=True)(*leaves)
        actual = torch.autograd.grad(first, leaves, w, allow_unused=True, materialize_grads=True)
    jac2, outs2 = fd_jacobian(eager_vjp(f, n), primals)
    expected = tuple(
        sum((jac2[i][j].T @ w[i].flatten() for i in range(len(outs2)))).view_as(primals[j])
        for j in range(len(primals))
    )
    label = "eager double backward (create_graph=True) vs finite differences of the eager vjp"
    return compare(label, tuple(a.detach() for a in actual), expected)
'''
