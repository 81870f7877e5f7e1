"""translate-text (inference.translate_text): a file translated offline, line for line, as
`training.evaluate` translates it, from a run directory or an export."""

import functools
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from common.serving_contract import SCORE_OUTPUT, SCORES_OUTPUT, TRANSLATIONS_OUTPUT
from inference.export import export_run
from inference.translate_text import format_record, main, translate_lines, translate_window
from tests.export_fixtures import PAIRS
from tests.paths import REPO_ROOT
from training.evaluate import (
    export_signature,
    export_translate_function,
    run_signature,
    run_translate_function,
    translate,
)

ROOT = str(REPO_ROOT)
TRAINED = [source for source, _ in PAIRS]
# The training sources, blank lines between them (kept, not translated), variations of them, and
# one line longer than the model's positional encodings (cut, as the export cuts it).
LINES = [
    *TRAINED[:5],
    "",
    *TRAINED[5:20],
    "   ",
    *[source.lower().rstrip(".?") for source in TRAINED[:6]],
    *TRAINED[20:],
    " ".join(TRAINED[:12]),
    "",
]


@pytest.fixture(scope="module")
def export_dir(tiny_export_run, tmp_path_factory):
    """The tiny run exported with its own decoding options (beam_search: width 4)."""
    return export_run(str(tiny_export_run), export_base=str(tmp_path_factory.mktemp("exports")))


def model_dir(kind, tiny_export_run, export_dir):
    return str(tiny_export_run) if kind == "run" else export_dir


def expected_translations(kind, directory, beam_width, lines=LINES):
    """`training.evaluate.translate` of the non-blank lines, "" for the blank ones."""
    translated = dict(zip(LINES, _evaluate_translations(kind, directory, beam_width)))
    missing = [line for line in lines if line not in translated]
    if missing:
        raise ValueError(f"expected_translations knows the lines of LINES only, not {missing}")
    return [translated[line] if line.strip() else "" for line in lines]


@functools.cache
def _evaluate_translations(kind, directory, beam_width):
    """`training.evaluate.translate` of each line of `LINES` ("" for the blank ones), once per
    model and beam width: loading and tracing take seconds."""
    function = run_translate_function if kind == "run" else export_translate_function
    translate_batch, _ = function(directory, beam_width)
    nonblank = [line for line in LINES if line.strip()]
    translated = iter(translate(nonblank, translate_batch, show_progress=False))
    return tuple(next(translated) if line.strip() else "" for line in LINES)


def write_input(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def run_main(directory, input_path, output_path, *flags):
    return main(
        ["--model", directory, "--input_file", input_path, "--output_file", str(output_path)]
        + ["--no_progress", *flags]
    )


@pytest.mark.parametrize("beam_width", [1, 4], ids=["greedy", "beam4"])
@pytest.mark.parametrize("kind", ["run", "export"])
def test_translations_are_evaluates_in_input_order_with_blank_lines_kept(
    kind, beam_width, tiny_export_run, export_dir, tmp_path
):
    directory = model_dir(kind, tiny_export_run, export_dir)
    input_path = write_input(tmp_path / "in.txt", LINES)
    # Windows of 7 lines and batches of at most 4 sentences: the sorted batches and windows must
    # both give their lines back in input order.
    flags = ["--beam_width", str(beam_width), "--window_lines", "7", "--max_batch_sentences", "4"]
    assert run_main(directory, input_path, tmp_path / "out.txt", *flags) == 0
    written = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")
    assert written[-1] == "" and len(written) - 1 == len(LINES)
    assert written[:-1] == expected_translations(kind, directory, beam_width)


@pytest.mark.parametrize("kind, beam_width", [("run", 1), ("export", 1), ("export", 4)], ids=str)
def test_scores_are_the_signatures(kind, beam_width, tiny_export_run, export_dir, tmp_path):
    """--with_scores writes the score the export's signature returns for the sentence (summed
    log-probability greedy, length-normalized with beam search)."""
    directory = model_dir(kind, tiny_export_run, export_dir)
    input_path = write_input(tmp_path / "in.txt", LINES)
    flags = ["--beam_width", str(beam_width), "--with_scores", "--max_batch_sentences", "5"]
    assert run_main(directory, input_path, tmp_path / "out.tsv", *flags) == 0
    rows = (tmp_path / "out.tsv").read_text(encoding="utf-8").splitlines()
    nonblank = [line for line in LINES if line.strip()]
    signature, _ = export_signature(export_dir, beam_width)
    scores = signature(tf.constant(nonblank))[SCORE_OUTPUT].numpy()
    written = [row.split("\t") for row, line in zip(rows, LINES) if line.strip()]
    assert [row for row, line in zip(rows, LINES) if not line.strip()] == ["", "", ""]
    np.testing.assert_allclose([float(score) for score, _ in written], scores, atol=2e-4)
    expected = [text for text in expected_translations(kind, directory, beam_width) if text]
    assert [translation for _, translation in written] == expected


def test_jsonl_holds_source_translation_and_score_per_line(tiny_export_run, tmp_path):
    directory = str(tiny_export_run)
    input_path = write_input(tmp_path / "in.txt", LINES)
    assert run_main(directory, input_path, tmp_path / "out.jsonl", "--output_format", "jsonl") == 0
    assert run_main(directory, input_path, tmp_path / "out.tsv", "--with_scores") == 0
    raw = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in raw]
    assert [record["source"] for record in records] == LINES
    assert "¿Cómo estás?" in "\n".join(raw)  # ensure_ascii=False: the text as written
    for record, row in zip(records, (tmp_path / "out.tsv").read_text("utf-8").splitlines()):
        assert set(record) == {"source", "translation", "score"}
        if record["source"].strip():
            score, translation = row.split("\t")
            assert (record["translation"], record["score"]) == (translation, float(score))
        else:
            assert (record["translation"], record["score"], row) == ("", None, "")


def test_invalid_utf8_names_the_line_and_keeps_the_lines_before_it(
    tiny_export_run, tmp_path, capsys
):
    lines = TRAINED[:10]
    input_path = tmp_path / "in.txt"
    encoded = [line.encode("utf-8") for line in lines]
    encoded[7] = b"Hola \xff mundo."  # line 8, in the third window of 3 lines
    input_path.write_bytes(b"".join(line + b"\n" for line in encoded))
    status = run_main(
        str(tiny_export_run), str(input_path), tmp_path / "out.txt", "--window_lines", "3"
    )
    assert status == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: {input_path}:8: invalid UTF-8 (byte 0xff"), error
    assert len(error.splitlines()) == 1
    written = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert written == expected_translations("run", str(tiny_export_run), 1, lines[:7])


def test_windows_are_written_and_flushed_before_the_next_is_read(tiny_export_run):
    """Memory stays flat on any file: a window's translations reach the output before the lines
    after that window are read."""
    signature, _ = run_signature(str(tiny_export_run))
    read = []

    def lines():
        for line in TRAINED * 2:
            read.append(line)
            yield line.encode("utf-8") + b"\n"

    class Output:
        def __init__(self):
            self.written, self.flushed = b"", []

        def write(self, data):
            self.written += data

        def flush(self):
            self.flushed.append((len(read), self.written.count(b"\n")))

    output = Output()
    translate_lines(lines(), output, lambda window: translate_window(window, signature, 512, 8),
                    window_lines=25)  # fmt: skip
    assert output.flushed == [(25, 25), (50, 50), (75, 75), (80, 80)]
    assert output.written.decode("utf-8").splitlines() == expected_translations(
        "run", str(tiny_export_run), 1, TRAINED * 2
    )


def test_the_module_reads_stdin_and_writes_only_the_progress_bar_on_stderr(tiny_export_run):
    environment = {**os.environ, "PYTHONPATH": ROOT}
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)  # start-up notices silenced by the CLI itself
    result = subprocess.run(
        [sys.executable, "-m", "inference.translate_text", "--model", str(tiny_export_run)],
        input="".join(line + "\n" for line in LINES[:8]).encode("utf-8"),
        capture_output=True,
        env=environment,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    expected = expected_translations("run", str(tiny_export_run), 1, LINES[:8])
    assert result.stdout.decode("utf-8").split("\n") == [*expected, ""]
    pieces = [piece for piece in re.split(r"[\r\n]", result.stderr.decode()) if piece.strip()]
    bar = re.compile(r"translating: .*(line/s|s/line)\]$")
    assert pieces and all(bar.match(piece) for piece in pieces), pieces
    assert re.match(r"translating: 8line ", pieces[-1]), pieces[-1]


def test_a_missing_model_directory_is_one_line_and_status_2(tmp_path, capsys):
    missing = str(tmp_path / "no_such_run")
    assert main(["--model", missing]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {missing} not found: give a training run directory, a bundle such as "
        "pretrained/es-en, or an exported SavedModel version."
    ]


def test_a_directory_that_is_no_model_is_refused_with_status_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", str(tmp_path)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: {tmp_path}/config.json not found: {tmp_path} is not a training run directory."
    ]


@pytest.mark.parametrize("kind, n_best", [("run", 3), ("export", 4)])
def test_n_best_lines_are_the_translators_n_best_in_order_with_blank_lines_kept(
    kind, n_best, tiny_export_run, export_dir, tmp_path
):
    """N lines a source, best first, each `score<TAB>translation` as `Translator.n_best` (the
    export's n_best signature) gives them; N empty lines for a blank source; jsonl lists them."""
    directory = model_dir(kind, tiny_export_run, export_dir)
    input_path = write_input(tmp_path / "in.txt", LINES)
    flags = ["--beam_width", "4", "--n_best", str(n_best), "--max_batch_sentences", "4"]
    assert run_main(directory, input_path, tmp_path / "out.tsv", *flags, "--with_scores") == 0
    assert run_main(directory, input_path, tmp_path / "out.txt", *flags) == 0
    assert (
        run_main(directory, input_path, tmp_path / "out.jsonl", *flags, "--output_format", "jsonl")
        == 0
    )
    function = run_signature if kind == "run" else export_signature
    signature, _ = function(directory, 4, num_hypotheses=n_best)
    nonblank = [line for line in LINES if line.strip()]
    outputs = signature(tf.constant(nonblank))
    translations = iter(np.char.decode(outputs[TRANSLATIONS_OUTPUT].numpy().astype(bytes)))
    scores = iter(outputs[SCORES_OUTPUT].numpy())
    expected = [
        list(zip(next(translations), next(scores))) if line.strip() else None for line in LINES
    ]
    assert sum(len({t for t, _ in row}) == n_best for row in expected if row) >= 20
    rows = (tmp_path / "out.tsv").read_text(encoding="utf-8").split("\n")
    assert rows[-1] == "" and len(rows) - 1 == n_best * len(LINES)
    texts = (tmp_path / "out.txt").read_text(encoding="utf-8").split("\n")[:-1]
    records = [
        json.loads(line) for line in (tmp_path / "out.jsonl").read_text("utf-8").splitlines()
    ]
    assert [record["source"] for record in records] == LINES
    for index, hypotheses in enumerate(expected):
        block = rows[index * n_best : (index + 1) * n_best]
        if hypotheses is None:
            assert block == [""] * n_best
            assert texts[index * n_best : (index + 1) * n_best] == [""] * n_best
            assert records[index]["hypotheses"] == []
            continue
        written = [row.split("\t") for row in block]
        assert [translation for _, translation in written] == [t for t, _ in hypotheses]
        assert texts[index * n_best : (index + 1) * n_best] == [t for t, _ in hypotheses]
        np.testing.assert_allclose(
            [float(score) for score, _ in written], [s for _, s in hypotheses], atol=2e-4
        )
        assert [h["translation"] for h in records[index]["hypotheses"]] == [
            t for t, _ in hypotheses
        ]


def test_n_best_needs_the_beam_width_and_an_export_traced_for_it(export_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--model", export_dir, "--beam_width", "2", "--n_best", "3"])
    assert exit_info.value.code == 2
    assert "--n_best 3 needs --beam_width 3 or more" in capsys.readouterr().err
    input_path = write_input(tmp_path / "in.txt", TRAINED[:2])
    flags = ["--beam_width", "4", "--n_best", "3"]
    assert run_main(export_dir, input_path, tmp_path / "out.txt", *flags) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {export_dir} was exported with num_hypotheses 4, not 3: re-export it with "
        "--num_hypotheses 3."
    ]


def test_n_best_output_format():
    hypotheses = [("The cat.", -0.25), ("A cat.", -1.5)]
    assert format_record("El gato.", hypotheses, "text", n_best=2) == "The cat.\nA cat.\n"
    assert format_record("El gato.", hypotheses, "text", with_scores=True, n_best=2) == (
        "-0.2500\tThe cat.\n-1.5000\tA cat.\n"
    )
    assert format_record("", None, "text", n_best=2) == "\n\n"
    assert json.loads(format_record("El gato.", hypotheses, "jsonl", n_best=2)) == {
        "source": "El gato.",
        "hypotheses": [
            {"translation": "The cat.", "score": -0.25},
            {"translation": "A cat.", "score": -1.5},
        ],
    }


def test_an_export_with_another_beam_width_is_refused(export_dir, tmp_path, capsys):
    input_path = write_input(tmp_path / "in.txt", TRAINED[:2])
    assert run_main(export_dir, input_path, tmp_path / "out.txt", "--beam_width", "3") == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {export_dir} was exported with beam_width 4, not 3: re-export it with "
        "--beam_width 3."
    ]
    assert not (tmp_path / "out.txt").exists()
