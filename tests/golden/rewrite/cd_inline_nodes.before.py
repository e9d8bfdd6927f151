# ruff: noqa
# mypy: ignore-errors
# `{x}[...]` declares a non-differentiable node, hoisted; self-reference makes it persistent

@cd
def inline_nodes(p, g):
    {m, o := [3]}[...] = 0.9 * m + g
    {delta}[...] = m
    p -= 0.1 * delta
