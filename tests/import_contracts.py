"""An import-linter contract type for `make lint`: no import circle between any two modules.

import-linter's own ``acyclic_siblings`` compares the children of a package with each other;
a circle through a package's ``__init__`` (``retrievers/__init__`` importing ``spec``, which
imports ``INDEX_KINDS`` back from the package) is not between siblings. This one looks at the
whole graph grimp builds, imports inside functions and under ``TYPE_CHECKING`` included, and
names each circle's modules with the line of each import.
"""

from __future__ import annotations

from typing import Any

from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def circles(graph: Any, root: str) -> list[list[str]]:
    """The strongly connected components of more than one module under ``root`` (Tarjan)."""
    modules = sorted(m for m in graph.modules if m == root or m.startswith(root + "."))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # iterative: the graph has hundreds of modules, recursion would be deep
        work = [(start, iter(sorted(graph.find_modules_directly_imported_by(start))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append(
                        (child, iter(sorted(graph.find_modules_directly_imported_by(child))))
                    )
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return sorted(found)


class AcyclicModulesContract(Contract):
    """``root``: the package whose modules may not import each other in a circle."""

    type_name = "acyclic_modules"
    root = fields.StringField()

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        root = str(self.root)  # type: ignore[attr-defined]
        found = circles(graph, root)
        details = []
        for component in found:
            members = set(component)
            lines = []
            for importer in component:
                for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                    if imported in members:
                        for detail in graph.get_import_details(
                            importer=importer, imported=imported
                        ):
                            lines.append(
                                f"{importer} -> {imported} (l.{detail['line_number']}: "
                                f"{detail['line_contents']})"
                            )
            details.append(lines)
        return ContractCheck(kept=not found, metadata={"circles": found, "details": details})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for component, lines in zip(check.metadata["circles"], check.metadata["details"]):
            output.print_error(f"a circle of {len(component)} modules: {', '.join(component)}")
            output.indent_cursor()
            for line in lines:
                output.print_error(line, bold=False)
            output.new_line()
