"""Packaging: the wheel installs one top-level import package, `depthcraft`, and nothing called `verify`.

PyPI's unrelated distribution `verify` installs an import package `verify`; depthcraft's folders
(`constructions/`, `rasp_programs/`, `verify/`) install as `depthcraft.*` subpackages, so both can be
installed side by side (issue 10). The slow test installs both into a fresh virtual environment.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out, src = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("src")
    for rel in ("pyproject.toml", "README.md", "LICENSE", "depthcraft", "constructions", "rasp_programs", "verify"):
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, src / rel, ignore=shutil.ignore_patterns("__pycache__"))
        elif (ROOT / rel).is_file():
            shutil.copy(ROOT / rel, src / rel)
    # built from a copy, so the build leaves no build/ folder in the checkout
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
                   check=True, capture_output=True, text=True)
    (path,) = out.glob("depthcraft-*.whl")
    return path


def test_the_wheel_has_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"depthcraft"}
    top_level = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    if top_level:  # setuptools writes it; its content must agree
        assert zipfile.ZipFile(wheel).read(top_level[0]).decode().split() == ["depthcraft"]
    for sub in ("constructions", "rasp_programs", "verify", "constructions/catalogue", "verify/tasks/chen_zou"):
        assert f"depthcraft/{sub}/__init__.py" in names
    assert "depthcraft/verify/lookup.py" in names
    assert not any(n.startswith(("verify/", "constructions/", "rasp_programs/", "tests/")) for n in names)
    # the repository tools stay in the checkout (issue 40): the docs generator and the layering reader
    assert not any(n.endswith(("/docgen.py", "/architecture.py")) or n.startswith("tools/") for n in names)
    assert "depthcraft/testing.py" in names  # the users' test helpers are installed


def test_the_console_script_points_into_depthcraft(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    (entry,) = [n for n in names if n.endswith("entry_points.txt")]
    assert "depthcraft = depthcraft.verify.cli:entry" in zipfile.ZipFile(wheel).read(entry).decode()


@pytest.mark.slow
def test_installs_beside_pypi_verify(tmp_path, wheel):
    """With PyPI's `verify==1.1.1` installed first, depthcraft installs, works, and leaves `verify` intact."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([py, "-m", "pip", "install", "-q", "verify==1.1.1"], check=True, env=env)
    before = subprocess.run([py, "-c", "import verify, os; print(os.path.dirname(verify.__file__))"],
                            check=True, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    subprocess.run([py, "-m", "pip", "install", "-q", str(wheel)], check=True, env=env)
    out = subprocess.run([py, "-c", "from depthcraft import check_program; import depthcraft.verify.lookup as l; "
                                    "print(check_program.__module__, l.__file__)"],
                         check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert out.startswith("depthcraft.verify.api ")
    run = subprocess.run([str(venv / "bin" / "depthcraft"), "verify", "khop_doubling", "-p", "k=2", "-p", "n=8",
                          "--samples", "50", "--hypothesis", "10"], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    check = subprocess.run([py, "-c", "import verify, os; from verify import base, logic, numbers; "
                                      "print(os.path.dirname(verify.__file__))"],
                           check=True, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
    assert check == before and os.path.isfile(os.path.join(check, "logic.py"))
    subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", "depthcraft"], check=True, env=env)
    subprocess.run([py, "-c", "import verify.logic"], check=True, cwd=tmp_path)
