"""`ocannl_ast.records.record` behaves as `@dataclass(frozen=True, slots=True)`: the same
fields, equality, hashes, repr, match, replace, pickling and frozen errors, class by class
against the dataclass built from the same body; and the package's IR records use it."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import field
from typing import Any, ClassVar

import pytest

from ocannl_ast.records import record


def _pair(body: dict[str, Any], annotations: dict[str, str], **options: Any
          ) -> tuple[type, type]:
    """The same class body under `record` and under `dataclasses.dataclass`."""
    def make(name: str) -> type:
        ns = {**body, "__annotations__": dict(annotations), "__module__": __name__,
              "__qualname__": name}
        return type(name, (), ns)
    eq = options.get("eq", True)
    ours = record(make("Rec"), **options) if options else record(make("Rec"))
    theirs = dataclasses.dataclass(frozen=True, slots=True, eq=eq)(make("Rec"))
    return ours, theirs


BODIES = {
    "empty": ({}, {}),
    "one": ({}, {"x": "float"}),
    "defaults": ({"y": 2.5, "z": "s"}, {"x": "int", "y": "float", "z": "str"}),
    "uncompared": ({"o": field(default="o", compare=False)}, {"x": "int", "o": "str"}),
    "classvar": ({"k": 3}, {"k": "ClassVar[int]", "x": "tuple[int, ...]"}),
    # field names that the generated methods' own names could shadow
    "shadowing": ({"other": 0}, {"hash": "int", "NotImplemented": "str", "other": "int"}),
    "many": ({f"f{i}": i for i in range(6, 12)}, {f"f{i}": "int" for i in range(12)}),
}
VALUES: dict[str, list[tuple[Any, ...]]] = {
    "empty": [()], "one": [(1.0,), (float("nan"),), (-0.0,)],
    "defaults": [(1,), (1, 2.5), (1, 3.0, "t")],
    "uncompared": [(1,), (1, "p"), (2, "o")],
    "classvar": [((1, 2),), ((),)],
    "shadowing": [(1, "n"), (2, "m", 3)],
    "many": [tuple(range(6)), tuple(range(12))],
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_record_matches_dataclass(name: str) -> None:
    ours, theirs = _pair(*BODIES[name])
    assert [(f.name, f.default, f.compare) for f in dataclasses.fields(ours)] == \
        [(f.name, f.default, f.compare) for f in dataclasses.fields(theirs)]
    assert ours.__match_args__ == theirs.__match_args__  # type: ignore[attr-defined]
    assert ours.__slots__ == theirs.__slots__  # type: ignore[attr-defined]
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    assert dataclasses.is_dataclass(ours)
    assert ours.__dataclass_params__.frozen  # type: ignore[attr-defined]
    for args in VALUES[name]:
        a, b = ours(*args), theirs(*args)
        assert repr(a) == repr(b)
        assert hash(a) == hash(b)
        assert (a == ours(*args)) == (b == theirs(*args))
        assert (a == b) is False  # another class: NotImplemented both ways
        assert dataclasses.astuple(a) == dataclasses.astuple(b)
        assert repr(copy.deepcopy(a)) == repr(a) == repr(copy.copy(a))
        if dataclasses.fields(ours):
            first = dataclasses.fields(ours)[0].name
            with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign"):
                setattr(a, first, 0)
            with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete"):
                delattr(a, first)
            assert getattr(dataclasses.replace(a, **{first: 7}), first) == 7
    too_many = range(len(dataclasses.fields(ours)) + 1)
    with pytest.raises(TypeError) as mine:
        ours(*too_many)
    with pytest.raises(TypeError) as reference:
        theirs(*too_many)
    assert str(mine.value) == str(reference.value)  # "Rec.__init__() takes ..."


@record
class Pickled:
    x: int
    y: tuple[str, ...] = ()


def test_records_pickle() -> None:
    a = Pickled(3, ("a",))
    assert pickle.loads(pickle.dumps(a)) == a
    assert a.__getstate__() == [3, ("a",)]  # type: ignore[attr-defined]


def test_equal_values_of_records_compare_and_hash_as_dataclasses_do() -> None:
    ours, theirs = _pair(*BODIES["uncompared"])
    assert ours(1, "a") == ours(1, "b") and hash(ours(1, "a")) == hash(ours(1, "b"))
    assert ours(1, "a") != ours(2, "a")
    assert {ours(1), ours(1, "x"), ours(2)} == {ours(1), ours(2)}
    assert hash(ours(1)) == hash(theirs(1)) == hash((1,))


def test_eq_false_keeps_identity() -> None:
    ours, theirs = _pair({}, {"x": "int"}, eq=False)
    a = ours(1)
    assert a != ours(1) and a != copy.copy(a) and a in [a]
    assert hash(a) == object.__hash__(a)
    assert theirs(1) != theirs(1)


def test_match_reads_the_fields_positionally() -> None:
    ours, _ = _pair(*BODIES["defaults"])
    match ours(4, 5.0):
        case ours(x, y, z):  # type: ignore[misc]
            assert (x, y, z) == (4, 5.0, "s")
        case _:
            pytest.fail("no match")


def test_explicit_methods_of_the_body_are_kept() -> None:
    @record
    class ById:
        x: int

        def __eq__(self, other: object) -> bool:
            return self is other

        __hash__ = object.__hash__

        def __repr__(self) -> str:
            return "ById"

    a = ById(1)
    assert a != ById(1) and repr(a) == "ById" and hash(a) == object.__hash__(a)


def test_what_the_fast_path_does_not_cover_is_a_plain_dataclass() -> None:
    @record
    class Factory:
        xs: list[int] = field(default_factory=list)
        k: ClassVar[int] = 1

    @record
    class Post:
        x: int

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("negative")

    assert Factory().xs == [] and Factory().xs is not Factory().xs
    assert Post(1).x == 1
    with pytest.raises(ValueError, match="negative"):
        Post(-1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Post(1).x = 2  # type: ignore[misc]


def test_a_subclass_that_is_no_record_builds_its_base_fields() -> None:
    @record
    class Base:
        x: int
        y: int = 0

    class Derived(Base):
        __slots__ = ()

    assert repr(Derived(1)).endswith("Derived(x=1, y=0)") and Derived(1) != Base(1)
    assert Base(1, 2) == Base(1, 2)


def test_the_ir_records_are_records() -> None:
    from ocannl_ast.infer import relations
    from ocannl_ast.lowering import assignments, loop_ir

    for module in (loop_ir, assignments, relations):
        classes = [v for v in vars(module).values()
                   if isinstance(v, type) and dataclasses.is_dataclass(v)
                   and v.__module__ == module.__name__]
        assert classes
        for cls in classes:
            assert cls.__dataclass_params__.frozen, cls  # type: ignore[attr-defined]
            assert "__dict__" not in cls.__dict__, cls  # slotted
            assert cls.__setattr__.__module__ == "ocannl_ast.records", cls  # not exec'd
