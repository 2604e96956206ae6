"""docs/api.md, the API reference: current (what scripts/api_docs.py writes from the docstrings now) and whole
(every name of every public module's `__all__`, with its signature); and the package docstring's claim about
what `import selfattn` imports."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"


@pytest.fixture(scope="module")
def api_docs():
    spec = importlib.util.spec_from_file_location("api_docs", ROOT / "scripts" / "api_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def written() -> str:
    return API.read_text(encoding="utf-8")


def test_the_reference_is_what_the_docstrings_say_now(api_docs, written):
    assert api_docs.render() == written, "docs/api.md is stale: run python scripts/api_docs.py"


def _public_modules(api_docs):
    for name in api_docs.MODULES:
        try:
            yield importlib.import_module(name)
        except ModuleNotFoundError as error:
            if error.name != name:
                raise


def test_every_public_name_is_there_with_its_arguments(api_docs, written):
    """Read from each module's own `__all__` (not from the generator's output): a name missing from the file, or a
    function whose parameters (with their defaults) are not in its entry, fails."""
    sections = {}
    for chunk in written.split("\n### `")[1:]:
        title, _, body = chunk.partition("`")
        sections[title] = body
    missing, unsigned = [], []
    modules = list(_public_modules(api_docs))
    assert {m.__name__ for m in modules} >= {"selfattn", "selfattn.kernels", "selfattn.hf", "selfattn.distributed"}
    for module in modules:
        for name in module.__all__:
            title = f"{module.__name__}.{name}"
            if title not in sections:
                missing.append(title)
                continue
            obj = getattr(module, name)
            if inspect.isfunction(obj):
                signature = sections[title].split("```python\n", 1)[1].split("\n```", 1)[0]
                for parameter in inspect.signature(obj).parameters.values():
                    default = "" if parameter.default is parameter.empty else r" ?= ?\S"  # name[: annotation] = value
                    if not re.search(rf"\b{parameter.name}\b(: '[^']*'|: [^=,)]+)?{default}", signature):
                        unsigned.append(f"{title}: {parameter.name}")
    assert not missing, f"not in docs/api.md: {missing}"
    assert not unsigned, f"arguments missing from docs/api.md: {unsigned}"


def test_the_checker_names_a_stale_file(api_docs, tmp_path, monkeypatch, capsys):
    stale = tmp_path / "api.md"
    stale.write_text("# API reference\n", encoding="utf-8")
    monkeypatch.setattr(api_docs, "TARGET", stale)
    assert api_docs.main(["--check"]) == 1
    assert str(stale) in capsys.readouterr().err and stale.read_text(encoding="utf-8") == "# API reference\n"


def test_import_selfattn_imports_neither_numpy_nor_torch():
    """As the package docstring says: every name loads its module on first use."""
    code = "import sys, selfattn; print(sorted(m for m in ('numpy', 'torch') if m in sys.modules))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    import selfattn

    assert "imports neither NumPy nor torch" in " ".join(selfattn.__doc__.split())


def test_one_build_time_in_the_warning_the_readme_and_the_reference(written):
    """The native kernel's first build: the same measured figure wherever it is stated."""
    from selfattn.kernels import native_build

    figure = native_build.BUILD_TIME
    assert figure in native_build.BUILD_AHEAD  # the warning's advice
    assert figure in " ".join(native_build.__doc__.split()) and figure in " ".join(native_build.build.__doc__.split())
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert readme.count(figure) >= 2 and figure in " ".join(written.split())
    assert not re.search(r"10 to 60 s|about a minute\) into|about 10 s here", readme + native_build.BUILD_AHEAD)


def test_docs_hf_says_what_the_function_does_with_each_keyword():
    """docs/hf.md once listed `s_aux` and `position_bias` as refused; they are mapped (sinks, the additive mask)."""
    import torch

    import selfattn.hf

    text = " ".join((ROOT / "docs" / "hf.md").read_text(encoding="utf-8").split())
    assert {"s_aux", "position_bias", "position_ids"} <= set(selfattn.hf.HANDLED)
    assert "(`s_aux`, `head_mask`, `position_bias`" not in text
    assert "`s_aux`, (Hq,)) become `sinks=`" in text and "`position_bias`" in text
    with pytest.raises(ValueError, match="cannot honour 'head_mask'"):
        selfattn.hf._refuse_unknown({"head_mask": torch.ones(2)})
