# ruff: noqa
# mypy: ignore-errors
# DESIGN: `x @| i` is `x.batch_slice(i)`; unchanged

@op
def slice_first(x, i):
    return x.batch_slice(i) + 1.0
