# ruff: noqa
# mypy: ignore-errors
def inline_nodes(p, g):
    m = __oc__.node("m", output_dims=[3], owner=(p,))
    delta = __oc__.node("delta", owner=(p,))
    __oc_code = __oc__.code_collector()
    __oc_code.add(__oc__.accum(m, "=:", __oc__.prim("add", 0.9 * m, g), span=__oc_spans__[0]))
    __oc_code.add(__oc__.accum(delta, "=:", __oc__.prim("id", m), span=__oc_spans__[1]))
    __oc_code.add(__oc__.accum(p, "=-", __oc__.prim("mul", 0.1, delta), span=__oc_spans__[2]))
    return __oc_code.result()
