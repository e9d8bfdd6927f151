# ruff: noqa
# mypy: ignore-errors
# named index: ellipsis, unary prims, negation, .grad, declarations, values, min/prod

@cd
def misc(y, x, p, n):
    y[..., i] = exp(x[..., i])
    y[i] = -x[i, n]
    p.grad[i] += x[i]
    {acc}[i] = min[j](x[i, j])
    y[i] = prod[j](x[i, j])
    y[i, j] = where(x[i, j], x[j, i], p[i, j])
