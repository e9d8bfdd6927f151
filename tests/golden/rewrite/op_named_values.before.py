# ruff: noqa
# mypy: ignore-errors
# named index: names bound in the function are values (fixed indices), others are labels

@op
def pick(x, n):
    m = n + 1
    row[j] = x[n, j]
    col[i] = x[i, m]
    blocks[i] = x[i ^ n]
    return row + col + blocks
