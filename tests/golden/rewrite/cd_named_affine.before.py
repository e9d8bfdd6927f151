# ruff: noqa
# mypy: ignore-errors
# named index: `y[2*i + 1] = x[i]` writes odd positions

@cd
def interleave(y, x):
    y[2*i] = x[i]
    y[2*i + 1] = x[i]
