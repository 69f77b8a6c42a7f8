"""The layering the design notes promise, read from the import statements: verify/ imports
nothing above it and never the backend; drafters never import llama_cpp or the backend; the
backend knows nothing above it; only the backend and the bench's peer talk to llama_cpp;
the library never imports the command line or the server. Rules are by package, with no
list of exceptions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lsd_local"
# modules every layer may import: they import nothing of lsd's but each other
LEAVES = ("lsd_local.config", "lsd_local.errors", "lsd_local.kernels.jit", "lsd_local.limits",
          "lsd_local.utf8")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved, in functions too."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


def lsd_imports(folder: str) -> dict[str, set[str]]:
    root = PACKAGE / folder if folder else PACKAGE
    return {module_name(p): {m for m in imports(p) if m.split(".")[0] in ("lsd_local",
                                                                         "llama_cpp")}
            for p in sorted(root.rglob("*.py"))}


def within(module: str, allowed: tuple[str, ...]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def outside(folder: str, allowed: tuple[str, ...]) -> dict[str, list[str]]:
    """Per module of `folder`, what it imports outside `allowed` (and the leaves)."""
    bad = {mod: sorted(m for m in found if not within(m, allowed + LEAVES))
           for mod, found in lsd_imports(folder).items()}
    return {mod: ms for mod, ms in bad.items() if ms}


@pytest.mark.parametrize("folder,allowed", [
    ("kernels", ("lsd_local.kernels",)),
    ("verify", ("lsd_local.verify", "lsd_local.kernels")),
    ("backend", ("lsd_local.backend", "llama_cpp")),
    ("drafters", ("lsd_local.drafters", "lsd_local.verify", "lsd_local.kernels")),
])
def test_lower_layers_import_nothing_above_them(folder, allowed):
    """kernels/ (the numba code) is the bottom; verify/ is pure; the backend knows nothing
    above it; drafters never import llama_cpp or the backend (the draft model is a Model
    handed in), the loop or the engine."""
    assert not outside(folder, allowed)


def test_the_auto_drafters_models_import_only_leaves():
    """Its cost and acceptance models are pure numpy (tested on hand-made evidence)."""
    models = ("lsd_local.drafters.auto.estimators", "lsd_local.drafters.auto.lookup_acceptance")
    for name in models:
        found = {m for m in imports(PACKAGE.parent / (name.replace(".", "/") + ".py"))
                 if m.startswith("lsd_local")}
        assert all(within(m, LEAVES + models) for m in found), name


def test_leaves_import_no_other_lsd_module():
    for leaf in LEAVES:
        path = PACKAGE.parent / (leaf.replace(".", "/") + ".py")
        found = {m for m in imports(path) if m.startswith("lsd_local")}
        assert all(within(m, LEAVES) for m in found), leaf


def test_only_the_backend_and_the_bench_talk_to_llama_cpp():
    for mod, found in lsd_imports("").items():
        if not within(mod, ("lsd_local.backend", "lsd_local.bench")):
            assert not [m for m in found if within(m, ("llama_cpp",))], mod


def test_the_library_never_imports_the_command_line():
    for mod, found in lsd_imports("").items():
        if not within(mod, ("lsd_local.cli", "lsd_local.__main__")):
            assert not [m for m in found if within(m, ("lsd_local.cli",))], mod


def test_the_import_reader_resolves_relative_imports():
    """So that the tests above see what a module really imports (and can fail)."""
    assert "lsd_local.kernels.rows.row_entropy" in imports(PACKAGE / "kernels" / "fly.py")
    assert "lsd_local.kernels.jit.kernel_or" in imports(PACKAGE / "verify" / "__init__.py")
    assert outside("drafters", ("lsd_local.drafters",))  # they do import verify/


def test_the_library_never_imports_the_server():
    """Only the command line starts a server; and the server's HTTP side never loads
    llama.cpp (only its engine process, worker.py, reaches the engine)."""
    for mod, found in lsd_imports("").items():
        if not within(mod, ("lsd_local.cli", "lsd_local.__main__", "lsd_local.server")):
            assert not [m for m in found if within(m, ("lsd_local.server",))], mod
    for mod, found in lsd_imports("server").items():
        if mod != "lsd_local.server.worker":
            assert not [m for m in found if within(m, ("lsd_local.engine", "lsd_local.backend",
                                                       "llama_cpp"))], mod


def test_the_http_process_never_loads_llama_cpp():
    """Importing everything `lsd serve`'s HTTP side needs leaves llama_cpp unloaded."""
    import subprocess
    import sys

    code = ("import sys, lsd_local.cli.serve, lsd_local.server.main, lsd_local.server.app; "
            "print('llama_cpp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_one_way_to_choose_between_a_kernel_and_its_reference():
    """Every call site chooses through kernels/jit.kernel_or: nothing else asks whether the
    kernels are loaded."""
    for mod, found in lsd_imports("").items():
        if mod != "lsd_local.kernels.jit":
            assert "lsd_local.kernels.jit.kernels_ready" not in found, mod
