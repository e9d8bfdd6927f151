# ruff: noqa
# mypy: ignore-errors
def hoist_scopes(xs, n):
    """Sums of the same shared parameters."""
    w = __oc__.param("w")
    v = __oc__.param("v", output_dims=[n])
    u = __oc__.param("u")
    out = []
    for x in xs:
        out.append(w @ x)
    ys = [v * x for x in xs]

    def layer(x):
        return relu(u @ x)

    return layer(sum(out) + sum(ys))
