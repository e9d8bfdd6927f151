# ruff: noqa
# mypy: ignore-errors
# hoisting out of loops, comprehensions and nested functions, after the docstring

@op
def hoist_scopes(xs, n):
    """Sums of the same shared parameters."""
    out = []
    for x in xs:
        out.append({w} @ x)
    ys = [{v, o := [n]} * x for x in xs]

    def layer(x):
        return relu({u} @ x)

    return layer(sum(out) + sum(ys))
