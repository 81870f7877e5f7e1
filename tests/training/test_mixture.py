"""Several corpora in one run (training/mixture.py): the data spec, mixing by weight, what each
corpus's preprocessing is, dev BLEU and evaluation per corpus."""

import filecmp
import json
import math
import os

import numpy as np
import pytest
import sentencepiece

from model.spelling import MODERN, modernize, modernize_graph
from run_directory import artifacts
from tests.training_cli import train_tiny
from training.config import resolve_config
from training.curves import read_scalars
from training.evaluate import evaluate, evaluate_perturbations
from training.mixture import Corpus, parse_data
from training.toy_corpus import ES_EN, ES_EN_OFFICE, write_corpus
from training.train import TrainingError, main, make_train_dataset, prepare_examples, train
from training.vocabulary import build_run_tokenizers
from training.vocabulary import main as vocabulary_main

# End to end over trained runs: `make test-large` (tests/collection.py).
pytestmark = pytest.mark.large


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory):
    """Two toy corpus directories of disjoint vocabularies: `house/` and `office/`."""
    base = tmp_path_factory.mktemp("corpora")
    return (
        str(write_corpus(base / "house", dev=30, test=30)),
        str(write_corpus(base / "office", train=400, dev=20, test=25, glossary=ES_EN_OFFICE)),
    )


def test_a_plain_spec_is_one_corpus_and_weights_are_normalized(two_corpora):
    house, office = two_corpora
    assert parse_data("bible") == [Corpus("bible", 1.0, "bible")]
    assert parse_data("tfds:ted_hrlr_translate/pt_to_en") == [
        Corpus("tfds:ted_hrlr_translate/pt_to_en", 1.0, "ted_hrlr_translate_pt_to_en")
    ]
    assert parse_data(house) == [Corpus(house, 1.0, "house")]
    assert parse_data(f"bible:1,{office}:3") == [
        Corpus("bible", 0.25, "bible"),
        Corpus(office, 0.75, "office"),
    ]
    # A weight left out is 1; a TFDS name's colon is no weight.
    assert [c.share for c in parse_data(f"tfds:a/b,{house}:0.5")] == [2 / 3, 1 / 3]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "--data is empty"),
        ("bible:1,,catalogs:3", "an empty entry between commas"),
        ("bible:0,catalogs:3", "the weight of 'bible' must be positive, got 0.0"),
        ("bible:-2,catalogs:3", "the weight of 'bible' must be positive, got -2.0"),
        ("bible:1,catalogs:1e999", "the weight of 'catalogs' must be positive, got inf"),
        ("bible:1x,catalogs:3", "the weight of 'bible' must be a number, got '1x'"),
        ("bible:,catalogs:3", "the weight of 'bible' must be a number, got ''"),
        (":3,bible:1", "the entry ':3' names no corpus before its weight"),
        ("bible:1,catalogs:2,bible:3", "the corpus 'bible' is named twice"),
        ("a/x.tsv:1,b/x.tsv:1", "'a/x.tsv' and 'b/x.tsv' would both be reported as 'x'"),
    ],
)
def test_bad_data_specs_are_refused_before_any_work(spec, message, tmp_path, capsys):
    with pytest.raises(ValueError) as error:
        parse_data(spec)
    assert message in str(error.value)
    # The training CLI refuses it as a usage error, before it writes anything.
    with pytest.raises(SystemExit) as exit_info:
        main(["--preset", "tiny", "--data", spec, "--run_dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "run")


def test_an_unknown_corpus_of_a_mixture_is_named(two_corpora, tmp_path, capsys):
    house, _ = two_corpora
    status = main(
        ["--preset", "tiny", "--data", f"{house}:1,nosuchcorpus:2"]
        + ["--run_dir", str(tmp_path / "run")]
    )
    assert status == 1
    error = capsys.readouterr().err
    assert "corpus 'nosuchcorpus' of the mixture: unknown corpus source 'nosuchcorpus'" in error


def house_first_ids(tokenizer):
    """The first source piece of every house sentence can be any of its words: their ids."""
    from training.toy_corpus import ES_EN

    pieces = tokenizer.tokenize(np.array(sorted(ES_EN))).to_list()
    return {ids[1] for ids in pieces}


@pytest.mark.parametrize("source_noise", [0.0, 0.5])
def test_mixing_draws_each_corpus_at_its_normalized_weight(two_corpora, source_noise, tmp_path):
    """Examples drawn from `make_train_dataset` (tokenized up front, or in tf.data with source
    noise) come from each corpus in proportion to its weight: over N draws the count of the
    house corpus (share p = 1/4) is binomial, and a bound of 6 standard deviations is missed
    with probability below 2e-9, whatever the seed (the seed is fixed anyway)."""
    house, office = two_corpora
    config = resolve_config(
        "tiny",
        overrides={
            "data": f"{house}:1,{office}:3",
            "source_noise": source_noise,
            "source_noise_kinds": "lowercase",
            "batch_tokens": 2048,
        },
    )
    corpora = parse_data(config.data)
    from training.mixture import load_splits

    train_splits = load_splits(corpora, "train")
    tokenizers = build_run_tokenizers(train_splits, config, str(tmp_path / "tokenizer"))
    examples = {
        corpus.name: prepare_examples(train_splits[corpus.name], *tokenizers, config, "train")
        for corpus in corpora
    }
    dataset = make_train_dataset(corpora, train_splits, examples, tokenizers, config)
    house_ids = house_first_ids(tokenizers[0])
    office_ids = {
        ids[1] for ids in tokenizers[0].tokenize(np.array(sorted(ES_EN_OFFICE))).to_list()
    }
    assert not house_ids & office_ids
    drawn = house = 0
    for (sources, _), _ in dataset:
        first = sources.numpy()[:, 1]
        assert all(token in house_ids or token in office_ids for token in first)
        house += int(np.isin(first, list(house_ids)).sum())
        drawn += len(first)
        if drawn >= 6000:
            break
    share = 0.25
    bound = 6 * math.sqrt(drawn * share * (1 - share))
    assert abs(house - share * drawn) < bound, (house, drawn)


@pytest.fixture(scope="module")
def mixed_run(two_corpora, tmp_path_factory):
    """A tiny run on both toy corpora (house:1, office:1) with dev BLEU per corpus."""
    house, office = two_corpora
    return train_tiny(
        str(tmp_path_factory.mktemp("runs") / "mixed"),
        data=f"{house}:1,{office}:1",
        train_steps=40,
        checkpoint_every=20,
        dev_bleu_sentences=12,
    )


def test_dev_bleu_is_written_per_corpus_and_the_best_follows_their_mean(mixed_run, tmp_path):
    scalars = read_scalars(os.path.join(mixed_run, "logs", "dev"))
    for tag in ("bleu/house", "bleu/office", "chrf/house", "chrf/office", "loss/house"):
        assert scalars[tag][0] == (20, 40), tag
    for step_index in range(2):
        mean = (scalars["bleu/house"][1][step_index] + scalars["bleu/office"][1][step_index]) / 2
        assert scalars["bleu"][1][step_index] == pytest.approx(mean, abs=1e-4)
    best = json.load(open(os.path.join(mixed_run, "best", "best.json")))
    best_index = scalars["bleu"][0].index(best["step"])
    assert best["bleu"] == pytest.approx(max(scalars["bleu"][1]), abs=1e-4)
    # Each corpus's dev BLEU is that of its own dev split alone (its first 12 sentences),
    # scored by training.evaluate on the best weights (those it loads).
    for name, corpus in zip(("house", "office"), parse_data(read_data(mixed_run))):
        report = evaluate(mixed_run, "dev", limit=12, data=corpus.spec, output_dir=str(tmp_path))
        assert best["corpora"][name]["bleu"] == pytest.approx(report["bleu"], abs=1e-6)
        assert scalars[f"bleu/{name}"][1][best_index] == pytest.approx(report["bleu"], abs=1e-4)


def read_data(run_dir):
    return artifacts.read_config(run_dir)["data"]


def test_evaluate_scores_each_corpus_apart_into_its_own_files(mixed_run, two_corpora, tmp_path):
    house, office = two_corpora
    reports = evaluate_perturbations(["none"], mixed_run, output_dir=str(tmp_path / "eval"))
    assert [report["corpus"] for report in reports] == ["house", "office"]
    assert [report["sentences"] for report in reports] == [30, 25]
    for report, spec in zip(reports, (house, office)):
        alone = evaluate(mixed_run, data=spec, output_dir=str(tmp_path / report["corpus"]))
        assert report["bleu"] == alone["bleu"] and report["chrf"] == alone["chrf"]
        saved = json.load(
            open(tmp_path / "eval" / report["corpus"] / "test.greedy.report.json", encoding="utf-8")
        )
        assert saved == report
        lines = (tmp_path / "eval" / report["corpus"] / "test.greedy.hyp.txt").read_text()
        assert len(lines.splitlines()) == report["sentences"]


def test_the_evaluate_cli_prints_each_corpus(mixed_run, tmp_path, capsys):
    from training.evaluate import main as evaluate_main

    assert evaluate_main(["--run_dir", mixed_run, "--output_dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.index("house:") < out.index("office:")
    assert out.count("30 sentences") == 1 and out.count("25 sentences") == 1


def test_a_mixed_bundle_reports_and_shows_each_corpus_in_its_model_card(mixed_run, tmp_path):
    """The card's evaluation has a row per corpus and decoding, the same scores as evaluating the
    bundle; its limitations show each corpus's first test sentences with the bundle's own beam
    translations."""
    from training.bundle import KNOWN_EXAMPLES, bundle

    bundle_dir = str(tmp_path / "mixed-es-en")
    reports = bundle(mixed_run, bundle_dir, "make x", beam_width=2, alpha=1.0)
    assert [(r["corpus"], r["decoding"]) for r in reports] == [
        ("house", "greedy"),
        ("office", "greedy"),
        ("house", "beam 2, alpha 1.0"),
        ("office", "beam 2, alpha 1.0"),
    ]
    card = (tmp_path / "mixed-es-en" / "README.md").read_text(encoding="utf-8")
    for report in reports:
        row = f"| {report['corpus']} | {report['decoding']} | {report['bleu']:.2f} |"
        assert card.count(row) == 1, row
    for section in ("Model", "Intended use", "Training data", "Evaluation", "Limitations"):
        assert f"\n## {section}\n" in card
    limitations = card[card.index("## Limitations") : card.index("## Use")]
    for report in reports[2:]:
        corpus_dir = tmp_path / "mixed-es-en" / "eval" / report["corpus"]
        translations = (corpus_dir / "test.beam2.hyp.txt").read_text().splitlines()
        shown = translations[:KNOWN_EXAMPLES]
        block = limitations[limitations.index(f"`{report['corpus']}`:") :]
        assert all(f" | {translation} |" in block for translation in shown)


def test_the_robustness_report_of_a_mixed_run_has_each_corpus_s_rows(mixed_run, tmp_path):
    """Each corpus's perturbed rows, its BLEU change from its own split as written; its copy
    rates from its own test split."""
    from benchmarks.bench_robustness import main as bench_robustness

    output = tmp_path / "BENCHMARKS.md"
    argv = ["--run_dir", mixed_run, "--limit", "6", "--perturbations", "lowercase"]
    assert bench_robustness([*argv, "--output", str(output), "--section", "Mixed"]) == 0
    text = output.read_text(encoding="utf-8")
    assert "6 sentences of `house` and 6 sentences of `office` of its test splits" in text
    for corpus in ("house", "office"):
        directory = os.path.join(mixed_run, "eval", corpus)
        clean, lowercase = (
            json.load(open(os.path.join(directory, f"test.greedy{stem}.report.json")))
            for stem in ("", ".lowercase")
        )
        assert f"| {corpus} | none | {clean['bleu']:.2f} |" in text
        change = lowercase["bleu"] - clean["bleu"]
        assert f"| {corpus} | lowercase | {lowercase['bleu']:.2f} |" in text
        assert (
            text.count(
                f"% ({lowercase['looping_sentences']}) | {100 * lowercase['made_up_rate']:.1f}% "
                f"({lowercase['made_up_words']}) | {change:+.2f} |"
            )
            >= 1
        )
        copies = json.load(open(os.path.join(directory, "test.greedy.copy.report.json")))
        rates = copies["names"]
        assert f"| {corpus} | names | {rates['sentences']} | {100 * rates['rate']:.1f}% |" in text


def write_bible_like(directory, pairs):
    """A corpus directory whose build records the 1909 Bible's modern spelling."""
    directory.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        lines = "".join(f"{source}\t{target}\n" for source, target in pairs)
        (directory / f"{split}.tsv").write_text(lines, encoding="utf-8")
    (directory / "stats.json").write_text(json.dumps({"source_spelling": MODERN}))
    return str(directory)


def test_the_bible_tables_come_from_the_bible_side_only(tmp_path):
    """The names table maps today's spelling of a name to the 1909 Bible's: learned from the
    corpus recorded as the modernized 1909 text only, never mapping a word any corpus holds;
    the accent table is learned from every corpus; the run records the Bible's spelling."""
    bible = write_bible_like(
        tmp_path / "bible",
        [("Y fue Jesús á Bethania con Thomás.", "Jesus went to Bethany with Thomas.")] * 3,
    )
    modern = tmp_path / "modern"
    modern.mkdir()
    for split in ("train", "dev", "test"):
        (modern / f"{split}.tsv").write_text(
            "Philip abrió la configuración de tomás.\tPhilip opened Tomás's settings.\n"
            "Tomás está aquí.\tTomás is here.\n",
            encoding="utf-8",
        )
    config = resolve_config(
        "tiny",
        overrides={
            "data": f"{bible}:1,{modern}:1",
            "restore_names": True,
            "restore_accents": True,
        },
    )
    from training.mixture import load_splits

    splits = load_splits(parse_data(config.data), "train")
    build_run_tokenizers(splits, config, str(tmp_path / "tokenizer"))
    tokenizer_config = json.load(open(tmp_path / "tokenizer" / "tokenizer_config.json"))
    assert tokenizer_config["source_spelling"] == MODERN
    names = dict(
        line.split("\t")
        for line in (tmp_path / "tokenizer" / "names.tsv").read_text().split("\n")
        if line
    )
    assert names["betania"] == "bethania"
    # "Thomás" is the Bible's, but "tomás" is a word of the other corpus: left as typed.
    assert "tomas" not in names and "tomás" not in names
    # "Philip" is the other corpus's name, never the Bible's: no "Filip" for it.
    assert "filip" not in names
    accents = (tmp_path / "tokenizer" / "accents.tsv").read_text()
    assert "configuracion\tconfiguración" in accents

    # Tables added after training (`make pretrained`) follow the same rule.
    plain = resolve_config("tiny", overrides={"data": config.data})
    build_run_tokenizers(splits, plain, str(tmp_path / "added"))
    vocabulary_main(
        ["--data", config.data, "--out_dir", str(tmp_path / "added"), "--add_restoration"]
    )
    for table in ("names.tsv", "accents.tsv", "accent_contexts.tsv"):
        assert filecmp.cmp(tmp_path / "tokenizer" / table, tmp_path / "added" / table), table


def test_modernizing_leaves_text_in_todays_spelling_as_it_is():
    """A run holding the Bible modernizes every source; sentences already in today's spelling
    (as a modern corpus writes them) go through unchanged, in Python and in the graph."""
    today = [
        "Él fue a la estación y dio una vuelta.",
        "¿Dónde está el archivo o la carpeta?",
        "No se pudo abrir el guion: ya existe.",
        "A ti te vi ayer; di que sí.",
        "Se creó el usuario «Ana» y se crio en Lima.",
    ]
    assert [modernize(text) for text in today] == today
    assert [text.decode() for text in modernize_graph(np.array(today)).numpy()] == today


def test_a_spec_with_names_and_no_bible_is_refused(two_corpora, tmp_path):
    house, office = two_corpora
    config = resolve_config(
        "tiny", overrides={"data": f"{house}:1,{office}:1", "restore_names": True}
    )
    with pytest.raises((TrainingError, ValueError), match="restore_names reads today's spelling"):
        train(config, str(tmp_path / "run"))


def test_a_mixed_noised_run_resumes_exactly(two_corpora, tmp_path):
    """20 steps + resume to 40 = 40 uninterrupted steps on two corpora tokenized in tf.data:
    the weighted draws are part of the checkpointed data position."""
    house, office = two_corpora
    settings = dict(data=f"{house}:1,{office}:3", source_noise=0.3, checkpoint_every=20)
    straight, interrupted = str(tmp_path / "straight"), str(tmp_path / "interrupted")
    train_tiny(straight, train_steps=40, **settings)
    train_tiny(interrupted, train_steps=20, **settings)
    train(resolve_config("tiny", overrides={**settings, "train_steps": 40}), interrupted, True)
    expected, *_ = artifacts.load_trained(straight)
    resumed, *_ = artifacts.load_trained(interrupted)
    for want, got in zip(expected.weights, resumed.weights, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_dev_data_is_scored_at_every_checkpoint_and_never_trained_on(two_corpora, tmp_path):
    """`--dev_data`: the office corpus's dev split scored beside the house corpus the run trains
    on; its train split never read (its words stay out of the vocabulary)."""
    house, office = two_corpora
    run_dir = train_tiny(
        str(tmp_path / "run"),
        data=house,
        dev_data=office,
        train_steps=20,
        checkpoint_every=10,
        dev_bleu_sentences=6,
    )
    scalars = read_scalars(os.path.join(run_dir, "logs", "dev"))
    for tag in ("bleu/house", "bleu/office", "loss/office"):
        assert scalars[tag][0] == (10, 20), tag
    best = json.load(open(os.path.join(run_dir, "best", "best.json")))
    report = evaluate(run_dir, "dev", limit=6, data=office, output_dir=str(tmp_path / "eval"))
    assert best["corpora"]["office"]["bleu"] == pytest.approx(report["bleu"], abs=1e-6)
    # Only the house corpus was trained on: no word of the office corpus's alone is a piece.
    processor = sentencepiece.SentencePieceProcessor(
        model_file=str(tmp_path / "run" / "tokenizer" / "spm.shared.model")
    )
    pieces = {processor.id_to_piece(i) for i in range(processor.get_piece_size())}
    office_words = {*ES_EN_OFFICE, *ES_EN_OFFICE.values()} - {*ES_EN, *ES_EN.values()}
    assert len(office_words) > 20
    assert not {f"▁{word}" for word in office_words} & pieces
    assert {f"▁{word}" for word in ("perro", "dog")} <= pieces


@pytest.mark.parametrize(
    "dev_data, message", [("HOUSE", "which --data trains on already"), ("nowhere/", "nowhere")]
)
def test_bad_dev_data_is_refused_before_training(two_corpora, tmp_path, dev_data, message):
    house, _ = two_corpora
    with pytest.raises(TrainingError, match=message):
        train_tiny(str(tmp_path / "run"), data=house, dev_data=dev_data.replace("HOUSE", house))
