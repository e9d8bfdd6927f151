# ruff: noqa
# mypy: ignore-errors
# `.grad`/`.value` reads and targets become grad_of/value_of everywhere in @cd

@cd
def grad_value(p, q):
    p.grad = q.grad + q.value
    p.value[...] = p.value - 0.1 * p.grad
    p.grad[...] = 0.0
    if p.grad is not None:
        q.grad += relu(p.grad)
