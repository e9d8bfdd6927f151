# ruff: noqa
# mypy: ignore-errors
# DESIGN: `{ w = 0.5 }` is `{w := 0.5}`; a display init stays nested lists (values and shape)

@op
def param_init(x):
    return {w := 0.5} * x + {v := [1.0, 2.0]} + {u := uniform()} + {z := batch([(1, 2)])}
