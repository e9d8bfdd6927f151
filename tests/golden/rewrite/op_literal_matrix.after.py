# ruff: noqa
# mypy: ignore-errors
def literal_matrix(x):
    dims = [8, 4]  # a plain Python list: not in a tensor position
    m = __oc__.literal([(1, 2), (3, 4)]) @ x
    v = relu(__oc__.literal([1.0, -2.0])) + __oc__.literal((0.5, -0.5))
    return __oc__.literal([[1, 2], [3, 4]])
