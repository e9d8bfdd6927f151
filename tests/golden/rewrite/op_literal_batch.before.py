# ruff: noqa
# mypy: ignore-errors
# DESIGN: literal batch axis `[| ... |]` is `batch([...])`

@op
def literal_batch(x):
    b = batch([[1.0, 2.0], [3.0, 4.0]])
    return batch([(1, 2), (3, 4)]) * x
