"""The body of a full reproducer for the autodiff checks (first and second order, the
vmap compositions), as text: the transform against float64 finite differences or a loop of
per-slice transforms. Uses ``script_data.DATA``'s helpers; ``script_eager.EAGER`` follows
it and uses its own."""

AUTODIFF = '''

def differentiable(args):
    return [i for i, a in enumerate(args)
            if isinstance(a, torch.Tensor) and a.is_floating_point() and i not in NONDIFF_ARGS]


def restricted(args, idx):
    """f of the differentiable arguments only (the others fixed), returning its float outputs
    (top-level ones: autograd does not track tensors nested in a container of the outputs)."""

    def f(*xs):
        full = list(args)
        for i, x in zip(idx, xs):
            full[i] = x
        out = CALL(*full)
        outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return tuple(o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point())

    return f


#: The most memory a whole reference Jacobian may take here (the suite's own budget).
JACOBIAN_BUDGET = 1 << 30


def require_budget(outs, xs):
    """Exit 2 (the script cannot run, nothing reproduced) before building a Jacobian larger
    than the suite would: the case compared random directions instead."""
    need = sum(o.numel() for o in outs) * sum(x.numel() for x in xs) * 8
    if need > JACOBIAN_BUDGET:
        print(f"could not run: the whole Jacobian would take {need / 2**30:.3g} GiB; the case "
              "compared random directions instead: use the minimal script (afdb repro without "
              "--full) for the first-order checks")
        sys.exit(2)


def fd_jacobian(f, xs, eps=1e-6):
    """Central finite differences in float64: J[out][in] of shape (out.numel(), in.numel())."""
    xs = [x.detach().double() for x in xs]
    outs = [o.detach().double() for o in f(*xs)]
    require_budget(outs, xs)
    jac = [[torch.zeros(o.numel(), x.numel(), dtype=torch.float64) for x in xs] for o in outs]
    for j, x in enumerate(xs):
        flat = x.flatten()
        for e in range(flat.numel()):
            plus, minus = flat.clone(), flat.clone()
            plus[e] += eps
            minus[e] -= eps
            hi = f(*[plus.view_as(x) if k == j else xs[k] for k in range(len(xs))])
            lo = f(*[minus.view_as(x) if k == j else xs[k] for k in range(len(xs))])
            for i in range(len(outs)):
                jac[i][j][:, e] = ((hi[i].double() - lo[i].double()) / (2 * eps)).flatten()
    return jac, outs


def randn_like_all(ts, salt):
    gen = torch.Generator().manual_seed(derive_seed(SEED, CASE_ID, salt))
    return [torch.randn(t.shape, generator=gen, dtype=torch.float64) for t in ts]


def func_vjp(f, n):
    """G(x..., c...) = J(x)^T c through torch.func (what the second-order checks transform)."""

    def g(*xc):
        _, pullback = torch.func.vjp(f, *xc[:n])
        return tuple(pullback(tuple(xc[n:])))

    return g


def eager_vjp(f, n, create_graph=False):
    """g(x..., c...) = J(x)^T c through the Function's eager backward (torch.autograd.grad)."""

    def g(*xc):
        with torch.enable_grad():
            xs = [x if create_graph else x.detach().requires_grad_(True) for x in xc[:n]]
            outs = f(*xs)
            grads = torch.autograd.grad(outs, xs, xc[n:], allow_unused=True,
                                        materialize_grads=True, create_graph=create_graph)
        return tuple(grads) if create_graph else tuple(gr.detach() for gr in grads)

    return g


def check_second_order(f, xs):
    """The suite's second-order references: finite differences (float64) of the eager
    first-order vjp (gradient="derivative"), or plain eager autograd's double backward and
    forward-over-reverse of the same Function (gradient="custom")."""
    n = len(xs)
    cs = randn_like_all(f(*xs), "cotangents")
    primals = [*xs, *cs]
    G = func_vjp(f, n)
    if CHECK == "jvp_of_vjp":
        ts = randn_like_all(primals, "tangents")
        _, actual = torch.func.jvp(G, tuple(primals), tuple(ts))
        if GRADIENT == "custom":
            import torch.autograd.forward_ad as fwAD

            with fwAD.dual_level(), torch.enable_grad():
                leaves = [x.detach().clone().requires_grad_(True) for x in xs]
                duals = [fwAD.make_dual(x, t) for x, t in zip(leaves, ts[:n])]
                cots = [fwAD.make_dual(c, t) for c, t in zip(cs, ts[n:])]
                grads = torch.autograd.grad(f(*duals), leaves, cots, allow_unused=True,
                                            materialize_grads=True)
                expected = tuple(fwAD.unpack_dual(gr).tangent for gr in grads)
            label = "torch.func.jvp of torch.func.vjp vs eager forward-over-reverse"
            return compare(label, as_tuple(actual), expected)
        g = eager_vjp(f, n)
        eps = 1e-6
        hi = g(*[p + eps * t for p, t in zip(primals, ts)])
        lo = g(*[p - eps * t for p, t in zip(primals, ts)])
        expected = tuple((a - b) / (2 * eps) for a, b in zip(hi, lo))
        label = "torch.func.jvp of torch.func.vjp vs finite differences of the eager vjp"
        return compare(label, as_tuple(actual), expected)
    w = randn_like_all(xs, "outer cotangents")
    _, pullback = torch.func.vjp(G, *primals)
    actual = as_tuple(pullback(tuple(w)))
    if GRADIENT == "custom":
        with torch.enable_grad():
            leaves = [p.detach().clone().requires_grad_(True) for p in primals]
            first = eager_vjp(f, n, create_graph=True)(*leaves)
            expected = torch.autograd.grad(first, leaves, w, allow_unused=True,
                                           materialize_grads=True)
        label = "torch.func.vjp of torch.func.vjp vs eager double backward (create_graph=True)"
        return compare(label, actual, tuple(e.detach() for e in expected))
    jac, outs = fd_jacobian(eager_vjp(f, n), primals)
    expected = tuple(
        sum((jac[i][j].T @ w[i].flatten() for i in range(len(outs)))).view_as(primals[j])
        for j in range(len(primals))
    )
    label = "torch.func.vjp of torch.func.vjp vs finite differences of the eager vjp"
    return compare(label, actual, expected)


def backward_jacobian(f, xs):
    """J[out][in] from the Function's eager backward, row by row (gradient="custom")."""
    outs = [o.detach() for o in f(*xs)]
    require_budget(outs, xs)
    jac = [[torch.zeros(o.numel(), x.numel(), dtype=torch.float64) for x in xs] for o in outs]
    for i, o in enumerate(outs):
        for e in range(o.numel()):
            cots = [torch.zeros_like(p) for p in outs]
            cots[i].view(-1)[e] = 1
            rows = eager_vjp(f, len(xs))(*xs, *cots)
            for j, r in enumerate(rows):
                jac[i][j][e] = r.double().flatten()
    return jac, [o.double() for o in outs]


def check_function(f, xs, kind):
    """Compare torch.func's jvp / vjp / jacrev / jacfwd of f at xs with the suite's reference:
    finite differences, or for gradient="custom" the eager backward's Jacobian (jvp and
    jacfwd then pass when they match either)."""
    if GRADIENT == "custom":
        found = [check_against(f, xs, kind, backward_jacobian(f, xs))]
        if kind in ("jvp", "jacfwd"):
            found.append(check_against(f, xs, kind, fd_jacobian(f, xs)))
        return [] if any(not p for p in found) else [p for ps in found for p in ps]
    return check_against(f, xs, kind, fd_jacobian(f, xs))


def check_against(f, xs, kind, reference):
    jac, outs = reference
    if kind == "jvp":
        ts = randn_like_all(xs, "tangents")
        _, actual = torch.func.jvp(f, tuple(xs), tuple(ts))
        expected = tuple(
            sum((jac[i][j] @ ts[j].flatten() for j in range(len(xs)))).view_as(outs[i])
            for i in range(len(outs))
        )
        return compare("torch.func.jvp vs finite differences", as_tuple(actual), expected)
    if kind == "vjp":
        cs = randn_like_all(outs, "cotangents")
        _, pullback = torch.func.vjp(f, *xs)
        actual = pullback(tuple(cs))
        expected = tuple(
            sum((jac[i][j].T @ cs[i].flatten() for i in range(len(outs)))).view_as(xs[j])
            for j in range(len(xs))
        )
        return compare("torch.func.vjp vs finite differences", as_tuple(actual), expected)
    jac_fn = torch.func.jacrev if kind == "jacrev" else torch.func.jacfwd
    actual = jac_fn(f, argnums=tuple(range(len(xs))))(*xs)
    problems = []
    for i in range(len(outs)):
        got = tuple(actual[i][j].reshape(outs[i].numel(), xs[j].numel()) for j in range(len(xs)))
        problems += compare(f"torch.func.{kind} of output {i} vs finite differences", got, tuple(jac[i]))
    return problems


def main():
    print(f"reproducing {CASE_ID} (autodiff: the script's own tangents/cotangents)")
    args = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in slice_args())
    idx = differentiable(args)
    xs = [args[i] for i in idx]
    f = restricted(args, idx)
    print("inputs: " + ", ".join(f"{tuple(a.shape)}" if isinstance(a, torch.Tensor) else repr(a) for a in args))
    if LEG_DTYPE is not None and CHECK in ("jvp", "vjp"):
        # the sample rounded to the leg's dtype; the Function runs there, the reference in float64
        low = getattr(torch, LEG_DTYPE)
        xs = [x.to(low).double() for x in xs]
        f64 = restricted(tuple(xs[idx.index(i)] if i in idx else a for i, a in enumerate(args)), idx)

        def f_low(*ys):
            return tuple(o.double() for o in f64(*(y.to(low) for y in ys)))

        print(f"dtype leg: the Function at {LEG_DTYPE}, the reference at float64")
        if GRADIENT == "custom":
            return check_against(f_low, xs, CHECK, backward_jacobian(f64, xs))
        return check_against(f_low, xs, CHECK, fd_jacobian(f64, xs))
    if CHECK in ("jvp", "vjp", "jacrev", "jacfwd"):
        return check_function(f, xs, CHECK)
    if CHECK in ("jvp_of_vjp", "vjp_of_vjp"):
        return check_second_order(f, xs)
    if CHECK.startswith("eager_"):
        return check_eager(f, xs)
    # vmap compositions: the transform of a batch vs a loop of per-slice transforms
    dims = LEVELS[0]["in_dims"][: len(args)]
    size = LEVELS[0]["batch_size"]
    slices = [
        tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in slice_args((b,)))
        for b in range(size)
    ]

    def leaf_dim0(i, keys):
        spec = dims[i]
        for k in keys:
            if spec is None or isinstance(spec, int):
                return spec
            spec = spec[k]
        return spec

    def stacked(i):
        """Argument i batched as the plan says (each tensor leaf at its own dim)."""
        def one(keys, v):
            d = leaf_dim0(i, keys)
            if not isinstance(v, torch.Tensor) or d is None:
                return v
            return torch.stack([get_at(s[i], keys) for s in slices], dim=d % (v.dim() + 1))
        return map_leaves(args[i], one)

    def slice_of(b, i):
        """Argument i as slice b of the batch sees it (unbatched leaves from the base)."""
        def one(keys, v):
            d = leaf_dim0(i, keys)
            return get_at(slices[b][i], keys) if isinstance(v, torch.Tensor) and d is not None else v
        return map_leaves(args[i], one)

    batched = [stacked(i) for i in range(len(args))]
    per = slices
    problems = []
    if CHECK == "jvp_of_vmap":
        # each tangent batched like its primal (batch moved to 0); per-slice jvps as the reference
        batched_idx = [i for i in idx if dims[i] is not None]
        prim = {i: batched[i].movedim(dims[i] % (args[i].dim() + 1), 0) if i in batched_idx
                else batched[i] for i in idx}
        tangents = {i: torch.stack(randn_like_all([args[i]] * size, f"t{i}"), 0) if i in batched_idx
                    else randn_like_all([args[i]], f"t{i}")[0] for i in idx}
        in_dims = tuple((0 if i in batched_idx else None) if i in idx else dims[i] for i in range(len(args)))

        def g(*xs):
            full = list(batched)
            for i, x in zip(idx, xs):
                full[i] = x
            return torch.func.vmap(lambda *a: restricted(a, [])(), in_dims=in_dims)(*full)

        _, actual = torch.func.jvp(g, tuple(prim[i] for i in idx), tuple(tangents[i] for i in idx))
        loops = []
        for b in range(size):
            a = [slice_of(b, i) for i in range(len(args))]
            for i in idx:
                a[i] = prim[i][b] if i in batched_idx else prim[i]
            ts = tuple(tangents[i][b] if i in batched_idx else tangents[i] for i in idx)
            loops.append(as_tuple(torch.func.jvp(restricted(a, idx), tuple(a[i] for i in idx), ts)[1]))
        expected = tuple(torch.stack([lp[k] for lp in loops]) for k in range(len(loops[0])))
        return compare("jvp of vmap vs loop of per-slice jvps", as_tuple(actual), expected)
    if CHECK == "vmap_of_jvp":
        tangents = [torch.stack(randn_like_all([args[i]] * size, f"t{i}"), 0) for i in idx]

        def one(*a_and_t):
            a, t = a_and_t[: len(args)], a_and_t[len(args):]
            return torch.func.jvp(restricted(a, idx), tuple(a[i] for i in idx), tuple(t))[1]

        in_dims = (*dims, *([0] * len(idx)))
        actual = as_tuple(torch.func.vmap(one, in_dims=in_dims)(*batched, *tangents))
        loops = [as_tuple(one(*[slice_of(b, i) for i in range(len(args))],
                              *[t[b] for t in tangents])) for b in range(size)]
        expected = tuple(torch.stack([lp[k] for lp in loops]) for k in range(len(loops[0])))
        return compare("vmap of jvp vs loop of per-slice jvps", actual, expected)
    outs = f(*[per[0][i] for i in idx])
    cts = [torch.stack(randn_like_all([o] * size, f"c{k}"), 0) for k, o in enumerate(outs)]

    def pull(*a_and_c):
        a, c = a_and_c[: len(args)], a_and_c[len(args):]
        _, pb = torch.func.vjp(restricted(a, idx), *[a[i] for i in idx])
        return tuple(pb(tuple(c)))

    in_dims = (*dims, *([0] * len(cts)))
    actual = as_tuple(torch.func.vmap(pull, in_dims=in_dims)(*batched, *cts))
    loops = [as_tuple(pull(*[slice_of(b, i) for i in range(len(args))],
                           *[c[b] for c in cts])) for b in range(size)]
    expected = tuple(torch.stack([lp[k] for lp in loops]) for k in range(len(loops[0])))
    problems += compare(f"{CHECK} (vmap over primals and cotangents of vjp) vs loop", actual, expected)
    return problems
'''
