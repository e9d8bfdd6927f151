# ruff: noqa
# mypy: ignore-errors
# named index: `y[a ^ b] = (x[a], z[b])` is concat; `^` in an operand slices

@op
def concatenate(x, z):
    y[a ^ b] = (x[a], z[b])
    head[a] = y[a ^ b]
    return head
