"""The `selfattn` command's contract: one error format, tracebacks only for bugs, outputs checked before work."""

import subprocess
import sys

import pytest

from selfattn.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "selfattn.cli", *args], capture_output=True, text=True, timeout=300)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_refusal_is_one_line_and_a_bug_is_a_traceback(monkeypatch, capsys):
    from selfattn import walkthrough

    def refuse(**_):
        raise ValueError("d_k is wrong")

    monkeypatch.setattr(walkthrough, "build", refuse)
    assert main(["walkthrough"]) == 1
    assert one_line(capsys.readouterr().err) == "selfattn walkthrough: error: d_k is wrong"
    for bug in (KeyError("k"), TypeError("unsupported format string passed to NoneType.__format__")):

        def broken(_bug=bug, **_):
            raise _bug

        monkeypatch.setattr(walkthrough, "build", broken)
        assert main(["walkthrough"]) == 1
        err = capsys.readouterr().err
        assert "Traceback (most recent call last)" in err and type(bug).__name__ in err
        assert err.strip().splitlines()[-1].startswith("selfattn walkthrough: internal error: this is a bug")


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "--seed", "1e23"], "argument --seed: expected an integer in [0, 9223372036854775807], got '1e23'"),
        (["train", "--seed", "1" + "0" * 30], "expected an integer in [0, "),
        (["train", "--threads", "100000"], "argument --threads: expected an integer in [1, 1024]"),
        (["generate", "x", "--temperature", "1e-300"], "expected a temperature in [0.01, 100], got '1e-300'"),
        (["explain", "--temperature", "1e-300"], "expected a temperature in [0.01, 100], got '1e-300'"),
        (["explain", "--temperature", "nan"], "expected a finite number > 0, got 'nan'"),
        (["bench", "--load", "-1"], "argument --load: expected an integer in [0, 256], got '-1'"),
        (["train", "--lr", "1"], "argument --lr: expected a learning rate in (0, 1), got '1'"),
        (["walkthrough", "--seed", str(2**64)], "argument --seed: expected an integer in [0, 9223372036854775807]"),
        (["heads", "--probe-length", "1"], "argument --probe-length: expected an integer in [2, 512], got '1'"),
        (
            ["explain", "--ablate", "1.2,x"],
            "argument --ablate: a head is LAYER.HEAD, counted from 0 (e.g. 3.1), got 'x'",
        ),
        (["explain", "--ablate-mode", "half"], "argument --ablate-mode: invalid choice: 'half'"),
    ],
)
def test_bad_numbers_are_one_line_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith(f"selfattn {args[0]}: error: ") and message in line


def test_the_walkthrough_refuses_a_huge_d_k_in_one_line(capsys):
    assert main(["walkthrough", "--d-k", "1" + "0" * 32]) == 1
    assert "d_k must be <= 1048576" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("text", ["一只\x01蓝色", "一只\x1b[31m", "   "])
def test_generate_refuses_what_explain_refuses(text, capsys):
    assert main(["generate", text]) == 1
    line = one_line(capsys.readouterr().err)
    assert line.startswith("selfattn generate: error: text ")


def test_generate_refuses_bytes_that_are_not_utf8():
    proc = subprocess.run(
        [sys.executable, "-m", "selfattn.cli", "generate", b"\xff\xfe\xe4\xb8\x80".decode("utf-8", "surrogateescape")],
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 1
    assert b"control character" in proc.stderr and b"Traceback" not in proc.stderr


@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if training starts: outputs must be refused before any work."""
    from selfattn.model.train import run as train

    def started(*_):
        raise AssertionError("training started before its outputs were checked")

    monkeypatch.setattr(train, "_setup", started)


def test_train_checks_every_output_before_training(tmp_path, capsys, no_training):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["train", "--preset", "tiny", "--out", str(afile), "--no-progress"]) == 1
    assert "is not a folder" in one_line(capsys.readouterr().err)
    picture = tmp_path / "curve.png"
    picture.write_bytes(b"old")
    assert (
        main(["train", "--preset", "tiny", "--out", str(tmp_path / "m"), "--plot", str(picture), "--no-progress"]) == 1
    )
    assert "curve.png already exists; pass --force to overwrite" in one_line(capsys.readouterr().err)
    assert picture.read_bytes() == b"old"
    assert (
        main(
            [
                "train",
                "--preset",
                "tiny",
                "--out",
                str(tmp_path / "m"),
                "--plot",
                str(afile / "sub" / "x.png"),
                "--no-progress",
            ]
        )
        == 1
    )
    assert "afile is not a folder" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "m").exists()


def test_explain_checks_every_output_before_loading(tmp_path, capsys, monkeypatch):
    from selfattn.explainer.session import Explainer

    def loaded(*_, **__):
        raise AssertionError("the model was loaded before the outputs were checked")

    monkeypatch.setattr(Explainer, "load", loaded)
    folder = tmp_path / "out"
    folder.mkdir()
    existing = tmp_path / "trace.npz"
    existing.write_bytes(b"old")
    for args, message in (
        (["--npz", str(folder), "--force"], "is a folder"),
        (["--npz", str(existing)], "trace.npz already exists; pass --force"),
        (["--html", str(folder)], "is a folder"),
        (["--html", str(tmp_path / "r.html"), "--plots", str(existing)], "is a file; give a folder"),
        (["--npz", str(tmp_path / "missing" / "t.npz")], "does not exist"),
    ):
        assert main(["explain", *args]) == 1
        assert message in one_line(capsys.readouterr().err)
    assert existing.read_bytes() == b"old" and not (tmp_path / "r.html").exists()
    assert not (tmp_path / "out.npz").exists()


def test_explain_plots_may_name_a_folder_to_create(tmp_path, capsys, monkeypatch):
    from selfattn.explainer.session import Explainer

    def loaded(*_, **__):
        raise ValueError("model loading reached")

    monkeypatch.setattr(Explainer, "load", loaded)
    assert main(["explain", "--plots", str(tmp_path / "a" / "b" / "c")]) == 1  # plots.save creates a/b/c
    assert "model loading reached" in one_line(capsys.readouterr().err)
    (tmp_path / "afile").write_text("x")
    assert main(["explain", "--plots", str(tmp_path / "afile" / "b")]) == 1
    assert "afile is not a folder" in one_line(capsys.readouterr().err)


def test_npz_is_written_to_the_name_given(tmp_path):
    import numpy as np

    from selfattn.explainer.views import outputs

    files = {tmp_path / "trace": outputs.arrays_bytes({"a": np.arange(3)})}
    outputs.write_all(files, force=False)
    assert (tmp_path / "trace").is_file() and not (tmp_path / "trace.npz").exists()
    assert np.load(tmp_path / "trace")["a"].tolist() == [0, 1, 2]
    with pytest.raises(FileExistsError):
        outputs.write_all(files, force=False)


def test_generate_prints_the_text_and_json(capsys):
    assert main(["generate", "一只蓝色", "--greedy", "--max-new-tokens", "5"]) == 0
    text, words = capsys.readouterr().out.strip().splitlines()
    assert text.startswith("一只蓝色") and words.startswith("一只 / 蓝色 ‖ ")
    import json

    assert main(["generate", "一只蓝色", "--greedy", "--max-new-tokens", "5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["text"] == text and doc["model"] == "default"


def test_control_characters_in_a_refused_path_never_reach_the_terminal(capsys, tmp_path):
    """issue 11's hostile run: an ESC sequence in --model (a hyperlink, a clear-screen) was echoed raw."""
    hostile = str(tmp_path / "gone\x1b]8;;evil.example\x07x\x1b[2J")
    assert main(["explain", "--model", hostile]) == 1
    line = one_line(capsys.readouterr().err)
    assert "\x1b" not in line and "\x07" not in line
    assert line.endswith("gone\\x1b]8;;evil.example\\x07x\\x1b[2J")


def test_a_checkpoint_named_with_escape_sequences_is_shown_escaped(capsys, tmp_path):
    import shutil

    from selfattn.model.checkpoint import DEFAULT_DIR

    folder = tmp_path / "esc\x1b]8;;evil.example\x07name"
    shutil.copytree(DEFAULT_DIR, folder)
    assert main(["explain", "--model", str(folder), "--lang", "en"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "esc\\x1b]8;;evil.example\\x07name" in out


def test_serve_on_an_address_that_does_not_resolve_is_one_line(capsys):
    """uvicorn logged "ERROR: [Errno -2] Name or service not known" and exited 3."""
    assert main(["serve", "--host", "256.0.0.1", "--port", "8765"]) == 1
    assert one_line(capsys.readouterr().err).startswith("selfattn serve: error: cannot listen on 256.0.0.1:8765: ")


def test_json_escapes_characters_that_reorder_or_hide_text(capsys):
    """A zero-width mark in the user's text (a bidi override is refused at the edge, but a model's vocabulary may
    hold one) reaches --json as an escape, never raw; the parsed JSON holds the same characters, CJK readable."""
    import json

    from selfattn import cli

    text = "一只蓝色\u200b怪兽"
    assert main(["explain", text, "--json"]) == 0
    out = capsys.readouterr().out
    assert "\u200b" not in out and "\\u200b" in out and "怪兽" in out
    assert json.loads(out)["text"] == text
    cli._print_json({"token": "a\u202eb\u0085c"})
    out = capsys.readouterr().out
    assert out == '{"token": "a\\u202eb\\u0085c"}\n' and json.loads(out) == {"token": "a\u202eb\u0085c"}


def test_printable_json_keeps_line_breaks_and_escapes_beyond_the_bmp():
    """The indent's line breaks stay; a tag character (U+E0001, invisible) becomes a surrogate pair of escapes,
    which any JSON reader turns back into the same character."""
    import json

    from selfattn.terminal import printable_json

    doc = {"a": "x\U000e0001y\u00a0森", "b": [1]}
    out = printable_json(json.dumps(doc, ensure_ascii=False, indent=2))
    assert out.count("\n") == 5 and "\\udb40\\udc01" in out and "\\u00a0" in out and "森" in out
    assert json.loads(out) == doc
