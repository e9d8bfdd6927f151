# ruff: noqa
# mypy: ignore-errors
# named index: `y[i] = sum[j](x[i, j])` is einsum `i,j=>i,` (trailing comma: multi-char mode)

@op
def row_sum(x):
    y[i] = sum[j](x[i, j])
    return y
