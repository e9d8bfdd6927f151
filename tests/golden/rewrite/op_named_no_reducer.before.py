# ruff: noqa
# mypy: ignore-errors
# named index without reducer: transpose, fixed index, wildcard, declaration operand

@op
def rearrange(x):
    t[j, i] = x[i, j]
    first[i] = x[i, 0]
    any_[i] = x[i, _]
    scaled[o] = sum[i]({w}[o, i] * x[i])
    return t + first + any_ + scaled
