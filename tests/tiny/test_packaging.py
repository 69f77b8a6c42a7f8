"""The built wheel ships its data: a `--target` install (no sys.prefix share/ folder, no
source tree beside it) finds the model registry, the grammars and the bench's prompt sets."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("pyproject.toml", "README.md", "LICENSE", "models.toml", "lsd_local", "grammars",
           "bench")


@pytest.fixture(scope="module")
def target_install(tmp_path_factory) -> Path:
    """The wheel built from a copy of the sources, installed with --target (no deps: they
    are this environment's)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    source.mkdir()
    for name in SHIPPED:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "results"))
        else:
            shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(pip + ["wheel", "--no-deps", "-w", str(tmp / "dist"), str(source)],
                           capture_output=True, text=True, timeout=600)
    if built.returncode and "Could not find a version" in built.stderr:
        pytest.skip("the build backend cannot be installed here (no package index)")
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (tmp / "dist").glob("lsd_local-*.whl")
    target = tmp / "target"
    subprocess.run(pip + ["install", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=600)
    return target


def run_there(target: Path, *args: str) -> subprocess.CompletedProcess:
    """Python with only the --target folder ahead of this environment's packages, started
    elsewhere, so that neither the source tree nor an editable install can answer."""
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(target.parent),
           "HF_HUB_OFFLINE": "1", "XDG_CONFIG_HOME": str(target.parent / "config")}
    return subprocess.run([sys.executable, *args], cwd=target.parent, env=env,
                          capture_output=True, text=True, timeout=300)


def test_wheel_metadata_license_version_and_types(target_install):
    import lsd_local

    [info] = target_install.glob("lsd_local-*.dist-info")
    metadata = (info / "METADATA").read_text()
    assert f"\nVersion: {lsd_local.__version__}\n" in metadata  # one source for the version
    assert "\nLicense-Expression: MIT\n" in metadata
    assert list(info.rglob("LICENSE")) and (target_install / "lsd_local" / "py.typed").exists()


def test_wheel_ships_registry_grammars_and_prompt_sets(target_install, tiny_pair):
    where = run_there(target_install, "-c", "import lsd_local; print(lsd_local.__file__)")
    assert where.stdout.startswith(str(target_install)), where.stderr
    models = run_there(target_install, "-m", "lsd_local", "models")
    assert models.returncode == 0, models.stderr
    assert "qwen2.5-coder-1.5b" in models.stdout and "qwen2.5-coder-0.5b" in models.stdout
    answer = run_there(target_install, "-m", "lsd_local", "run", str(tiny_pair[0]), "the cat",
                       "--raw", "--grammar", "json_string_array", "--max-tokens", "60",
                       "--json")
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["text"].strip().startswith("[")
    sets = run_there(target_install, "-c", (
        "from lsd_local.bench.prompts import load_set\n"
        "print(len(load_set('humaneval', 'test', 3)), len(load_set('chat', 'dev', 2)))"))
    assert sets.returncode == 0, sets.stderr
    assert sets.stdout.split() == ["3", "2"]


def test_wheel_ships_the_chat_pages_files(target_install):
    found = run_there(target_install, "-c", (
        "from lsd_local.server.page import FILES, WEB_DIR\n"
        "print(all((WEB_DIR / name).is_file() for name in FILES), WEB_DIR)"))
    assert found.returncode == 0, found.stderr
    shipped, where = found.stdout.split()
    assert shipped == "True" and where.startswith(str(target_install))
