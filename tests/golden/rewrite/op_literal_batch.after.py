# ruff: noqa
# mypy: ignore-errors
def literal_batch(x):
    b = __oc__.literal(__oc__.batch([[1.0, 2.0], [3.0, 4.0]]))
    return __oc__.literal(__oc__.batch([(1, 2), (3, 4)])) * x
