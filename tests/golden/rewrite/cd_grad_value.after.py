# ruff: noqa
# mypy: ignore-errors
def grad_value(p, q):
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(__oc__.grad_of(p), "=:", __oc__.prim("add", __oc__.grad_of(q), __oc__.value_of(q)), span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(__oc__.value_of(p), "=:", __oc__.prim("sub", __oc__.value_of(p), 0.1 * __oc__.grad_of(p)), span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(__oc__.grad_of(p), "=:", __oc__.prim("id", 0.0), span=__oc_spans__[2]))
    if __oc__.grad_of(p) is not None:
        __oc_code.add(__oc__.accum(__oc__.grad_of(q), "=+", __oc__.prim("relu", __oc__.grad_of(p)), span=__oc_spans__[3]))
    return __oc_code.result()
