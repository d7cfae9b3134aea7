"""The pack's import arrows run one way (docs/policies.md, "How the pack's code is laid
out"): the policy modules read the stack's facts and shared helpers, never each other; the
helpers import no policy module; nothing imports another module's private names; no
import circle anywhere in policies/."""

from __future__ import annotations

import ast
from pathlib import Path

from policies.registry import ALL_POLICIES

PACK = Path(__file__).resolve().parents[2] / "policies"
POLICY_MODULES = frozenset(p.check.__module__.removeprefix("policies.") for p in ALL_POLICIES)
"""The modules that define a policy's check."""
# The pack's plumbing: the registries import every policy module, these import the registry.
PLUMBING = frozenset(
    {"registry", "resource_registry", "evaluate", "pack", "offline_check", "__main__"}
)


def imports(module: str) -> list[tuple[str, str]]:
    """(imported policies module, imported name) for each import in `module`, anywhere in
    it; the name is "" for `import policies.x`."""
    found: list[tuple[str, str]] = []
    tree = ast.parse((PACK / f"{module}.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "policies":
            found += [(alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("policies."):
            target = (node.module or "").removeprefix("policies.")
            found += [(target, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name.removeprefix("policies."), "") for alias in node.names
                      if alias.name.startswith("policies.")]
    return found


def modules() -> list[str]:
    return sorted(path.stem for path in PACK.glob("*.py"))


def test_the_policy_modules_are_found() -> None:
    assert {"stack", "proxy", "watchdog", "accounts", "iam"} <= POLICY_MODULES
    assert not POLICY_MODULES & {"facts", "kit_resources", "grants", *PLUMBING}


def test_no_policy_module_imports_another() -> None:
    for module in sorted(POLICY_MODULES):
        others = {target for target, _ in imports(module)} & POLICY_MODULES - {module}
        assert not others, f"policies/{module}.py imports the policy module(s) {others}"


def test_shared_modules_import_no_policy_module() -> None:
    for module in modules():
        if module in POLICY_MODULES or module in PLUMBING:
            continue
        policy = {target for target, _ in imports(module)} & POLICY_MODULES
        assert not policy, f"policies/{module}.py (shared) imports {policy}"


def test_no_private_name_crosses_a_module() -> None:
    crossing = [
        f"policies/{module}.py imports {name} from {target}"
        for module in modules()
        for target, name in imports(module)
        if name.startswith("_")
    ]
    assert not crossing


def test_no_import_circle() -> None:
    arrows = {m: {t for t, _ in imports(m) if (PACK / f"{t}.py").exists()} for m in modules()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import circle: {' -> '.join((*path, module))}"
        if module in done:
            return
        for target in arrows[module]:
            visit(target, (*path, module))
        done.add(module)

    for module in arrows:
        visit(module, ())
