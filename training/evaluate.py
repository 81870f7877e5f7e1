"""Translate a split and score it: `python -m training.evaluate --run_dir runs/small`.

Reports sacreBLEU's BLEU and chrF on detokenized text, with their signatures so the numbers can
be compared with other systems, and writes the hypotheses and a JSON report to
`<run_dir>/eval/` (or `--output_dir`).
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import sacrebleu
import tensorflow as tf
from tqdm import tqdm

from model.decoding import beam_search_decode, greedy_decode
from training import artifacts
from training.corpus import CorpusError, load_pairs
from training.pipeline import truncate
from model.special_tokens import END_ID, START_ID


def make_translate_ids(model, beam_width=1, alpha=0.6):
    """A compiled `(batch, inp_len) ids → (batch, out_len) ids` function (greedy when width is 1)."""

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def translate_ids(inp):
        if beam_width == 1:
            return greedy_decode(model, inp, START_ID, END_ID)["tokens"]
        return beam_search_decode(model, inp, START_ID, END_ID, beam_width, alpha)["tokens"]

    return translate_ids


def translate(sources, model, source_tokenizer, target_tokenizer, max_length, beam_width=1,
              alpha=0.6, batch_size=32, show_progress=True):
    """Translates a list of strings, in batches of similar length; returns strings in order."""
    translate_ids = make_translate_ids(model, beam_width, alpha)
    ids = [truncate(row.astype(np.int32), max_length)
           for row in source_tokenizer.tokenize(tf.constant(sources)).numpy()]
    order = np.argsort([len(row) for row in ids], kind="stable")
    translations = [None] * len(sources)
    batches = range(0, len(order), batch_size)
    for start in tqdm(batches, desc="translating", unit="batch", disable=not show_progress):
        rows = order[start: start + batch_size]
        width = max(len(ids[row]) for row in rows)
        batch = np.zeros((len(rows), width), np.int32)
        for i, row in enumerate(rows):
            batch[i, : len(ids[row])] = ids[row]
        texts = target_tokenizer.detokenize(translate_ids(tf.constant(batch))).numpy()
        for row, text in zip(rows, texts):
            translations[row] = text.decode("utf-8")
    return translations


def score(hypotheses, references):
    """sacreBLEU corpus BLEU and chrF with their signatures."""
    bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "bleu_details": str(bleu_score),
        "chrf": round(chrf_score.score, 2),
        "chrf_signature": str(chrf.get_signature()),
    }


def evaluate(run_dir, split="test", beam_width=1, alpha=0.6, batch_size=32, limit=None,
             output_dir=None, data=None):
    """Translates `split` of the run's corpus (or `data`), scores it, writes the outputs.

    Returns:
        the report dict (also written as `report.json`).
    """
    model, source_tokenizer, target_tokenizer, config = artifacts.load_trained(run_dir)
    pairs = load_pairs(data or config["data"], split)[:limit]
    sources = [source for source, _ in pairs]
    references = [target for _, target in pairs]
    started = time.time()
    hypotheses = translate(sources, model, source_tokenizer, target_tokenizer,
                           config["max_length"], beam_width, alpha, batch_size)
    seconds = time.time() - started
    report = {
        "run_dir": os.path.basename(os.path.normpath(run_dir)),
        "split": split,
        "sentences": len(pairs),
        "decoding": "greedy" if beam_width == 1 else f"beam {beam_width}, alpha {alpha}",
        "seconds": round(seconds, 1),
        **score(hypotheses, references),
    }
    output_dir = output_dir or os.path.join(run_dir, "eval")
    os.makedirs(output_dir, exist_ok=True)
    stem = f"{split}.{'greedy' if beam_width == 1 else f'beam{beam_width}'}"
    with open(os.path.join(output_dir, f"{stem}.hyp.txt"), "w", encoding="utf-8") as handle:
        handle.writelines(f"{line}\n" for line in hypotheses)
    with open(os.path.join(output_dir, f"{stem}.report.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2, ensure_ascii=False)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m training.evaluate", description=__doc__)
    parser.add_argument("--run_dir", required=True, help="a training run directory")
    parser.add_argument("--split", default="test", choices=("train", "dev", "test"))
    parser.add_argument("--data", help="corpus to evaluate on (default: the run's own)")
    parser.add_argument("--beam_width", type=int, default=1, help="1 = greedy")
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--limit", type=int, help="only the first N sentences")
    parser.add_argument("--output_dir", help="default <run_dir>/eval")
    args = parser.parse_args(argv)
    if args.beam_width < 1:
        parser.error("--beam_width must be at least 1")
    try:
        report = evaluate(args.run_dir, args.split, args.beam_width, args.alpha, args.batch_size,
                          args.limit, args.output_dir, args.data)
    except (CorpusError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"BLEU {report['bleu']}  ({report['bleu_signature']})")
    print(f"chrF {report['chrf']}  ({report['chrf_signature']})")
    print(f"{report['sentences']} sentences, {report['decoding']}, {report['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
