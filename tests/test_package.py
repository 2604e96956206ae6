"""selfattn as a user installs it: the wheel and the sdist built from this tree, the wheel installed into a
fresh virtual environment, and the product run from an empty folder.

The fresh environment reuses the packages of the one running the tests (a .pth line naming its
site-packages: torch is not installed twice) and gets the wheel with `pip install --no-deps`. The wheel is
built once per session (`wheel_env`); every test here reads it.
"""

from __future__ import annotations

import email
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import selfattn
from selfattn import extras
from tests.tolerances import TOL

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = (
    "pyproject.toml",
    "setup.py",
    "README.md",
    "LICENSE",
    "MANIFEST.in",
    "src",
    "tests",
    "docs",
    "examples",
    "scripts",
    "Makefile",
    "eslint.config.js",
)
"""What a build reads from the tree (copied, so the build leaves nothing in it)."""

HEAVY = ("transformers", "matplotlib", "fastapi", "uvicorn", "gguf", "accelerate", "huggingface-hub", "jieba")
"""Distributions a core install (`pip install selfattn`) must not pull."""


def _run(cmd: list[str], *, cwd: Path, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def _build(tmp: Path) -> tuple[Path, Path]:
    """(wheel, sdist) of a copy of this tree, built by setuptools' PEP 517 hooks without isolation."""
    tree = tmp / "tree"
    tree.mkdir()
    for name in SHIPPED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, tree / name)
    out = tmp / "dist"
    code = (
        "import sys; from setuptools import build_meta as b; out = sys.argv[1];"  # build_sdist rewrites sys.argv
        "print(b.build_sdist(out)); print(b.build_wheel(out))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([sys.executable, "-c", code, str(out)], cwd=tree, env=env)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return wheel, sdist


class Env:
    """A fresh venv holding the wheel: `python`, `selfattn`, `run(args)` from an empty folder."""

    def __init__(self, root: Path, wheel: Path, sdist: Path):
        self.root, self.wheel, self.sdist = root, wheel, sdist
        self.bin = root / "venv" / "bin"
        self.python = self.bin / "python"
        self.empty = root / "empty"
        self.empty.mkdir()
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        self.env["PATH"] = f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"

    def run(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return _run(list(args), cwd=self.empty, env=self.env, timeout=timeout)


@pytest.fixture(scope="session")
def wheel_env(tmp_path_factory) -> Env:
    root = tmp_path_factory.mktemp("package")
    wheel, sdist = _build(root)
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    purelib = Path(
        _run(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root
        ).stdout.strip()
    )
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "reuse-the-test-environment.pth").write_text("".join(f"{p}\n" for p in sorted(here)))
    env = Env(root, wheel, sdist)
    env.run(str(env.python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel))
    return env


def test_the_wheel_is_what_is_imported_and_carries_its_metadata(wheel_env):
    code = (
        "import json, importlib.metadata as m, selfattn; d = m.distribution('selfattn');"
        "print(json.dumps({'file': selfattn.__file__, 'version': selfattn.__version__, 'meta': d.version,"
        "'requires': d.requires, 'license': d.metadata['License-Expression'],"
        "'files': [str(f) for f in d.files]}))"
    )
    info = json.loads(wheel_env.run(str(wheel_env.python), "-c", code).stdout)
    assert Path(info["file"]).is_relative_to(wheel_env.root / "venv"), info["file"]  # not this tree's copy
    assert info["version"] == info["meta"] == selfattn.__version__
    assert info["license"] == "MIT"
    files = set(info["files"])
    assert "selfattn/py.typed" in files and "selfattn/kernels/csrc/attention.cpp" in files
    assert any(f.endswith(".dist-info/licenses/LICENSE") for f in files)
    assert any(f.startswith("selfattn/model/default/") and f.endswith(".safetensors") for f in files)


def _requires(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(z.read(name)).get_all("Requires-Dist") or []


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_a_core_install_pulls_no_explainer_or_server_package(wheel_env):
    requires = _requires(wheel_env.wheel)
    core = {_name(r) for r in requires if "extra ==" not in r}
    assert {"torch", "numpy", "ninja"} <= core
    assert not core & set(HEAVY), core & set(HEAVY)
    by_extra: dict[str, set[str]] = {}
    for r in requires:
        if "extra ==" in r:
            extra = re.search(r"extra == ['\"]([\w-]+)['\"]", r).group(1)
            by_extra.setdefault(extra, set()).add(_name(r))
    assert {"explain", "serve", "all", "test"} <= set(by_extra)
    for extra, modules in extras.EXTRAS.items():  # the helper's list is the extra's own
        named = by_extra[extra] | (by_extra["explain"] if extra == "serve" else set())
        assert {m.replace("_", "-") for m in modules} <= named, (extra, modules, named)


def test_the_sdist_ships_the_tests_and_pytest_runs_them(wheel_env, tmp_path):
    with tarfile.open(wheel_env.sdist) as t:
        names = [n.split("/", 1)[1] for n in t.getnames() if "/" in n]
        t.extractall(tmp_path, filter="data")
    shipped = {
        "LICENSE",
        "pyproject.toml",
        "setup.py",
        "src/selfattn/py.typed",
        "src/selfattn/kernels/csrc/attention.cpp",
    }
    assert shipped <= set(names)
    assert {"tests/conftest.py", "tests/test_reference.py", "tests/tolerances.py"} <= set(names)
    assert not [n for n in names if "/prebuilt/" in n or n.endswith((".pyc", ".so"))]
    (unpacked,) = tmp_path.iterdir()
    done = subprocess.run(
        [str(wheel_env.python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_reference.py"],
        cwd=unpacked,
        env=wheel_env.env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]  # 5 was "no tests collected"
    assert re.search(r"\d+ passed", done.stdout), done.stdout[-2000:]


def test_the_wheel_carries_the_kernel_and_native_runs_without_compiling(wheel_env, tmp_path):
    """A wheel built here carries the compiled kernel (setup.py's build step) for this torch and CPU: with an empty
    cache, backend="native" loads it and compiles nothing (every notice is logged: none says "compiling")."""
    with zipfile.ZipFile(wheel_env.wheel) as z:
        carried = [n for n in z.namelist() if n.startswith("selfattn/kernels/prebuilt/")]
    assert sorted(Path(n).suffix for n in carried) == [".json", ".so"], carried
    assert not wheel_env.wheel.name.endswith("-any.whl"), wheel_env.wheel.name  # a platform's wheel
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 7, 8)).astype(np.float32) for _ in range(3))
    np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v)
    code = (
        "import json, logging, sys, warnings, numpy as np, torch, selfattn;"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr); warnings.simplefilter('error');"
        "from selfattn.kernels import native_build as nb; d = np.load(sys.argv[1]);"
        "out = selfattn.attention(*(torch.from_numpy(d[n]) for n in 'qkv'), causal=True, backend='native');"
        "np.save(sys.argv[2], out.numpy()); print(json.dumps({'library': str(nb._library_path())}))"
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    done = subprocess.run(
        [str(wheel_env.python), "-c", code, str(tmp_path / "qkv.npz"), str(tmp_path / "out.npy")],
        cwd=wheel_env.empty,
        env={**wheel_env.env, "XDG_CACHE_HOME": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compiling" not in done.stderr and "SlowStartWarning" not in done.stderr, done.stderr
    library = Path(json.loads(done.stdout)["library"])
    assert library.is_relative_to(wheel_env.root / "venv") and library.parent.name == "prebuilt", library
    assert not any(cache.rglob("*.so"))
    out = np.load(tmp_path / "out.npy").astype(np.float64)
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(8)  # (1, 2, 7, 7): the independent spec, float64 NumPy
    scores[..., np.triu(np.ones((7, 7), dtype=bool), 1)] = -np.inf
    w = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (w / w.sum(-1, keepdims=True)) @ v, rtol=0, atol=TOL["float32"])


def test_selfattn_explain_runs_from_an_empty_folder(wheel_env):
    done = wheel_env.run(str(wheel_env.bin / "selfattn"), "explain")
    assert "怪兽" in done.stdout and "softmax" in done.stdout.lower()
    done = wheel_env.run(str(wheel_env.bin / "selfattn"), "explain", "--html", "x.html")
    page = (wheel_env.empty / "x.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "怪兽" in page
    assert sorted(p.name for p in wheel_env.empty.iterdir()) == ["x.html"]  # nothing else left behind


def test_the_python_api_and_attention_from_the_wheel(wheel_env, tmp_path):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 5, 8)) for _ in range(3))
    np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v)
    code = (
        "import sys, numpy as np, torch, selfattn; d = np.load(sys.argv[1]);"
        "out = selfattn.attention(*(torch.from_numpy(d[n]) for n in 'qkv'), causal=True);"
        "np.save(sys.argv[2], out.numpy());"
        "e = selfattn.explain('一只蓝色怪兽走进森林'); print(type(e).__name__, ' '.join(e.labels))"
    )
    done = wheel_env.run(str(wheel_env.python), "-c", code, str(tmp_path / "qkv.npz"), str(tmp_path / "out.npy"))
    assert done.stdout.startswith("Explanation ") and "怪兽" in done.stdout
    out = np.load(tmp_path / "out.npy")
    for b in range(1):  # the independent spec: float64 NumPy, head by head
        for h in range(2):
            scores = q[b, h] @ k[b, h].T / np.sqrt(8)
            scores[np.triu(np.ones((5, 5), dtype=bool), 1)] = -np.inf
            w = np.exp(scores - scores.max(-1, keepdims=True))
            np.testing.assert_allclose(
                out[b, h], (w / w.sum(-1, keepdims=True)) @ v[b, h], rtol=TOL["float64_rel"], atol=TOL["float64"]
            )


@pytest.mark.parametrize(
    ("blocked", "command", "extra"),
    [("transformers", "explain", "explain"), ("jieba", "explain", "explain"), ("fastapi", "serve", "serve")],
)
def test_a_missing_extra_is_one_line_naming_it(wheel_env, blocked, command, extra):
    code = f"import sys; sys.modules[{blocked!r}] = None; from selfattn.cli import main; sys.exit(main([{command!r}]))"
    done = subprocess.run(
        [str(wheel_env.python), "-c", code], cwd=wheel_env.empty, env=wheel_env.env, capture_output=True, text=True
    )
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"[{extra}] extra" in lines[0] and f"pip install 'selfattn[{extra}]'" in lines[0] and blocked in lines[0]


def test_extras_names_an_unknown_extra():
    with pytest.raises(ValueError, match="unknown extra 'plots'"):
        extras.missing("plots")
