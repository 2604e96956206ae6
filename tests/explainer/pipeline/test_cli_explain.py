"""`selfattn explain` from the command line: tables, --json, --npz, pictures, errors."""

import dataclasses
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from rich.console import Console

from selfattn.cli import main
from selfattn.explainer.pipeline import Session, Spec
from selfattn.explainer.views import checkable, plots, tables
from tests.explainer.documents import explained, explanation
from tests.explainer.tiny import tiny_explainer
from tests.tolerances import TOL

TEXT = "一只蓝色怪兽走进森林"


def run_json(capsys, *args):
    assert main(["explain", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_is_the_pipelines_checkable_document(capsys, tiny, tiny_checkpoint):
    doc = run_json(capsys, TEXT, "--model", str(tiny_checkpoint))
    want = checkable.json_document(Session(tiny).explain(Spec(TEXT)))
    assert doc == json.loads(json.dumps(want, ensure_ascii=False))
    page = explained(tiny, TEXT)  # the page's dict: the same answers, with the arrays the JSON leaves to --npz
    assert doc["descriptions"] == json.loads(json.dumps(page["descriptions"], ensure_ascii=False))
    assert "heads" in page["layers"][0] and "heads" not in doc["layers"][0]


def test_terminal_tables_show_the_json_numbers(capsys, tiny_checkpoint):
    doc = run_json(capsys, TEXT, "--model", str(tiny_checkpoint), "--layer", "1", "--head", "2")
    assert main(["explain", TEXT, "--model", str(tiny_checkpoint), "--layer", "1", "--head", "2", "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert (doc["stages"]["layer"], doc["stages"]["head"]) == (1, 2)
    weights = doc["stages"]["weights"]
    np.testing.assert_allclose(weights, doc["layers"][1]["weights"][2], atol=TOL["json_weights"], rtol=0)
    for row in weights:
        for w in row:
            assert tables.number(w * 100, 1) in text
    scores = doc["stages"]["scores"]
    assert tables.number(scores[5][3]) in text and "−inf" in text
    assert "Showing layer 1 · head 2 (chosen by you)" in text
    assert doc["descriptions"][1][2]["text"]["en"] in " ".join(text.split())  # wrapped at the console's width


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_terminal_fits_80_columns_with_one_minus_sign(capsys, tiny_checkpoint, lang):
    from rich.cells import cell_len

    args = [
        "explain",
        TEXT,
        "--model",
        str(tiny_checkpoint),
        "--lang",
        lang,
        "--find",
        "走进",
        "怪兽",
        "--no-causal",
        "--only-layer",
        "1",
        "--only-head",
        "0",
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert max(cell_len(line) for line in text.splitlines()) <= 80
    assert not re.search(r"-\d|-inf", text) and "−" in text  # every negative number with "−"
    assert "−0.00" not in text and "−0.0 " not in text
    assert ("·V" in text) and ("‖" in text)  # the stages go on through ·V and the output
    if lang == "zh":
        for word in ("decoder", "Query", "Key", "layer", "Showing", "positions", "learned"):
            assert word not in text
        assert "编号：层、head 和 token 位置都从 0 起。" in text and "对照实验" in text and "head 搜索" in text
    else:
        assert "Numbering: layers, heads and token positions count from 0." in text and "Head search" in text


def test_number_has_one_minus_and_no_negative_zero():
    assert tables.number(-0.001) == "0.00" and tables.number(-1.5) == "−1.50" and tables.number("-inf") == "−inf"


def test_tables_escape_markup_in_tokens():
    """A token or a model name that reads as rich markup is printed as it is, never as markup."""
    e = explanation(tiny_explainer(), TEXT)
    names = ("[red]", *e.tokens.names[1:])
    marked = dataclasses.replace(
        e,
        tokens=dataclasses.replace(e.tokens, names=names, labels=names),
        card=dataclasses.replace(e.card, name="[bold]m[/bold]", architecture="[i]a"),
    )
    for lang in ("en", "zh"):
        console = Console(record=True, width=200)
        tables.render(marked, console, lang=lang)
        shown = console.export_text()
        assert "[red]" in shown and "[bold]m[/bold]" in shown and "[i]a" in shown


def test_npz_and_refusal_to_overwrite(tmp_path, capsys, tiny_checkpoint):
    out = tmp_path / "trace.npz"
    assert main(["explain", TEXT, "--model", str(tiny_checkpoint), "--npz", str(out)]) == 0
    data = np.load(out)
    assert list(data["tokens"]) == ["<bos>", "一只", "蓝色", "怪兽", "走进", "森林"]
    assert data["layer0/weights"].shape[1:] == (6, 6) and data["layer0/head0/q"].shape[0] == 6
    assert str(data["selfattn_version"])
    before = out.read_bytes()
    capsys.readouterr()
    assert main(["explain", "森林", "--model", str(tiny_checkpoint), "--npz", str(out)]) == 1
    assert "already exists" in capsys.readouterr().err and out.read_bytes() == before


def test_interventions_from_the_command_line(capsys, tiny_checkpoint):
    base = run_json(capsys, TEXT, "--model", str(tiny_checkpoint))
    flags = ["--no-causal", "--no-scaling", "--temperature", "2", "--layers", "0"]
    off = run_json(capsys, TEXT, "--model", str(tiny_checkpoint), *flags)
    applied = {"no_scaling": {}, "no_causal": {}, "temperature": {"t": 2.0}, "layer": None, "head": None}
    assert off["experiment"]["applied"] == applied
    assert off["layers"][0]["scale"] == 0.5 and off["layers"][0]["held"]
    future = [row[i + 1 :] for head in off["layers"][0]["weights"] for i, row in enumerate(head)]
    assert sum(map(sum, future)) > 0  # rows now see the keys after them
    assert off["prediction"] != base["prediction"]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["--layer", "9"], 1, "layer must be in [0, 1], got 9"),
        (["--temperature", "0"], 2, "expected a finite number > 0, got '0'"),
        (["--model", "/nonexistent/model"], 1, "model folder not found: /nonexistent/model"),
        (["--model", "/nonexistent/m.Q4_1.gguf"], 1, "GGUF file not found: /nonexistent/m.Q4_1.gguf"),
        ([""], 1, "text is empty"),
    ],
)
def test_bad_arguments_give_one_line(tiny_checkpoint, args, code, message):
    base = ["--model", str(tiny_checkpoint)] if "--model" not in args else []
    proc = subprocess.run(
        [sys.executable, "-m", "selfattn.cli", "explain", *args, *base], capture_output=True, text=True
    )
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_pictures_png_and_svg(tmp_path, capsys, tiny_checkpoint):
    sel = run_json(capsys, TEXT, "--model", str(tiny_checkpoint))["selected"]
    assert main(["explain", TEXT, "--model", str(tiny_checkpoint), "--plots", str(tmp_path / "pics")]) == 0
    head = f"head-L{sel['layer']}-H{sel['head']}"
    names = sorted(p.name for p in (tmp_path / "pics").iterdir())
    assert names == sorted(["grid.png", "grid.svg", f"{head}.png", f"{head}.svg"])
    png = (tmp_path / "pics" / f"{head}.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "<svg" in (tmp_path / "pics" / f"{head}.svg").read_text()
    assert str(tmp_path / "pics" / "grid.png") in capsys.readouterr().out


def text_width(label: str, family: str) -> float:
    """Rendered width (pixels) of `label` in a font family, with the pictures' settings: used to
    prove glyphs are real."""
    import matplotlib

    with matplotlib.rc_context(plots.rc(False)):
        fig = plots._figure()
        t = fig.text(0, 0, label, family=family, fontsize=20)
        fig.canvas.draw()
        return float(t.get_window_extent().width)


def test_chinese_glyphs_are_real_not_boxes():
    label = "一只蓝色怪兽走进森林"
    cjk = text_width(label, "WenQuanYi Micro Hei")
    with pytest.warns(UserWarning, match="missing from font"):  # DejaVu has no CJK glyphs: boxes
        fallback = text_width(label, "DejaVu Sans")
    assert cjk > 0 and abs(cjk - fallback) > TOL["pixel"]
    plt = plots.fonts(True)
    from matplotlib import font_manager

    found = font_manager.findfont(font_manager.FontProperties(family="WenQuanYi Micro Hei"), fallback_to_default=False)
    assert "wqy" in found.lower()
    assert plt is not None and plt[0] in plots.CJK_FONTS


def test_unknown_words_are_explained_in_the_view_language(capsys):
    """The bundled model knows only its corpus: the note about unknown tokens is in the table's language."""
    assert main(["explain", "一只红色的狗跑进了公园"]) == 0
    zh = capsys.readouterr().out
    assert "个是分词器不认识的" in zh and "只认识语料里的 225 个 token" in zh and "knows only" not in zh
    assert main(["explain", "一只红色的狗跑进了公园", "--lang", "en"]) == 0
    en = capsys.readouterr().out
    assert "tokens are unknown to the tokenizer" in en and "knows only the 225 tokens" in en
