# ruff: noqa
# mypy: ignore-errors
# DESIGN: `{ b; o = [h] }` is `{b, o := [h]}`: o/i/b shorthands, other fields as kwargs

@op
def param_fields(x, h):
    layer = {w, i := [3], o := [h], b := [2], label := ["layer"]}
    return layer @ x + {bias, output_dims := [h], input_dims := [], batch_dims := []}
