"""The body of a full reproducer for the ``opcheck_*`` checks, as text: the case's sample
through ``torch.library.opcheck`` with the one test the case runs. Uses
``script_data.DATA``'s ``slice_args``."""

OPCHECK = """
#: The opcheck test this case runs (opcheck_faketensor -> test_faketensor).
TEST = "test_" + CHECK[len("opcheck_"):]


def main():
    print(f"reproducing {CASE_ID} (torch.library.opcheck, test_utils={TEST!r})")
    schema = getattr(getattr(FUNCTION, "_opoverload", FUNCTION), "_schema", None)
    mutable = {
        i for i, a in enumerate(schema.arguments if schema is not None else ())
        if a.alias_info is not None and a.alias_info.is_write
    }
    args = tuple(
        a.detach().requires_grad_(True)
        if isinstance(a, torch.Tensor) and i not in mutable and (a.is_floating_point() or a.is_complex())
        else a
        for i, a in enumerate(slice_args())
    )
    try:
        torch.library.opcheck(FUNCTION, args, test_utils=TEST, atol=ATOL, rtol=RTOL)
    except Exception as e:
        return [str(e)]
    return []
"""
