# ruff: noqa
# mypy: ignore-errors
def param_init(x):
    w = __oc__.param("w", "param_init", init=0.5)
    v = __oc__.param("v", "param_init", init=__oc__.literal([1.0, 2.0]))
    u = __oc__.param("u", "param_init", init=uniform())
    return w * x + v + u
