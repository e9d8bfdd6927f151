# ruff: noqa
# mypy: ignore-errors
# named index: `max[j](x[i, j])` is einsum_max; `max[j](a[i, j] + b[j])` is tropical

@op
def pools(a, b):
    m[i] = max[j](a[i, j])
    t[i] = max[j](a[i, j] + b[j])
    return m + t
