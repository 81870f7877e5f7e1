"""Tokenizer benchmark (`make bench-tokenizer`): learning time, in-graph throughput, losslessness.

For each tokenizer the project offers (SentencePiece unigram and BPE, keras-hub WordPiece), on the
embedded Bible corpus with the vocabulary settings of a preset (`small` by default: one vocabulary
shared by both languages):

- seconds to learn the vocabulary from both sides of the training split;
- in-graph tokenization and detokenization throughput (sentences/s) over the training split, in
  chunks of 4,096 sentences through the same `tf.function`s the training pipeline and the export
  call;
- how many training sentences come back exactly (up to `model.tokenizer.normalize`), and the BLEU
  and chrF of the round-tripped test references against the references themselves: what the
  detokenizer alone would cost a perfect translation (100 = nothing).
"""

import argparse
import os
import shlex
import sys
import time

import sacrebleu
import tensorflow as tf

from benchmarks.report import machine_description, write_section
from model.tokenizer import SentencePieceTokenizer, WordPieceTokenizer, normalize
from training import vocabulary
from training.config import resolve_config
from training.corpus import load_pairs

SECTION_TITLE = "Tokenization"
CHUNK = 4096


def learn(kind, texts, vocab_size, lower_case):
    """`(tokenizer, seconds to learn it)` for "unigram", "bpe" or "wordpiece"."""
    start = time.perf_counter()
    if kind == "wordpiece":
        vocab = vocabulary.learn_wordpiece(texts, vocab_size, lower_case=lower_case)
        seconds = time.perf_counter() - start
        return WordPieceTokenizer(vocab, lower_case=lower_case), seconds
    proto = vocabulary.learn_sentencepiece(texts, vocab_size, kind, lower_case=lower_case)
    seconds = time.perf_counter() - start
    return SentencePieceTokenizer(proto, lower_case=lower_case), seconds


def throughput(function, chunks):
    """Items per second of `function` over `chunks` (after one warm-up call), and its outputs."""
    function(chunks[0])
    outputs, start = [], time.perf_counter()
    for chunk in chunks:
        outputs.append(function(chunk))
    seconds = time.perf_counter() - start
    return sum(int(chunk.shape[0]) for chunk in chunks) / seconds, outputs


def measure(tokenizer, train_texts, references, lower_case):
    chunks = [tf.constant(train_texts[i : i + CHUNK]) for i in range(0, len(train_texts), CHUNK)]
    tokenize_rate, ids = throughput(tokenizer.tokenize, chunks)
    detokenize_rate, texts = throughput(tokenizer.detokenize, ids)
    round_trips = [text.decode("utf-8") for chunk in texts for text in chunk.numpy()]
    exact = sum(
        back == normalize(text, lower_case) for back, text in zip(round_trips, train_texts)
    ) / len(train_texts)
    restored = [
        text.decode("utf-8")
        for text in tokenizer.detokenize(tokenizer.tokenize(tf.constant(references))).numpy()
    ]
    return {
        "tokens per sentence": sum(int(chunk.row_lengths().numpy().sum()) for chunk in ids)
        / len(train_texts),
        "tokenize": tokenize_rate,
        "detokenize": detokenize_rate,
        "exact": exact,
        "bleu": sacrebleu.corpus_bleu(restored, [references]).score,
        "chrf": sacrebleu.corpus_chrf(restored, [references]).score,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_tokenizer", description=__doc__
    )
    parser.add_argument("--preset", default="small", help="vocabulary settings of this preset")
    parser.add_argument("--data", default="bible")
    parser.add_argument(
        "--kinds",
        nargs="+",
        default=["unigram", "bpe", "wordpiece"],
        choices=["unigram", "bpe", "wordpiece"],
    )
    parser.add_argument("--output", help="write the results into this Markdown file")
    args = parser.parse_args(argv)
    command = shlex.join(
        [
            "python",
            "-m",
            "benchmarks.bench_tokenizer",
            *(argv if argv is not None else sys.argv[1:]),
        ]
    )
    config = resolve_config(args.preset, overrides={"data": args.data})
    train_pairs = load_pairs(args.data, "train")
    train_texts = [text for pair in train_pairs for text in pair]
    references = [target for _, target in load_pairs(args.data, "test")]
    load_before = os.getloadavg()

    rows = []
    for kind in args.kinds:
        tokenizer, seconds = learn(kind, train_texts, config.vocab_size, config.lower_case)
        result = measure(tokenizer, train_texts, references, config.lower_case)
        rows.append((kind, tokenizer.vocab_size, seconds, result))
        print(
            f"{kind}: {tokenizer.vocab_size} pieces learned in {seconds:.1f} s; "
            f"{result['tokenize']:,.0f} sentences/s tokenized, "
            f"{result['detokenize']:,.0f} detokenized; {100 * result['exact']:.2f}% exact; "
            f"round-tripped references BLEU {result['bleu']:.2f}",
            flush=True,
        )
    load_after = os.getloadavg()

    table = "\n".join(
        f"| {kind} | {size:,} | {seconds:.1f} | {r['tokens per sentence']:.1f} | "
        f"{r['tokenize']:,.0f} | {r['detokenize']:,.0f} | {100 * r['exact']:.2f}% | "
        f"{r['bleu']:.2f} | {r['chrf']:.2f} |"
        for kind, size, seconds, r in rows
    )
    body = f"""Command: `{command}`
Machine: {machine_description()}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after.
Corpus: `{args.data}`, {len(train_pairs):,} training pairs ({len(train_texts):,} sentences, both
languages); vocabulary settings of the `{args.preset}` preset ({config.vocab_size:,} pieces, one
vocabulary shared by both languages). Throughput: the in-graph `tokenize`/`detokenize` functions
over the training sentences in chunks of {CHUNK:,}. "Exact": training sentences that come back
equal to `model.tokenizer.normalize(sentence)`. BLEU/chrF: the test split's {len(references):,}
English references, tokenized and detokenized, scored against themselves with sacreBLEU (100 =
the detokenizer costs a perfect translation nothing).

| tokenizer | pieces | learning (s) | tokens/sentence | tokenize (sentences/s) | detokenize (sentences/s) | exact | BLEU | chrF |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
{table}
"""
    print(body)
    if args.output:
        write_section(args.output, SECTION_TITLE, body)


if __name__ == "__main__":
    main()
