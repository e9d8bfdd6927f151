# ruff: noqa
# mypy: ignore-errors
def row_sum(x):
    y = __oc__.einsum("i,j=>i,", x, span=__oc_spans__[0])
    return y
