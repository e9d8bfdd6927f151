# ruff: noqa
# mypy: ignore-errors
# named index: `c[i, j] = sum[k](a[i, k] * b[k, j])`; augmented forms

@cd
def matmul(c, a, b):
    c[i, j] = sum[k](a[i, k] * b[k, j])
    c[i, j] += a[i, j]
    c[i] += sum[j](a[i, j])
