# ruff: noqa
# mypy: ignore-errors
# DESIGN: literal `[ (1, 2); (3, 4) ]` is `[(1, 2), (3, 4)]` where a tensor is expected

@op
def literal_matrix(x):
    dims = [8, 4]  # a plain Python list: not in a tensor position
    m = [(1, 2), (3, 4)] @ x
    v = relu([1.0, -2.0]) + (0.5, -0.5)
    return [[1, 2], [3, 4]]
