"""Score given translations: `translate-score --run_dir runs/NAME < pairs.tsv`.

Reads `source<TAB>target` lines (standard input or `--input_file`) and writes, per line, the
log-probability the model gives the target (forced decoding, `model.translator.Translator.score`:
the distribution the decoders choose from, the greedy decoder's score of the same tokens), or
with `--jsonl` one JSON object per line with the target's pieces and each one's log-probability.

A run directory or bundle is scored in this process; `--export_dir` scores through an exported
SavedModel version's `score` signature, the one TF Serving serves.
"""

import argparse
import contextlib
import json
import sys

import numpy as np
import tensorflow as tf

from common.serving_contract import (
    SCORE_OUTPUT,
    SCORE_SIGNATURE,
    TARGET_INPUT,
    TARGET_TOKENS_OUTPUT,
    TEXT_INPUT,
    TOKEN_SCORES_OUTPUT,
)
from model.translator import DecodingOptions
from run_directory import artifacts, traced_cache
from training.evaluate import BATCH_SIZE, load_export


def run_score_function(run_dir, cache=True):
    """`score(text, target)` of a run directory or bundle: `Translator.score` under the default
    `DecodingOptions` (their output-length bound cuts a longer target), `[batch]` string tensors in, the
    `score` signature's outputs out; the traced signature a previous process kept, else traced
    here and, with `cache`, kept for the next (`run_directory.traced_cache`)."""
    return traced_cache.load_or_trace_signature(run_dir, SCORE_SIGNATURE, DecodingOptions(), cache)


def export_score_function(export_dir):
    """`score(text, target)` through an export's `score` signature."""
    signature = load_export(export_dir).signatures[SCORE_SIGNATURE]
    return lambda text, target: signature(**{TEXT_INPUT: text, TARGET_INPUT: target})


def read_pairs(lines, name):
    """`(source, target)` pairs of `source<TAB>target` lines.

    Raises:
        ValueError: a line without exactly one tab, naming `name` and the line.
    """
    pairs = []
    for number, line in enumerate(lines, start=1):
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 2:
            raise ValueError(
                f"{name}:{number}: expected source<TAB>target, got {len(fields)} field(s)."
            )
        pairs.append(tuple(fields))
    return pairs


def score_pairs(score, pairs, batch_size=BATCH_SIZE):
    """Scores `(source, target)` pairs in batches.

    Args:
        score: from `run_score_function` or `export_score_function`.

    Returns:
        one dict per pair, in order: `source`, `target`, `score` (float), `tokens` (the target's
        pieces, [END] last) and `token_scores` (float per piece).
    """
    results = []
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start : start + batch_size]
        outputs = score(
            tf.constant([source for source, _ in batch], tf.string),
            tf.constant([target for _, target in batch], tf.string),
        )
        pieces = outputs[TARGET_TOKENS_OUTPUT].numpy()
        token_scores = outputs[TOKEN_SCORES_OUTPUT].numpy()
        for row, (source, target) in enumerate(batch):
            length = int(np.sum(pieces[row] != b""))
            results.append(
                {
                    "source": source,
                    "target": target,
                    "score": float(outputs[SCORE_OUTPUT][row]),
                    "tokens": [piece.decode("utf-8") for piece in pieces[row][:length]],
                    "token_scores": [float(value) for value in token_scores[row][:length]],
                }
            )
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="translate-score",
        description="Score source<TAB>target lines with a trained translator: one "
        "log-probability per line (forced decoding), or with --jsonl the per-piece ones too.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run_dir", help="training run directory or bundle")
    source.add_argument("--export_dir", help="exported SavedModel version (its score signature)")
    parser.add_argument("--input_file", help="source<TAB>target lines (default: standard input)")
    parser.add_argument(
        "--jsonl",
        action="store_true",
        help="write JSON lines: source, target, score, tokens, token_scores",
    )
    parser.add_argument(
        "--batch_size", type=int, default=BATCH_SIZE, help="pairs per call (default %(default)s)"
    )
    traced_cache.add_no_cache_argument(parser)
    args = parser.parse_args(argv)
    if args.batch_size <= 0:
        parser.error("--batch_size must be positive")
    try:
        with contextlib.ExitStack() as stack:
            lines = (
                stack.enter_context(open(args.input_file, encoding="utf-8"))
                if args.input_file
                else sys.stdin
            )
            pairs = read_pairs(lines, args.input_file or "<stdin>")
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.run_dir:
        artifacts.require_trained_run(args.run_dir)
        score = run_score_function(args.run_dir, cache=not args.no_cache)
    else:
        score = export_score_function(args.export_dir)
    for result in score_pairs(score, pairs, args.batch_size):
        if args.jsonl:
            print(json.dumps(result, ensure_ascii=False))
        else:
            print(f"{result['score']:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
