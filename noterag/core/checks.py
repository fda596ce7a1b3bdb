"""What building a method's graph checks in its declaration, before any model call: the mistakes
a contributor adding a method makes that nothing else would catch until a run had paid for
calls, or that would pass every generic test and fail at a user's run.

``check_method(spec, graph)`` runs once the method's wiring has added its steps
(``graphs.assemble.build``); each finding is one ``MethodError`` line naming the method, the
field or prompt slot, and the fix:

1. A state field the engine and the shared steps write or read (``noterag.core.state.SharedFields``:
   ``question``, ``messages``, ``asked``, the cost fields, ...) redeclared with another type (a
   trial's ``asked: bool`` shadowed the chat's ``asked: str``; a generic test then failed with
   ``assert 'Where did…' == False``, naming nothing).
2. A prompt slot its step does not fill (``{passage}`` where the step fills ``passages``): found
   by reading the source of the functions the wiring names (and the functions of their module
   those call) for ``<...>.prompts.<name>.format(<keywords>)`` and
   ``<...>.prompts.answer_for(<task>).format(<keywords>)``, directly or through a local name.
   A call whose values cannot be read without running it (``**values`` built at run time,
   ``getattr(env.prompts, name)``) is left to the run, where ``Prompt.format`` still refuses a
   missing slot; ``**{slot: TABLE[slot] for slot in prompt.slots}`` over a dict literal (the
   shared answer step's) is read as filling the table's keys.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any, NotRequired, Required, get_args, get_origin, get_type_hints

from noterag.core.prompt import Prompt
from noterag.core.spec import MethodError, MethodSpec
from noterag.core.state import SharedFields

# the target of ``<...>.prompts.answer_for(task)``: every answer prompt of the set
ANSWERS = "answer.*"


def check_method(spec: MethodSpec, graph: Any) -> None:
    """Everything below, for the method ``spec`` whose wiring has added its steps to ``graph``
    (a ``StateGraph``): one ``MethodError`` line for the first finding."""
    check_shared_fields(spec)
    check_prompt_slots(spec)


# --- 1. the shared state fields -------------------------------------------------------------------


def _plain(hint: Any) -> Any:
    """``hint`` without ``Required`` / ``NotRequired`` (whether a key must be given is not its type)."""
    while get_origin(hint) in (Required, NotRequired):
        hint = get_args(hint)[0]
    return hint


def _shown(hint: Any) -> str:
    """A type as a contributor wrote it: ``bool``, ``Annotated[int, add]``."""
    if isinstance(hint, type) and get_origin(hint) is None:
        return hint.__name__
    text = repr(hint).replace("typing.", "")
    return text if len(text) <= 80 else text[:77] + "..."


def check_shared_fields(spec: MethodSpec) -> None:
    """Refuse a state (or output) schema that declares a shared field with another type than
    the engine's: the engine would write its value there anyway (LangGraph checks no type), and
    the method's own reading of it would be wrong without a word."""
    shared = get_type_hints(SharedFields, include_extras=True)
    for schema in dict.fromkeys((spec.state, spec.output)):
        if schema is dict:
            continue
        hints = get_type_hints(schema, include_extras=True)
        for key, hint in hints.items():
            if key in shared and _plain(hint) != _plain(shared[key]):
                raise MethodError(
                    f"{spec.name}: its state {schema.__name__} declares {key!r} as "
                    f"{_shown(_plain(hint))}, but {key!r} is a shared field the engine writes as "
                    f"{_shown(_plain(shared[key]))} (noterag.core.state.SharedFields); rename "
                    f"the method's field, or declare it as the shared one"
                )


# --- 2. prompt slots against what the steps fill -------------------------------------------------


@dataclass(frozen=True)
class Render:
    """One place a step fills a prompt: the prompt's name (``ANSWERS``: every answer prompt),
    the slots it fills, the function and where in its file."""

    prompt: str
    fills: frozenset[str]
    function: str
    where: str


def check_prompt_slots(spec: MethodSpec) -> None:
    """Refuse a prompt of any profile whose slots a step rendering it does not fill: the run
    would fail at that step (``Prompt.format``: "prompt 'x' needs [...]"), after the calls of
    every step before it were paid for."""
    renders = prompt_renders(spec.wire)
    for profile, prompt_set in spec.prompts.items():
        prompts = _named_prompts(prompt_set)
        for render in renders:
            for name, prompt in prompts.items():
                if not _is_target(render.prompt, name):
                    continue
                missing = sorted(prompt.slots - render.fills)
                if not missing:
                    continue
                fills = ", ".join(f"{{{slot}}}" for slot in sorted(render.fills)) or "nothing"
                slots = ", ".join(f"{{{slot}}}" for slot in missing)
                raise MethodError(
                    f"{spec.name}: prompt {name!r} ({profile} profile) has the slot {slots}, "
                    f"which its step {render.function} ({render.where}) does not fill (it fills "
                    f"{fills}); rename the slot in the prompt to one the step fills, or fill it "
                    f"in the step"
                )


def _is_target(target: str, name: str) -> bool:
    return target == name or (target == ANSWERS and name.startswith("answer."))


def _named_prompts(prompt_set: Any) -> dict[str, Prompt]:
    """The set's prompts by the name a step renders them under (``answer.<task>`` for the
    answer prompts)."""
    found: dict[str, Prompt] = {}
    if not is_dataclass(prompt_set):
        return found
    for f in fields(prompt_set):
        value = getattr(prompt_set, f.name)
        if isinstance(value, Prompt):
            found[f.name] = value
    answers = getattr(prompt_set, "answer", None)
    if isinstance(answers, Mapping):
        found |= {f"answer.{t}": p for t, p in answers.items() if isinstance(p, Prompt)}
    return found


# the packages whose functions a wiring names that render no method's prompt: the engine's
# (node, stop_check), LangGraph's and LangChain's, the standard library's
_NOT_READ = ("noterag.core", "noterag.base", "langgraph", "langchain", "typing", "functools")


@functools.cache
def prompt_renders(wire: Callable[..., Any]) -> tuple[Render, ...]:
    """``_prompt_renders`` once per wiring function: every build of a method reads the same
    source."""
    return tuple(_prompt_renders(wire))


def _prompt_renders(wire: Callable[..., Any]) -> Iterator[Render]:
    """Every prompt render (``Render``) in the wiring function ``wire``, in the functions it
    names (a step given to ``node``, a module's attribute: ``ircot.reason``), and in the
    functions of their own modules those call, each read once."""
    seen: set[Any] = set()
    todo = [wire]
    while todo:
        func = todo.pop()
        code = getattr(func, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        tree = _parsed(func)
        if tree is None:
            continue
        yield from _renders(tree, func)
        for name in (*_named(tree, func), *_captured(func)):
            if isinstance(name, types.FunctionType) and (
                name.__module__ == func.__module__
                or (func is wire and not name.__module__.startswith(_NOT_READ))
            ):
                todo.append(name)


def _parsed(func: Any) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):  # no source file (built in, made by exec)
        return None


def _captured(func: Any) -> Iterator[Any]:
    """The functions ``func`` holds from its enclosing function (a shared wiring made for the
    method's own step: ``wiring(step)``), alone or in a sequence."""
    try:
        held = inspect.getclosurevars(func).nonlocals.values()
    except (TypeError, ValueError):
        return
    for value in held:
        yield from value if isinstance(value, list | tuple) else (value,)


def _named(tree: ast.AST, func: Any) -> Iterator[Any]:
    """The objects the names and attribute chains of ``tree`` refer to in ``func``'s module."""
    scope = func.__globals__
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in scope:
            yield scope[node.id]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = scope.get(node.value.id)
            if isinstance(base, types.ModuleType):
                yield getattr(base, node.attr, None)


def _renders(tree: ast.AST, func: Any) -> Iterator[Render]:
    """The prompt renders of one function's source (its nested functions included)."""
    where = f"{inspect.getsourcefile(func) or '?'}"
    first = func.__code__.co_firstlineno
    for scope in [
        tree,
        *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)),
    ]:
        aliases: dict[str, set[str]] = {}  # local name -> the prompts it holds now
        tables: dict[str, frozenset[str]] = {}  # local name -> the keys of its dict literal
        # in the order of the source: a name holds what it was last given (an assignment
        # binds where it ends, after its value is read)
        ordered = sorted(
            (n for n in _own_nodes(scope) if isinstance(n, ast.Assign | ast.Call)),
            key=lambda n: (
                (n.end_lineno or 0, n.end_col_offset or 0)
                if isinstance(n, ast.Assign)
                else (n.lineno, n.col_offset)
            ),
        )
        for node in ordered:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    aliases[target.id] = _targets(node.value, aliases)
                    keys = _literal_keys(node.value)
                    if keys is None:
                        tables.pop(target.id, None)
                    else:
                        tables[target.id] = keys
                continue
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "format"
            ):
                continue
            held = _targets(node.func.value, aliases)
            if not held or node.args:
                continue
            fills = _filled(node, tables, func.__globals__)
            if fills is None:
                continue
            line = f"{_short(where)}:{first + node.lineno - 1}"
            for prompt in sorted(held):
                yield Render(prompt, fills, func.__qualname__, line)


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of ``scope`` outside its nested functions (each is a scope of its own)."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


def _is_prompt_set(node: ast.AST) -> bool:
    """``<...>.prompts`` (``env.prompts``) or a name ``prompts``."""
    return (isinstance(node, ast.Attribute) and node.attr == "prompts") or (
        isinstance(node, ast.Name) and node.id == "prompts"
    )


def _targets(node: ast.AST, aliases: Mapping[str, set[str]]) -> set[str]:
    """The prompts an expression holds: ``<set>.refine_query`` -> {refine_query},
    ``<set>.answer_for(task)`` -> every answer prompt, ``a if c else b`` -> both, a local name
    -> what it was given."""
    if isinstance(node, ast.Attribute) and _is_prompt_set(node.value):
        return {node.attr}
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "answer_for"
        and _is_prompt_set(node.func.value)
    ):
        return {ANSWERS}
    if isinstance(node, ast.IfExp):
        return _targets(node.body, aliases) | _targets(node.orelse, aliases)
    if isinstance(node, ast.Name):
        return set(aliases.get(node.id, ()))
    return set()


def _literal_keys(node: ast.AST) -> frozenset[str] | None:
    """The keys of a dict literal whose keys are all strings, else None."""
    if not isinstance(node, ast.Dict):
        return None
    keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
    return (
        frozenset(k for k in keys if isinstance(k, str))
        if all(isinstance(k, str) for k in keys)
        else None
    )


def _filled(
    call: ast.Call, tables: Mapping[str, frozenset[str]], scope: Mapping[str, Any]
) -> frozenset[str] | None:
    """The slots a ``.format(...)`` call fills; None when that is known only at run time."""
    fills: set[str] = set()
    for keyword in call.keywords:
        if keyword.arg is not None:
            fills.add(keyword.arg)
            continue
        value = keyword.value  # **...: read only {slot: TABLE[slot] for slot in ...}
        keys = _literal_keys(value)
        if keys is None and isinstance(value, ast.DictComp):
            table = value.value  # TABLE[slot], or TABLE[slot](...): a table of functions
            if isinstance(table, ast.Call):
                table = table.func
            if isinstance(table, ast.Subscript) and isinstance(table.value, ast.Name):
                name = table.value.id
                if name in tables:
                    keys = tables[name]
                elif isinstance(scope.get(name), dict) and all(
                    isinstance(k, str) for k in scope[name]
                ):
                    keys = frozenset(scope[name])
        if keys is None:
            return None
        fills |= keys
    return frozenset(fills)


def _short(path: str) -> str:
    """A source path from the package's or the test's folder on: ``nodes/notes.py``."""
    parts = path.replace("\\", "/").split("/")
    for anchor in ("graphs", "nodes", "prompts", "noterag", "tests"):
        if anchor in parts:
            return "/".join(parts[len(parts) - 1 - parts[::-1].index(anchor) :])
    return parts[-1]
