# ruff: noqa
# mypy: ignore-errors
# named index: `y[a ^ b] = ...` assigns part of a concatenated axis

@cd
def parts(y, x, z):
    y[a ^ b] = x[a]
    y[a ^ b] = z[b]
    x[a] = y[a ^ b]
