# ruff: noqa
# mypy: ignore-errors
def pick(x, n):
    m = n + 1
    row = __oc__.einsum(f"{n},j=>j,", x)
    col = __oc__.einsum(f"i,{m}=>i,", x)
    blocks = __oc__.einsum(f"i^{n},=>i,", x)
    return row + col + blocks
