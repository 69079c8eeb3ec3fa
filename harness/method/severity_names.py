"""The severity rules' names and descriptions as :mod:`harness.method.severity` declares them, read from its source
without importing it (it needs numpy), for the command line's help and the record's schema. A rule is declared there
once, ``SeverityRule("NAME", STARTS, "DESCRIPTION")`` with string literals. Standard library only."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SOURCE = Path(__file__).with_name("severity.py")


@cache
def declared() -> tuple[str, dict[str, str]]:
    """The default rule's name and each rule's description by name, in the order :data:`SOURCE` declares them."""
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    (default,) = (
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["DEFAULT_RULE"]
    )
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "SeverityRule"]
    rules = {ast.literal_eval(call.args[0]): ast.literal_eval(call.args[2]) for call in calls}
    return default, rules


def default_rule() -> str:
    """The rule a run uses unless told otherwise, and a record without ``severity_rule`` used."""
    return declared()[0]


def rules_described() -> str:
    """Every rule with its description, as the help and the schema list them: ``integer (canonical: integer window
    starts) or original (the original code's float window starts, ...)``."""
    default, rules = declared()
    shown = [f"{name} ({'canonical: ' if name == default else ''}{text})" for name, text in rules.items()]
    return " or ".join(filter(None, [", ".join(shown[:-1]), shown[-1]]))
