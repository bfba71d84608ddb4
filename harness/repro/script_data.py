"""The frame of every full reproducer, as text: the data building it starts with (the
harness's seeds, the per-slice draws, the output comparison) and the runner it ends with
(``main()``'s problems to an exit status: 1 reproduced, 0 not, 2 the script's own failure).

Plain Python source kept as strings (never run by the suite itself):
``harness.repro.script.generate`` puts ``DATA``, one body (``script_vmap``,
``script_autodiff`` with ``script_eager``, or ``script_opcheck``) and ``FOOTER`` together.
A script must stand alone, with torch and the user's Function as its only imports.
"""

DATA = '''

def derive_seed(*parts):
    """The harness's stable seed: sha256 of the parts joined by \\x1f."""
    digest = hashlib.sha256("\\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def sample_seed(*parts):
    """The seed a sample callable receives: derive_seed below 2**31 (numpy-safe)."""
    return derive_seed(*parts) % 2**31


def is_container(x):
    return type(x) in (tuple, list) or type(x) is dict


def map_leaves(x, fn, prefix=()):
    """x rebuilt with every leaf replaced by fn(keys, leaf) (tuples, lists, dicts)."""
    if type(x) in (tuple, list):
        return type(x)(map_leaves(v, fn, (*prefix, k)) for k, v in enumerate(x))
    if type(x) is dict:
        return {k: map_leaves(v, fn, (*prefix, k)) for k, v in x.items()}
    return fn(prefix, x)


def get_at(x, keys):
    for k in keys:
        x = x[k]
    return x


_cache = {}


def slice_args(path=()):
    """Fresh copies of the arguments of the slice at ``path`` (index per level, outermost first)."""
    key = tuple(path)
    while key and key[-1] == 0:
        key = key[:-1]
    if key not in _cache:
        _cache[key] = samples_for(sample_seed(SEED, ENTRY_NAME, "slice", key))[SAMPLE_INDEX]
    return tuple(
        map_leaves(a, lambda _, v: v.detach().clone() if isinstance(v, torch.Tensor) else v)
        for a in _cache[key]
    )


def as_tuple(out):
    """Every leaf of a Function's outputs (tuples, lists, dicts and their nestings), flat."""
    return tuple(torch.utils._pytree.tree_leaves(out if isinstance(out, (tuple, list)) else (out,)))


def flat_call(*args):
    return as_tuple(CALL(*args))


def compare(label, actual, expected):
    """Print and return the differences between two tuples of outputs."""
    problems = []
    if len(actual) != len(expected):
        problems.append(f"{label}: {len(actual)} outputs, reference {len(expected)}")
    for k, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor):
            if a != e:
                problems.append(f"{label}, output {k}: got {a!r}, reference {e!r}")
            continue
        if not isinstance(a, torch.Tensor):
            problems.append(f"{label}, output {k}: got {type(a).__name__}, reference a tensor")
        elif a.shape != e.shape:
            problems.append(f"{label}, output {k}: shape {tuple(a.shape)}, reference {tuple(e.shape)}")
        elif a.dtype != e.dtype:
            problems.append(f"{label}, output {k}: dtype {a.dtype}, reference {e.dtype}")
        elif (a.is_floating_point() or a.is_complex()) and not bool(torch.isfinite(a).all()):
            # NaN "matches" NaN in allclose: non-finite values are reported, never a match
            bad = ~torch.isfinite(a.detach())
            problems.append(
                f"{label}, output {k}: {int(bad.sum())} of {a.numel()} values are not finite "
                f"(NaN or inf; the reference has {int((~torch.isfinite(e)).sum())} there)"
            )
        elif a.numel() and not torch.allclose(a.detach().to(e.dtype), e, rtol=RTOL, atol=ATOL, equal_nan=True):
            a64, e64 = a.detach().double().flatten(), e.double().flatten()
            close = torch.isclose(a64, e64, rtol=RTOL, atol=ATOL, equal_nan=True)
            err = torch.where(close, 0.0, (a64 - e64).abs().nan_to_num(nan=float("inf")))
            i = int(err.argmax())
            idx = tuple(int(v) for v in torch.unravel_index(torch.tensor(i), a.shape)) if a.dim() else ()
            ref = float(e64[i])
            rel = f", rel error {float(err[i]) / abs(ref):.3g}" if ref and err[i].isfinite() else ""
            problems.append(
                f"{label}, output {k}: {int((~close).sum())} of {a.numel()} values outside tolerance; "
                f"worst at {idx}: got {float(a64[i]):.6g}, reference {ref:.6g}, abs error "
                f"{float(err[i]):.3g}{rel}; rtol={RTOL:g}, atol={ATOL:g}"
            )
    return problems
'''

FOOTER = """

if __name__ == "__main__":
    try:
        found = main()
    except MemoryError:  # the script's own failure, never a reproduction
        traceback.print_exc()
        print("could not run: out of memory")
        sys.exit(2)
    except RuntimeError as e:
        if "tried to allocate" not in str(e):
            raise
        traceback.print_exc()
        print("could not run: out of memory")
        sys.exit(2)
    if found:
        print("REPRODUCED: the case fails:")
        for p in found:
            print(f"  - {p}")
        sys.exit(1)
    print("not reproduced: the transform matches the reference here")
    sys.exit(0)
"""
