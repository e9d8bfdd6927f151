# ruff: noqa
# mypy: ignore-errors
def param_init(x):
    w = __oc__.param("w", init=0.5)
    v = __oc__.param("v", init=[1.0, 2.0])
    u = __oc__.param("u", init=uniform())
    z = __oc__.param("z", init=__oc__.batch([(1, 2)]))
    return w * x + v + u + z
