"""Learning subword vocabularies: SentencePiece (the default) or WordPiece, from training text.

SentencePiece models are learned with the `sentencepiece` library (unigram by default, `bpe` as an
option; character coverage 1.0 and byte fallback, so no character is ever [UNK]; the reserved
pieces `[PAD]=0, [UNK]=1, [START]=2, [END]=3`; NFKC normalization, `nfkc_cf` when lowercasing).
WordPiece vocabularies are learned with keras-hub's `compute_word_piece_vocabulary`. Either way the
result is applied in the graph by `model.tokenizer` (keras-hub's tokenizers).

`build_tokenizers` writes a tokenizer directory (see `model.tokenizer`) and reuses one that exists:
asking for other options than the recorded ones raises instead of mixing vocabularies.

Command line: `python -m training.vocabulary --data_dir DATA --out_dir VOCAB --vocab_size 8000`
learns from `DATA/train.tsv`, `--data bible:1,catalogs:3` from the training splits of a run's
corpora (`training.mixture`; see `--help`). Given a reversed run's tokenizer directory as
`--out_dir` (`training.config.TrainConfig.reverse`), it reads the pairs swapped, as the run
did, and refuses the tables of Spanish sources and English targets (`NOT_FOR_REVERSED`).
"""

import argparse
import io
import logging
import os

import sentencepiece
import tensorflow as tf

from model.placeholders import MARKERS, write_known_words
from model.restoration import (
    ACCENT_CONTEXTS_FILE,
    ACCENTS_FILE,
    CASES_FILE,
    NAMES_FILE,
    accent_table,
    case_table,
    context_accent_table,
    write_context_table,
    write_table,
)
from model.special_tokens import END_ID, PAD_ID, RESERVED_TOKENS, START_ID, UNK_ID
from model.spelling import MODERN, name_table
from model.tokenizer import (
    CONFIG_FILE,
    FORMAT_VERSION,
    TOKENIZER_TYPES,
    SentencePieceTokenizer,
    WordPieceTokenizer,
    load_tokenizers,
    model_file,
    normalize_casing,
    read_tokenizer_config,
    write_tokenizer_config,
)
from model.word_repair import LEXICON_FILE, REPAIR_WORDS_KEY
from run_directory import artifacts
from training.corpus import CorpusError, corpus_source_spelling, load_run_pairs
from training.mixture import load_splits, mixture_source_spelling, names_corpora, parse_data

logger = logging.getLogger(__name__)

SENTENCEPIECE_MODEL_TYPES = ("unigram", "bpe")
# The tokenizer config's switches of the source tokenizer's restoration (`model.restoration`),
# given when the vocabularies are learned or added after training (`add_restoration`).
RESTORATION_SWITCHES = ("restore_accents", "restore_case", "restore_names")
# The config's switches given to a trained run's directory (`add_restoration`,
# `training.word_repair_tables.add_word_repair`): they leave the vocabularies as they were.
ADDED_AFTER_TRAINING = (*RESTORATION_SWITCHES, REPAIR_WORDS_KEY)
# Sentences longer than this many bytes are skipped by the SentencePiece trainer (its default is
# 4192): long enough for any verse or ordinary sentence.
MAX_SENTENCE_BYTES = 16384


def learn_sentencepiece(
    texts, vocab_size, model_type="unigram", lower_case=False, threads=None, user_symbols=()
):
    """Learns a SentencePiece model.

    Args:
        texts: iterable of str, the training text (one sentence each).
        vocab_size: int, pieces in the model, reserved and byte pieces included. On a small corpus
            the trainer may stop below it (it never invents pieces the text does not support).
        model_type: "unigram" or "bpe".
        lower_case: bool, lowercase while normalizing (the `nfkc_cf` rule).
        threads: int, trainer threads (default: every core).
        user_symbols: strings each kept as one piece wherever they occur (the placeholder
            markers, `model.placeholders.MARKERS`).

    Returns:
        bytes, the serialized model proto (`model.tokenizer.SentencePieceTokenizer(proto)`).

    Raises:
        ValueError: an unknown `model_type`, or no text.
    """
    if model_type not in SENTENCEPIECE_MODEL_TYPES:
        raise ValueError(
            f"model_type must be one of {SENTENCEPIECE_MODEL_TYPES}, got {model_type!r}."
        )
    texts = [text for text in texts if text]
    if not texts:
        raise ValueError("No text to learn a SentencePiece model from.")
    proto = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=proto,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        byte_fallback=True,
        normalization_rule_name="nfkc_cf" if lower_case else "nfkc",
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=START_ID,
        eos_id=END_ID,
        pad_piece=RESERVED_TOKENS[PAD_ID],
        unk_piece=RESERVED_TOKENS[UNK_ID],
        bos_piece=RESERVED_TOKENS[START_ID],
        eos_piece=RESERVED_TOKENS[END_ID],
        hard_vocab_limit=False,
        max_sentence_length=MAX_SENTENCE_BYTES,
        input_sentence_size=0,
        num_threads=threads or os.cpu_count() or 1,
        minloglevel=2,
        **({"user_defined_symbols": list(user_symbols)} if user_symbols else {}),
    )
    return proto.getvalue()


def learn_wordpiece(texts, vocab_size, lower_case=False):
    """Learns a WordPiece vocabulary with keras-hub (`compute_word_piece_vocabulary`).

    Returns:
        list of str, index = id, starting with `RESERVED_TOKENS`.
    """
    import keras_hub

    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(list(texts), tf.string)).batch(1024)
    return keras_hub.tokenizers.compute_word_piece_vocabulary(
        dataset,
        vocabulary_size=vocab_size,
        lowercase=lower_case,
        reserved_tokens=list(RESERVED_TOKENS),
    )


def _learn(tokenizer_type, texts, config):
    if tokenizer_type == "sentencepiece":
        proto = learn_sentencepiece(
            texts,
            config["vocab_size"],
            config["model_type"],
            config["lower_case"],
            user_symbols=MARKERS if config.get("placeholders") else (),
        )
        return SentencePieceTokenizer(proto, lower_case=config["lower_case"])
    vocab = learn_wordpiece(texts, config["vocab_size"], config["lower_case"])
    return WordPieceTokenizer(vocab, lower_case=config["lower_case"])


def build_tokenizers(
    pairs,
    vocab_size,
    out_dir,
    tokenizer_type="sentencepiece",
    shared=True,
    lower_case=False,
    model_type="unigram",
    source_spelling=None,
    source_casing="keep",
    placeholders=False,
    restore_accents=False,
    restore_case=False,
    restore_names=False,
    name_sources=None,
):
    """Learns (or reloads) the source and target tokenizers.

    Writes `out_dir/tokenizer_config.json` and one vocabulary (`spm.shared.model`, or
    `vocab.shared.txt` for WordPiece) learned from both sides, or one per side (`.src`, `.tgt`).
    A directory that already holds them is reloaded instead of relearned, so a rerun is cheap and
    never overwrites anything.

    Args:
        pairs: iterable of `(source, target)` str pairs.
        vocab_size: int, size of each vocabulary (of the shared one).
        out_dir: str or os.PathLike, created if needed.
        tokenizer_type: "sentencepiece" or "wordpiece".
        shared: bool, one vocabulary for both languages.
        lower_case: bool, lowercase the text.
        model_type: SentencePiece's "unigram" or "bpe" (ignored for WordPiece).
        source_spelling: the spelling of the source side, "modern" for a corpus in modern
            Spanish spelling (`training.corpus.corpus_source_spelling`): recorded in the config,
            so the source tokenizer modernizes its input (`model.tokenizer.load_tokenizers`).
            None records nothing.
        source_casing: "keep", or how the source side's case is normalized
            (`model.tokenizer.normalize_casing`): the vocabulary is learned from normalized
            sources (and targets as they are), and the source tokenizer normalizes its input
            (`Tokenizer.casing`), in training, evaluation and exports alike.
        placeholders: bool, numbers and unknown names become markers (`model.placeholders`):
            the markers are pieces of the vocabulary, the training sources' words are written to
            `known_words.txt`, and the source tokenizer carries them (`Tokenizer.placeholders`).
            SentencePiece only.
        restore_accents, restore_case: bool, sources typed without accents, or in lowercase, get
            them back (`model.restoration`): the table learned from the training sources is
            written to `accents.tsv` or `cases.tsv`, and the source tokenizer restores them
            (`Tokenizer.restoration`).
        restore_names: bool, names typed in today's spelling are read in the 1909 Bible's
            ("Belén" → "Bethlehem"; `model.spelling.name_table`, written to `names.tsv`). Only
            with `source_spelling` "modern", the 1909 corpus.
        name_sources: the sources the names table is learned from (the 1909 Bible's, in a run
            that mixes it with other corpora: `training.mixture.names_corpora`); None: every
            source of `pairs`.

    Returns:
        `(source_tokenizer, target_tokenizer)`, the same object twice when `shared`.

    Raises:
        ValueError: `out_dir` holds vocabularies built with other options, or by an older version.
    """
    config = _tokenizer_config(locals())  # this call's arguments, by name
    os.makedirs(out_dir, exist_ok=True)
    if _holds_vocabularies_of(out_dir, config):
        logger.info("Reusing the vocabularies in %s.", out_dir)
        return load_tokenizers(out_dir)

    _learn_into(out_dir, list(pairs), config, source_casing, name_sources)
    return load_tokenizers(out_dir)


def _learn_into(out_dir, pairs, config, source_casing, name_sources):
    """Learns the vocabularies, known words and restoration tables `config` names from `pairs`
    and writes them to `out_dir`, the config last: a directory with a config always holds
    every vocabulary it names."""
    tokenizer_type = config["type"]
    sources = _sources_as_seen(pairs, source_casing)
    targets = [target for _, target in pairs]
    texts_by_side = (
        {"shared": sources + targets} if config["shared"] else {"src": sources, "tgt": targets}
    )
    for side, texts in texts_by_side.items():
        logger.info("Learning the %s %s vocabulary...", side, tokenizer_type)
        tokenizer = _learn(tokenizer_type, texts, config)
        tokenizer.save(os.path.join(out_dir, model_file(tokenizer_type, side)))
        logger.info("Learned %d pieces.", tokenizer.vocab_size)
    if config.get("placeholders"):
        write_known_words(out_dir, [source for source, _ in pairs])
    write_restoration_tables(
        out_dir,
        sources,
        config.get("restore_accents", False),
        config.get("restore_case", False),
        config.get("restore_names", False),
        name_sources,
    )
    write_tokenizer_config(out_dir, config)


def _tokenizer_config(arguments):
    """`tokenizer_config.json`'s content for `build_tokenizers`' `arguments` (by name); the
    switches (`placeholders`, `restore_accents`, `restore_case`, `restore_names`) recorded only
    when on, so directories written before a switch existed still match.

    Raises:
        ValueError: an unknown tokenizer type, or options that do not go together.
    """
    tokenizer_type, source_spelling = arguments["tokenizer_type"], arguments["source_spelling"]
    if tokenizer_type not in TOKENIZER_TYPES:
        raise ValueError(f"tokenizer must be one of {TOKENIZER_TYPES}, got {tokenizer_type!r}.")
    if arguments["restore_names"] and source_spelling != MODERN:
        raise ValueError(
            "restore_names reads today's spelling of names in the 1909 Bible's; this corpus "
            f"records source spelling {source_spelling!r}, not {MODERN!r}."
        )
    if arguments["placeholders"] and tokenizer_type != "sentencepiece":
        raise ValueError("placeholders need the sentencepiece tokenizer (its user symbols).")
    config = dict(
        format_version=FORMAT_VERSION,
        type=tokenizer_type,
        vocab_size=arguments["vocab_size"],
        shared=arguments["shared"],
        lower_case=arguments["lower_case"],
        model_type=arguments["model_type"] if tokenizer_type == "sentencepiece" else None,
    )
    if source_spelling is not None:  # absent, as in the configs written before it existed
        config["source_spelling"] = source_spelling
    if arguments["source_casing"] != "keep":
        config["source_casing"] = arguments["source_casing"]
    switches = ("placeholders", *RESTORATION_SWITCHES)
    config.update((name, True) for name in switches if arguments[name])
    return config


def _holds_vocabularies_of(out_dir, config):
    """Whether `out_dir` already holds vocabularies built with `config` (False: none yet).

    Tables given to the directory after training (`ADDED_AFTER_TRAINING`) do not count
    as other options: they leave the vocabularies as they were, so a run resumed there (`make
    pretrained` run again) trains on with the tokenizer its exports and fine-tuned runs use.

    Raises:
        ValueError: it holds vocabularies built with other options.
    """
    existing = read_tokenizer_config(out_dir)
    if existing is None:
        return False
    added = [name for name in ADDED_AFTER_TRAINING if existing.get(name) and name not in config]
    if added:
        logger.info("%s: the tables given after training (%s) are kept.", out_dir, ", ".join(added))
        existing = {key: value for key, value in existing.items() if key not in added}
    if existing != config:
        differences = ", ".join(
            f"{key}: {existing.get(key)!r} there, {config.get(key)!r} asked"
            for key in sorted(set(existing) | set(config))
            if existing.get(key) != config.get(key)
        )
        raise ValueError(
            f"{out_dir} holds vocabularies built with other options ({differences}); use "
            "another directory or delete them to rebuild."
        )
    return True


def build_run_tokenizers(pairs_by_corpus, config, out_dir):
    """`build_tokenizers` with a training config's settings (a `TrainConfig` or its dict), learned
    from `pairs_by_corpus` (`{corpus name: training pairs}` of the config's corpora,
    `training.mixture.load_splits`; for a config of one corpus, its pairs will do): every
    corpus's pairs for the vocabulary and the accent and case tables, the 1909 Bible's for the
    names table; the source spelling is the one the corpora record
    (`training.mixture.mixture_source_spelling`), none for a reversed run (`reverse`), whose
    sources are the corpora's English."""
    settings = config if isinstance(config, dict) else vars(config)
    corpora = parse_data(settings["data"])
    if not isinstance(pairs_by_corpus, dict):
        if len(corpora) > 1:
            raise ValueError(f"the pairs of {settings['data']!r} are needed corpus by corpus")
        pairs_by_corpus = {corpora[0].name: pairs_by_corpus}
    pairs = [pair for corpus in corpora for pair in pairs_by_corpus[corpus.name]]
    name_sources = [
        source
        for corpus in names_corpora(corpora)
        for source in _sources_as_seen(
            pairs_by_corpus[corpus.name], settings.get("source_casing", "keep")
        )
    ]
    return build_tokenizers(
        pairs,
        settings["vocab_size"],
        out_dir,
        tokenizer_type=settings["tokenizer"],
        shared=settings["shared_vocab"],
        lower_case=settings["lower_case"],
        model_type=settings["subword_model"],
        source_spelling=None if settings.get("reverse") else mixture_source_spelling(corpora),
        source_casing=settings.get("source_casing", "keep"),
        placeholders=settings.get("placeholders", False),
        restore_accents=settings.get("restore_accents", False),
        restore_case=settings.get("restore_case", False),
        restore_names=settings.get("restore_names", False),
        name_sources=name_sources if len(corpora) > 1 else None,
    )


def write_restoration_tables(
    directory, sources, accents=True, cases=True, names=False, name_sources=None
):
    """Writes the `model.restoration` tables asked for, learned from `sources` (the training
    sources as the source tokenizer sees them, after its case normalization); the names table
    from `name_sources` instead when given (its forms never words of `sources`). The accents are
    two tables: the bare forms that are not words, and those that are, in context."""
    if accents:
        write_table(os.path.join(directory, ACCENTS_FILE), accent_table(sources))
        write_context_table(
            os.path.join(directory, ACCENT_CONTEXTS_FILE), context_accent_table(sources)
        )
    if cases:
        write_table(os.path.join(directory, CASES_FILE), case_table(sources))
    if names:
        table = name_table(sources) if name_sources is None else name_table(name_sources, sources)
        write_table(os.path.join(directory, NAMES_FILE), table)


def add_restoration(tokenizer_dir, pairs, name_sources=None):
    """Gives the tokenizers of `tokenizer_dir` (a run's, trained without it) the restoration of
    accents and capitals (`model.restoration`), and of names in today's spelling where its corpus
    is the 1909 Bible (source spelling "modern"): writes the tables of `pairs`' sources (the
    run's training pairs; the names table of `name_sources` when given, the Bible's sources of a
    run on several corpora) and records "restore_accents", "restore_case" (and "restore_names")
    in its config, so its source tokenizer restores them from now on. The vocabularies are
    unchanged, so the run's weights still fit them.

    Raises:
        FileNotFoundError: no tokenizer config there.
    """
    config = read_tokenizer_config(tokenizer_dir)
    if config is None:
        raise FileNotFoundError(f"{os.path.join(tokenizer_dir, CONFIG_FILE)} not found.")
    names = config.get("source_spelling") == MODERN
    sources = _sources_as_seen(pairs, config.get("source_casing"))
    if name_sources is not None:
        name_sources = _sources_as_seen(
            [(s, "") for s in name_sources], config.get("source_casing")
        )
    write_restoration_tables(tokenizer_dir, sources, names=names, name_sources=name_sources)
    restored = {"restore_accents": True, "restore_case": True}
    write_tokenizer_config(
        tokenizer_dir, {**config, **restored, **({"restore_names": True} if names else {})}
    )


def _sources_as_seen(pairs, source_casing):
    """The sources of `pairs` as the source tokenizer sees them: case-normalized as
    `source_casing` says ("keep" or None: as written)."""
    sources = [source for source, _ in pairs]
    if source_casing in (None, "keep"):
        return sources
    normalized = normalize_casing(tf.constant(sources), source_casing)
    return [text.decode("utf-8") for text in normalized.numpy()]


def _training_pairs(data_dir, data, reverse=False):
    """`(pairs, name_sources, source_spelling)` for the command line: `data_dir`'s train.tsv
    (`name_sources` None: all of them), or the training splits of the data spec `data`, swapped
    for a reversed run (`reverse`)."""
    if data_dir is not None:
        pairs = load_run_pairs(data_dir, "train", reverse=reverse)
        return pairs, None, None if reverse else corpus_source_spelling(data_dir)
    corpora = parse_data(data)
    splits = load_splits(corpora, "train", reverse=reverse)
    name_sources = [
        source for corpus in names_corpora(corpora) for source, _ in splits[corpus.name]
    ]
    pairs = [pair for corpus in corpora for pair in splits[corpus.name]]
    spelling = None if reverse else mixture_source_spelling(corpora)
    return pairs, name_sources if len(corpora) > 1 else None, spelling


def reversed_run(tokenizer_dir):
    """Whether `tokenizer_dir` is the tokenizer directory of a reversed run (`reverse` in the
    config of the run directory holding it); False for a directory of no run."""
    run_dir = os.path.dirname(os.path.abspath(tokenizer_dir))
    try:
        return bool(artifacts.read_config(run_dir).get("reverse"))
    except FileNotFoundError:
        return False


# Why the tables given after training do not fit a reversed run, whose sources are English and
# whose translations are Spanish.
NOT_FOR_REVERSED = {
    "add_restoration": "the restoration tables put back what people leave out when they type "
    "Spanish sources (accents, capitals, the 1909 Bible's names: model.restoration)",
    "add_word_repair": "the repair of made-up words replaces a made-up English word by "
    "Apertium's spa-eng translation of the Spanish source word it comes from "
    "(model.word_repair)",
}


def main(argv=None):

    parser = argparse.ArgumentParser(
        description=(
            "Learn subword vocabularies from DATA_DIR/train.tsv (source<TAB>target lines) and "
            "write them to OUT_DIR. Existing vocabularies in OUT_DIR are reused, never overwritten."
        )
    )
    corpus = parser.add_mutually_exclusive_group(required=True)
    corpus.add_argument("--data_dir", help="directory with train.tsv")
    corpus.add_argument(
        "--data",
        help="instead of --data_dir, the training splits of a data spec as training.train reads "
        "it (bible, catalogs, several mixed: bible:1,catalogs:3; training.mixture): every "
        "corpus's sources for the vocabulary and the accent and case tables, the Bible's for "
        "the names table",
    )
    parser.add_argument("--out_dir", required=True, help="where to write the vocabularies")
    parser.add_argument("--vocab_size", type=int, default=8000, help="pieces per vocabulary")
    parser.add_argument("--tokenizer", default="sentencepiece", choices=TOKENIZER_TYPES)
    parser.add_argument(
        "--model_type",
        default="unigram",
        choices=SENTENCEPIECE_MODEL_TYPES,
        help="SentencePiece model type (default unigram)",
    )
    parser.add_argument(
        "--separate_vocabs",
        action="store_true",
        help="one vocabulary per language instead of a shared one",
    )
    parser.add_argument("--lower_case", action="store_true", help="lowercase the text")
    parser.add_argument(
        "--restore_accents",
        action="store_true",
        help="sources typed without accents get them back (model.restoration)",
    )
    parser.add_argument(
        "--restore_case",
        action="store_true",
        help="sources typed in lowercase get their capitals back (model.restoration)",
    )
    parser.add_argument(
        "--restore_names",
        action="store_true",
        help="names typed in today's spelling are read in the 1909 Bible's (Belén → Bethlehem; "
        "the Bible corpus only)",
    )
    parser.add_argument(
        "--add_restoration",
        action="store_true",
        help="instead of learning vocabularies, give those already in OUT_DIR (a trained run's "
        "tokenizer directory) the restorations, learned from DATA_DIR/train.tsv (names: the "
        "Bible corpus only)",
    )
    parser.add_argument(
        "--add_word_repair",
        action="store_true",
        help="instead of learning vocabularies, give those already in OUT_DIR (a trained run's "
        "tokenizer directory) the repair of made-up words (model.word_repair): English words "
        "from Debian's word lists and the targets, a lexicon of the sources' and Debian's "
        "Spanish words translated by Apertium (installed when missing, as root)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    reverse = reversed_run(args.out_dir)
    for option, why in NOT_FOR_REVERSED.items():
        if getattr(args, option) and reverse:
            parser.error(
                f"--{option}: {args.out_dir} is the tokenizer of a reversed run, whose "
                f"sources are its corpora's targets (English), and {why}"
            )
    pairs, name_sources, source_spelling = _training_pairs(args.data_dir, args.data, reverse)
    if args.add_word_repair:
        from training.word_repair_tables import add_word_repair

        try:
            sizes = add_word_repair(args.out_dir, pairs)
        except CorpusError as error:
            parser.exit(1, f"error: {error}\n")
        print(
            f"{args.out_dir}: the target tokenizer now repairs made-up words "
            f"({sizes['lexicon']:,} words in {LEXICON_FILE}, {sizes['english_words']:,} "
            "English words)"
        )
        return
    if args.add_restoration:
        add_restoration(args.out_dir, pairs, name_sources)
        names = f", names in today's spelling ({NAMES_FILE})" * bool(
            read_tokenizer_config(args.out_dir).get("restore_names")
        )
        print(
            f"{args.out_dir}: the source tokenizer now restores accents and capitals "
            f"({ACCENTS_FILE}, {ACCENT_CONTEXTS_FILE}, {CASES_FILE}){names}"
        )
        return
    source_tokenizer, target_tokenizer = build_tokenizers(
        pairs,
        args.vocab_size,
        args.out_dir,
        tokenizer_type=args.tokenizer,
        shared=not args.separate_vocabs,
        lower_case=args.lower_case,
        model_type=args.model_type,
        source_spelling=source_spelling,
        restore_accents=args.restore_accents,
        restore_case=args.restore_case,
        restore_names=args.restore_names,
        name_sources=name_sources,
    )
    for name, tokenizer, texts in (
        ("source", source_tokenizer, [source for source, _ in pairs[:3]]),
        ("target", target_tokenizer, [target for _, target in pairs[:3]]),
    ):
        ids = tokenizer.tokenize(tf.constant(texts, tf.string))
        print(f"{name} vocabulary: {tokenizer.vocab_size} pieces")
        for text, pieces, back in zip(
            texts, tokenizer.lookup(ids).to_list(), tokenizer.detokenize(ids).numpy()
        ):
            print(f"  {text!r}\n    {b' '.join(pieces).decode()}\n    {back.decode()!r}")


if __name__ == "__main__":
    main()
