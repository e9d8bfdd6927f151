# ruff: noqa
# mypy: ignore-errors
# named index: binary and n-ary products of indexed operands

@op
def matmul(a, b, c):
    m[i, k] = sum[j](a[i, j] * b[j, k])
    t[i, l] = sum[j, k](a[i, j] * b[j, k] * c[k, l])
    outer[i, j] = a[i] * b[j]
    return m + t + outer
