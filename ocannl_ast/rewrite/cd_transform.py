"""@cd transformer: assignment bodies → code collected through the builder namespace.

Input: the original CST of a @cd `def`. Output: the def opening with
`__oc_code = __oc__.code_collector()`, each tensor assignment turned into
`__oc_code.add(__oc__.accum(target, "=:+", __oc__.prim("mul", a, b), logic=...))`, call
statements passed to `__oc_code.include(...)`, `.grad`/`.value` reads into
`__oc__.grad_of(p)`/`__oc__.value_of(p)`, and every exit returning `__oc_code.result()`.
"""

from __future__ import annotations

import libcst as cst

from ocannl_ast.rewrite import build, cd_rhs, cd_state, dead_rebind, named_index
from ocannl_ast.rewrite.cd_rhs import Keywords
from ocannl_ast.rewrite.contract import ACCUM_KWARGS, ACCUM_OPS, CODE, REDUCER_ACCUM
from ocannl_ast.rewrite.declarations import Declaration, Field, parse_declaration
from ocannl_ast.rewrite.named_index import Reduction
from ocannl_ast.rewrite.source import Locator, ParsedFunction
from ocannl_ast.rewrite.transform_base import DialectTransformer

_NODE_ATTRS = {"grad": "grad_of", "value": "value_of"}


def _node_attr(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Attribute) and node.attr.value in _NODE_ATTRS


def _node_target(node: cst.CSTNode) -> bool:
    """A tensor name, `{x}`, `p.grad` / `p.value`, or a batch slice of one of those
    (`x.batch_slice(i)`, OCANNL `x @| i`: a view, so writes reach `x`)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
            and node.func.attr.value == "batch_slice" and len(node.args) == 1:
        node = node.func.value
    return isinstance(node, (cst.Name, cst.Set)) or _node_attr(node)


def _tensor_target(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Subscript, cst.Attribute))


def _add(call: cst.Call) -> cst.Expr:
    return cst.Expr(build.call(build.attr(CODE, "add"), [call]))


class CdTransformer(DialectTransformer):
    """Rewrites one @cd function (see the module docstring)."""

    kind = "cd"

    def __init__(self, parsed: ParsedFunction, loc: Locator, qualname: str) -> None:
        super().__init__(parsed, loc, qualname)
        self.decl_targets: set[int] = set()  # original `{x}` displays in target position
        self.outer_calls: set[int] = set()  # original calls at the top of an assignment RHS
        self.projections = "projections" in self.params
        # an operation's op_asn/grad_asn (slot parameters) owns no state
        self.owners = [] if self.projections else cd_state.owner_candidates(
            self.root, self.params, set(self.bound))
        self.loops: list[tuple[int, list[str]]] = []  # (id(loop), target names), top scope
        self.loop_decls: list[Declaration] = []  # declared in a loop: one node per iteration
        self.dead = dead_rebind.dead_rebindings(self.root, loc)  # `p = p - e`, never read

    # -- loops: a declaration inside one is created in place, once per iteration ---------
    def _enter_loop(self, node: cst.For | cst.While, names: list[str]) -> None:
        if self.at_top:
            self.loops.append((id(node), names))

    def _leave_loop(self, node: cst.For | cst.While) -> None:
        if self.loops and self.loops[-1][0] == id(node):
            self.loops.pop()

    def visit_For(self, node: cst.For) -> None:
        self._enter_loop(node, cd_state.target_names(node.target))

    def visit_While(self, node: cst.While) -> None:
        self._enter_loop(node, [])

    def leave_For(self, original_node: cst.For, updated_node: cst.For) -> cst.For:
        self._leave_loop(original_node)
        return updated_node

    def leave_While(self, original_node: cst.While, updated_node: cst.While) -> cst.While:
        self._leave_loop(original_node)
        return updated_node

    def declare(self, original: cst.Set, updated: cst.Set) -> cst.BaseExpression:
        """A node owned by the loop variables (innermost first), then by the parameters
        the function updates; inside a loop it is created in place (one per iteration)."""
        in_loop = bool(self.loops) and self.at_top
        owners = [n for _, names in reversed(self.loops) for n in names] if in_loop else []
        owners += [n for n in self.owners if n not in owners]
        if not in_loop:
            name = super().declare(original, updated)
            if owners:
                decl = self.decls[-1]
                self.decls[-1] = Declaration(decl.name, decl.builder, (
                    *decl.fields, Field(*cd_state.owner_field(owners), None)), decl.origin)
            return name
        decl = parse_declaration(original, updated, self.kind, self.loc)
        for prior in (*self.decls, *self.loop_decls):
            if prior.name == decl.name:
                line = self.loc.lines(prior.origin)[0]
                raise self.loc.error(
                    original, f"`{decl.name}` is declared twice (first declaration: line {line})"
                )
        if decl.name in self.params or decl.name in self.bound:
            raise self.loc.error(
                original, f"`{decl.name}` is declared inline but is also a parameter or bound "
                "in the body; rename one")
        if owners:
            decl = Declaration(decl.name, decl.builder,
                               (*decl.fields, Field(*cd_state.owner_field(owners), None)),
                               decl.origin)
        self.loop_decls.append(decl)
        return cd_state.in_place(decl, updated)

    # -- prologue, epilogue, returns ---------------------------------------------------
    def prologue(self, line: int) -> list[cst.BaseStatement]:
        stmt = build.statement(build.assign(CODE, build.oc_call("code_collector")))
        self.record(stmt, line, line)
        return [stmt]

    def epilogue(self, line: int) -> list[cst.BaseStatement]:
        stmt = build.statement(cst.Return(build.call(build.attr(CODE, "result"))))
        self.record(stmt, line, line)
        return [stmt]

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return) -> cst.Return:
        if not self.at_top:
            return updated_node
        if original_node.value is not None:
            raise self.loc.error(
                original_node,
                "a @cd function returns the code it collects: use a bare `return`",
            )
        return updated_node.with_changes(
            value=build.call(build.attr(CODE, "result")),
            whitespace_after_return=cst.SimpleWhitespace(" "),
        )

    # -- marking what the statement-level rewrites will consume ------------------------
    def _mark(self, target: cst.BaseExpression | None, rhs: cst.BaseExpression) -> None:
        if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Set):
            self.decl_targets.add(id(target.value))
        elif isinstance(target, cst.Set):
            self.decl_targets.add(id(target))
        self.outer_calls.add(id(rhs))
        if cd_rhs.is_reducer(rhs):
            self.outer_calls.add(id(cst.ensure_type(rhs, cst.Call).args[0].value))
        if isinstance(target, cst.Subscript) and not named_index.is_whole(target):
            self.named_rhs.add(id(rhs))

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(_tensor_target(t.target) for t in node.targets):
            self._mark(node.targets[0].target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._mark(node.target, node.value)

    def visit_Expr(self, node: cst.Expr) -> None:
        if cd_rhs.call_name(node.value) == "accum":
            call = cst.ensure_type(node.value, cst.Call)
            self.outer_calls.add(id(call))
            if len(call.args) >= 3:
                self._mark(call.args[0].value, call.args[2].value)

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        if len(self.scopes) == 1:
            cd_state.check_loop_reads(self.root, self.loop_decls, self.loc)
        return super().leave_FunctionDef(original_node, updated_node)

    # -- expressions -------------------------------------------------------------------
    def leave_Attribute(
        self, original_node: cst.Attribute, updated_node: cst.Attribute
    ) -> cst.BaseExpression:
        builder = _NODE_ATTRS.get(updated_node.attr.value)
        if builder is None:
            return updated_node
        return build.oc_call(builder, [updated_node.value]).with_changes(
            lpar=updated_node.lpar, rpar=updated_node.rpar
        )

    def leave_Set(self, original_node: cst.Set, updated_node: cst.Set) -> cst.BaseExpression:
        if id(original_node) not in self.decl_targets:
            raise self.loc.error(
                original_node,
                "in @cd an inline declaration is only allowed as an assignment target: "
                "{x}[...] = e",
            )
        return self.declare(original_node, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self.check_named_reducer(original_node)
        name = cd_rhs.call_name(original_node)
        if id(original_node) in self.outer_calls:
            return updated_node
        if name == "accum":
            raise self.loc.error(original_node, "accum(...) is a statement of its own in @cd")
        has_kw = any(a.keyword and a.keyword.value in ACCUM_KWARGS for a in original_node.args)
        if has_kw and name is not None and (cd_rhs.arity(name) or name in REDUCER_ACCUM):
            raise self.loc.error(
                original_node,
                f"`{name}(..., logic=/projections=)` must be the outermost operation of an "
                "assignment's right-hand side",
            )
        return updated_node

    # -- statements --------------------------------------------------------------------
    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> cst.Expr:
        if cd_rhs.call_name(original_node.value) == "accum":
            orig = cst.ensure_type(original_node.value, cst.Call)
            return _add(self._explicit(orig, cst.ensure_type(updated_node.value, cst.Call)))
        if isinstance(original_node.value, cst.Call):
            include = build.call(build.attr(CODE, "include"), [updated_node.value])
            return updated_node.with_changes(value=include)
        return updated_node

    def leave_Assign(
        self, original_node: cst.Assign, updated_node: cst.Assign
    ) -> cst.BaseSmallStatement:
        tensor = [self._classify(t.target) for t in original_node.targets]
        if not any(tensor):
            if id(original_node) in self.dead:  # warns when the value is a tensor
                name = cst.ensure_type(original_node.targets[0].target, cst.Name).value
                value = build.oc_call("rebound", [updated_node.value, build.string(name)])
                return updated_node.with_changes(value=value)
            return updated_node
        if len(tensor) > 1:
            raise self.loc.error(
                original_node, "chained assignment to a tensor: write one assignment per target"
            )
        target, upd = original_node.targets[0].target, updated_node.targets[0].target
        return _add(self._assignment(target, upd, None, original_node.value, updated_node.value))

    def leave_AugAssign(
        self, original_node: cst.AugAssign, updated_node: cst.AugAssign
    ) -> cst.BaseSmallStatement:
        op = cd_rhs.AUG_ACCUM.get(type(original_node.operator))
        if op is None:
            sym = cst.Module([]).code_for_node(original_node.operator).strip()
            raise self.loc.error(
                original_node,
                f"`{sym}` has no accumulation in @cd (use +=, -=, *=, /=, **=); "
                "a Python value is updated with `x = x op e`",
            )
        target = original_node.target
        if not isinstance(target, cst.Name):
            self._classify(target)
        call = self._assignment(
            target, updated_node.target, op, original_node.value, updated_node.value
        )
        return _add(call)

    def leave_AnnAssign(
        self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign
    ) -> cst.AnnAssign:
        if not isinstance(original_node.target, cst.Name):
            raise self.loc.error(
                original_node.target, "an annotated assignment binds a plain Python name"
            )
        return updated_node

    def _classify(self, target: cst.BaseExpression) -> bool:
        """True for a tensor target, False for a Python binding; raise for anything else."""
        if isinstance(target, cst.Name):
            return False
        if isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                if self._classify(el.value):
                    raise self.loc.error(el.value, "tuple targets cannot assign tensors")
            return False
        if isinstance(target, cst.StarredElement):
            return self._classify(target.value)
        if _node_attr(target):
            return True
        if isinstance(target, cst.Subscript):
            base = target.value
            if _node_target(base):
                return True
            raise self.loc.error(
                base, "a subscripted target is a tensor name, p.grad, p.value, {x} or a "
                "batch slice x.batch_slice(i) of one"
            )
        raise self.loc.error(
            target, "assignment targets in @cd are t[...], t[i, j], p.grad, p.value, {x}[...]"
        )

    def _assignment(
        self,
        target: cst.BaseExpression,
        upd_target: cst.BaseExpression,
        aug: str | None,
        rhs: cst.BaseExpression,
        upd_rhs: cst.BaseExpression,
    ) -> cst.Call:
        base = upd_target
        if isinstance(target, cst.Subscript):
            base = cst.ensure_type(upd_target, cst.Subscript).value
            if not named_index.is_whole(target):
                return self._named(target, base, aug, rhs, upd_rhs)
        kw = Keywords()
        reducer, body, upd_body = cd_rhs.peel_reducer(rhs, upd_rhs, kw, self.loc)
        op = self._accum_op(aug, reducer, rhs)
        prim = cd_rhs.primitive(body, upd_body, kw, self.loc)
        return cd_rhs.accum_call(base, op, prim, kw, self.projections)

    def _accum_op(self, aug: str | None, reducer: str | None, node: cst.CSTNode) -> str:
        if aug is None:
            return REDUCER_ACCUM[reducer] if reducer else "=:"
        if reducer is not None and cd_rhs.AUG_REDUCER.get(aug) != reducer:
            raise self.loc.error(
                node, f"`{reducer}` does not agree with the `{aug}` accumulation of this assignment"
            )
        return aug

    def _named(
        self,
        target: cst.Subscript,
        base: cst.BaseExpression,
        aug: str | None,
        rhs: cst.BaseExpression,
        upd_rhs: cst.BaseExpression,
    ) -> cst.Call:
        """`c[i, j] = sum[k](a[i, k] * b[k, j])` → accum(c, "=:+", prim("mul", a, b), logic=...)."""
        values = self.values()
        lhs = named_index.parse_row(target, values, self.loc)
        red = named_index.split_reduction(rhs, upd_rhs, self.loc)
        name, pairs = self._named_body(red)
        rows = [named_index.parse_row(sub, values, self.loc) for sub, _ in pairs]
        named_index.check_consumed(lhs, rows, red, self.loc)
        op = self._accum_op(aug, red.reducer, rhs)
        prim = build.oc_call("prim", [build.string(name), *(e for _, e in pairs)])
        kw = Keywords([("logic", named_index.spec(rows, lhs))])
        return cd_rhs.accum_call(base, op, prim, kw, projections=False)

    def _named_body(
        self, red: Reduction
    ) -> tuple[str, list[tuple[cst.Subscript, cst.BaseExpression]]]:
        body, upd = red.body, red.updated
        name: str | None = None
        orig_args: list[cst.BaseExpression] = []
        upd_args: list[cst.BaseExpression] = []
        if isinstance(body, cst.Subscript):
            name, orig_args, upd_args = "id", [body], [upd]
        elif isinstance(body, cst.BinaryOperation) and not isinstance(
            body.operator, cst.MatrixMultiply
        ):
            u = cst.ensure_type(upd, cst.BinaryOperation)
            name = cd_rhs.BINOP_PRIM.get(type(body.operator))
            orig_args, upd_args = [body.left, body.right], [u.left, u.right]
        elif isinstance(body, cst.UnaryOperation) and isinstance(body.operator, cst.Minus):
            u1 = cst.ensure_type(upd, cst.UnaryOperation)
            name, orig_args, upd_args = "neg", [body.expression], [u1.expression]
        elif isinstance(body, cst.Call) and all(a.keyword is None for a in body.args):
            called = cd_rhs.call_name(body)
            name = called if called and cd_rhs.arity(called) == len(body.args) else None
            orig_args = [a.value for a in body.args]
            upd_args = [a.value for a in cst.ensure_type(upd, cst.Call).args]
        if name is None or not all(isinstance(a, cst.Subscript) for a in orig_args):
            raise self.loc.error(
                body,
                "a named-index right side is one primitive over indexed tensors, e.g. "
                "sum[k](a[i, k] * b[k, j]) or exp(x[i, j])",
            )
        subs = [cst.ensure_type(a, cst.Subscript) for a in orig_args]
        return name, [
            (s, cst.ensure_type(u2, cst.Subscript).value)
            for s, u2 in zip(subs, upd_args, strict=True)
        ]

    def _explicit(self, orig: cst.Call, upd: cst.Call) -> cst.Call:
        """`accum(v, "=:@^", e, logic=...)` written by the user."""
        pos = [a for a in orig.args if a.keyword is None]
        if len(pos) != 3 or any(a.star for a in orig.args):
            raise self.loc.error(
                orig, 'accum takes (target, "op", rhs, logic=..., projections=...)'
            )
        op_node = pos[1].value
        op = op_node.evaluated_value if isinstance(op_node, cst.SimpleString) else None
        if not isinstance(op, str) or op not in ACCUM_OPS:
            raise self.loc.error(
                op_node, f"not an accumulation operator; one of: {', '.join(sorted(ACCUM_OPS))}"
            )
        target = pos[0].value
        if not _node_target(target):
            raise self.loc.error(
                target, "the target of accum is a tensor name, p.grad, p.value, {x} or a "
                "batch slice x.batch_slice(i) of one"
            )
        kw = Keywords()
        upd_pos = [a for a in upd.args if a.keyword is None]
        for a, u in zip(orig.args, upd.args, strict=True):
            if a.keyword is not None:
                if a.keyword.value not in ACCUM_KWARGS:
                    raise self.loc.error(a, f"`{a.keyword.value}=` is not an accum option")
                kw.add(a.keyword.value, u.value, a, self.loc)
        if cd_rhs.is_reducer(pos[2].value):
            raise self.loc.error(pos[2].value, "the operator string already names the reduction")
        prim = cd_rhs.primitive(pos[2].value, upd_pos[2].value, kw, self.loc)
        return cd_rhs.accum_call(upd_pos[0].value, op, prim, kw, self.projections)
