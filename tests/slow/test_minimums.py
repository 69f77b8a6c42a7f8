"""The lowest huggingface-hub that pyproject.toml admits really works: installed alone into a
folder ahead of this environment's, it runs the download tests (needs the package index, so
it is a `-m slow` test)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def declared_minimum(package: str) -> str:
    text = (REPO / "pyproject.toml").read_text()
    found = re.search(rf'"{re.escape(package)}>=([0-9.]+)"', text)
    assert found, f"no minimum for {package} in pyproject.toml"
    return found[1]


def test_the_declared_huggingface_hub_minimum_downloads(tmp_path):
    version = declared_minimum("huggingface-hub")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "install",
           "--no-deps", "--target", str(tmp_path), f"huggingface-hub=={version}"]
    installed = subprocess.run(pip, capture_output=True, text=True, timeout=600)
    if installed.returncode:
        pytest.skip(f"huggingface-hub=={version} cannot be installed here: "
                    f"{installed.stderr.strip().splitlines()[-1:]}")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    check = subprocess.run([sys.executable, "-c", "import huggingface_hub as h; "
                            "print(h.__version__, h.__file__)"], env=env,
                           capture_output=True, text=True, timeout=60)
    got, where = check.stdout.split()
    assert Version(got) == Version(version) and where.startswith(str(tmp_path)), check.stderr
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "tests/cli/test_download.py", "tests/unit/test_hub.py"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert tests.returncode == 0, tests.stdout[-3000:]
