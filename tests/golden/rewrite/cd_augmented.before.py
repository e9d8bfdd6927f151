# ruff: noqa
# mypy: ignore-errors
# DESIGN: `=+ =- =* =/ =**` are `+= -= *= /= **=` (bare names, subscripts, .grad)

@cd
def augmented(v, a, b, p):
    v += a * b
    v -= a
    v[...] *= b
    v /= 2.0
    v **= a
    p.grad += a
    v += sum(a * b)
