"""The body of a full reproducer for the vmap checks (``vmap``, ``vmap_nested``,
``vmap_chunked``, ``vmap_hazard``, ``contract``), as text: the batched arguments rebuilt at
each level's in_dims, the transform against a loop of per-slice calls, the vmap rule's
contract. Uses ``script_data.DATA``'s helpers."""

VMAP = '''

def leaf_dim(level, address):
    """The batch dim of the tensor at address (argument, *keys) at one level (in_dims pytree)."""
    spec = level["in_dims"][address[0]]
    for k in address[1:]:
        if spec is None or isinstance(spec, (int, str)):
            return spec
        spec = spec[k]
    return spec


def leaf_path(address, path):
    return tuple(i if leaf_dim(LEVELS[k], address) is not None else 0 for k, i in enumerate(path))


def assemble(j, value_at):
    """Argument j with each tensor leaf from value_at(address) (plain values from the base)."""
    base = slice_args()[j]
    if not is_container(base):
        return value_at((j,)) if isinstance(base, torch.Tensor) else base
    return map_leaves(base, lambda keys, v: value_at((j, *keys)) if isinstance(v, torch.Tensor) else v)


def slice_call_args(path):
    n = len(LEVELS[0]["in_dims"])
    return tuple(
        assemble(j, lambda a: get_at(slice_args(leaf_path(a, path))[a[0]], a[1:])) for j in range(n)
    )


def build_batched_args():
    """Per-slice data stacked at each level's in_dims (distinct data per slice, per tensor leaf)."""
    n = len(LEVELS[0]["in_dims"])

    def build(address, level, path):
        if level == len(LEVELS):
            return get_at(slice_args(leaf_path(address, path))[address[0]], address[1:])
        dim = leaf_dim(LEVELS[level], address)
        if dim is None:
            return build(address, level + 1, (*path, 0))
        parts = [build(address, level + 1, (*path, i)) for i in range(LEVELS[level]["batch_size"])]
        return torch.stack(parts, dim=dim % (parts[0].dim() + 1))

    return tuple(assemble(j, lambda a: build(a, 0, ())) for j in range(n))


def resolve_out_dim(out_dim, ndim):
    return (ndim + 1) // 2 if out_dim == "mid" else out_dim


def loop_reference(fn):
    """fn called once per slice (nested loops), stacked at each level's out_dims."""
    returned_tuple = False

    def run(level, path):
        nonlocal returned_tuple
        if level == len(LEVELS):
            out = fn(*slice_call_args(path))
            returned_tuple = isinstance(out, (tuple, list))
            return tuple(o.detach() if isinstance(o, torch.Tensor) else o for o in as_tuple(out))
        lv = LEVELS[level]
        per_slice = [run(level + 1, (*path, i)) for i in range(lv["batch_size"])]
        stacked = []
        for k, first in enumerate(per_slice[0]):
            if not isinstance(first, torch.Tensor):
                stacked.append(first)
                continue
            dim = resolve_out_dim(lv["out_dims"], first.dim())
            stacked.append(torch.stack([s[k] for s in per_slice], dim=dim % (first.dim() + 1)))
        return tuple(stacked)

    outs = run(0, ())
    return outs, returned_tuple


def concrete_out_dims(stacked, returned_tuple):
    result = []
    for k, lv in enumerate(LEVELS):
        if lv["out_dims"] != "mid":
            result.append(lv["out_dims"])
            continue
        dims = tuple(
            resolve_out_dim("mid", o.dim() - k - 1) if isinstance(o, torch.Tensor) else 0
            for o in stacked
        )
        result.append(dims if returned_tuple else dims[0])
    return result


def vmapped(fn, out_dims):
    wrapped = fn
    for k in reversed(range(len(LEVELS))):
        lv = LEVELS[k]
        wrapped = torch.func.vmap(
            wrapped, in_dims=tuple(lv["in_dims"]), out_dims=out_dims[k], chunk_size=lv["chunk_size"]
        )
    return wrapped


def record_rule_calls():
    """Wrap FUNCTION.vmap to print each raw return of the rule (contract check)."""
    calls = []
    original = FUNCTION.vmap
    had_own = "vmap" in FUNCTION.__dict__
    saved = FUNCTION.__dict__.get("vmap")

    def recording(info, in_dims, *args):
        returned = original(info, in_dims, *args)
        calls.append((info.batch_size, tuple(in_dims), returned))
        return returned

    FUNCTION.vmap = staticmethod(recording)

    def undo():
        if had_own:
            FUNCTION.vmap = saved
        else:
            del FUNCTION.vmap

    return calls, undo


def contract_problems(calls):
    problems = []
    for batch_size, in_dims, ret in calls:
        where = f"vmap rule of {FUNCTION.__name__} (info.batch_size={batch_size}, in_dims={in_dims})"
        shapes = None
        if isinstance(ret, tuple) and len(ret) == 2:
            outs, dims = as_tuple(ret[0]), ret[1]
            dims = list(dims) if isinstance(dims, (tuple, list)) else [dims] * len(outs)
            shapes = [tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__ for o in outs]
            print(f"  {where} returned outputs of shapes {shapes} with out_dims {ret[1]!r}")
            for k, (o, d) in enumerate(zip(outs, dims)):
                if isinstance(o, torch.Tensor) and isinstance(d, int) and -o.dim() <= d < max(o.dim(), 1):
                    if o.shape[d] != batch_size:
                        problems.append(
                            f"{where}, output {k}: size {o.shape[d]} at out_dim {d} (shape "
                            f"{tuple(o.shape)}), info.batch_size {batch_size}"
                        )
                elif isinstance(o, torch.Tensor) and d is not None:
                    problems.append(f"{where}, output {k}: out_dim {d!r} is not valid for shape {tuple(o.shape)}")
        else:
            print(f"  {where} returned {type(ret).__name__}: {ret!r:.200}")
            problems.append(f"{where} returned a {type(ret).__name__}; it must return (outputs, out_dims)")
    return problems


def main():
    print(f"reproducing {CASE_ID}")
    expected, returned_tuple = loop_reference(flat_call)
    out_dims = concrete_out_dims(expected, returned_tuple)
    args = build_batched_args()
    print("batched inputs: " + ", ".join(
        f"{tuple(a.shape)}" if isinstance(a, torch.Tensor) else repr(a) for a in args))
    print(f"levels (outermost first): {LEVELS}")
    snapshot = [(i, a.clone()) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in INPLACE_ARGS]
    problems = []
    calls, undo = record_rule_calls() if CHECK == "contract" else ([], lambda: None)
    try:
        actual = as_tuple(vmapped(flat_call, out_dims)(*args))
    except Exception as e:
        actual = None
        problems.append(f"vmap raised {type(e).__name__}: {e}")
    finally:
        undo()
    if CHECK == "contract":
        problems = contract_problems(calls) + problems
    for i, before in snapshot:
        if not torch.equal(args[i], before):
            problems.append(f"input {i} was modified by the call")
    if actual is not None:
        problems += compare("Function under vmap vs loop over slices", actual, expected)
    return problems
'''
