# ruff: noqa
# mypy: ignore-errors
def last_axis(x):
    y = __oc__.einsum("...|...->...,i=>...|...->...", x)
    z = __oc__.einsum("...|...->...,i=>...|...->i,...", x)
    return y + z
