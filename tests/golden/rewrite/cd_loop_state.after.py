# ruff: noqa
# mypy: ignore-errors
def momentum_all(params, lr, mom):
    __oc_code = __oc__.code_collector()
    for i, p in enumerate(params):
        __oc_code.add(__oc__.accum((vel := __oc__.node("vel", owner=(i, p))), "=:", __oc__.prim("add", mom * vel, __oc__.grad_of(p)), span=__oc_spans__[0]))
        __oc_code.add(__oc__.accum(p, "=-", __oc__.prim("mul", lr, vel), span=__oc_spans__[1]))
    return __oc_code.result()
