# ruff: noqa
# mypy: ignore-errors
# named index: `x[..., i]` reads `...|...->...,i`

@op
def last_axis(x):
    y[...] = sum[i](x[..., i])
    z[i, ...] = x[..., i]
    return y + z
