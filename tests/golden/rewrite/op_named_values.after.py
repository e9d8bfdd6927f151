# ruff: noqa
# mypy: ignore-errors
def pick(x, n):
    m = n + 1
    row = __oc__.einsum(f"{n},j=>j,", x, span=__oc_spans__[0])
    col = __oc__.einsum(f"i,{m}=>i,", x, span=__oc_spans__[1])
    blocks = __oc__.einsum(f"i^{n},=>i,", x, span=__oc_spans__[2])
    return row + col + blocks
