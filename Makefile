# Every target depends on the virtual environment, so a fresh clone needs no other step.
PYTHON_BIN ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

PRESET ?= small
DATA ?= bible
RUN_DIR ?= runs/$(PRESET)
EXPORT_BASE ?= exports
MODEL_NAME ?= translator
PORT ?= 8500
REST_PORT ?= 8501
# The translator page's port (make demo-web); it binds 127.0.0.1 only.
WEB_PORT ?= 8080
TEXT ?= ¿Dónde está mi hermano?
# Checkpoints `make average` averages (training keeps --keep_checkpoints, 3 by default).
AVERAGE_LAST ?= 3
# pytest-xdist processes for `make test` (TEST_WORKERS=0: serial); tests/conftest.py groups the files.
TEST_WORKERS ?= 2

export TF_CPP_MIN_LOG_LEVEL ?= 2
export PYTHONUNBUFFERED := 1

SERVER_FLAGS := --port=$(PORT) --rest_api_port=$(REST_PORT) --model_name=$(MODEL_NAME) \
	--model_base_path=$(abspath $(EXPORT_BASE))/$(MODEL_NAME) --enable_batching \
	--batching_parameters_file=serving/batching.config \
	--monitoring_config_file=serving/monitoring.config $(SERVE_ARGS)

.PHONY: help setup translate test test-large test-under-load check-mutations lint data data-bible data-catalogs data-catalogs-more data-catalog-fills data-catalog-fills-more data-wordnet-bt data-wordnet-bt-own data-lexicon data-telephony data-test bench-everyday train average evaluate export serve query demo demo-web demo-train browser pretrained pretrained-base notebooks \
	bench-train bench-decode bench-profile bench-serve bench-sweep bench-tokenizer bench-robustness \
	bench-translate bench-cold-start bench-soak check-prometheus \
	export-ctranslate2 clean-venv

setup: $(STAMP)

help:  ## The targets and what they do.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# Pinned dependencies from the requirements files; then this project, editable, with its
# console commands (translate-train, translate-serve, ...; see pyproject.toml). Silent on stdout,
# which `make translate < in.txt > out.txt` keeps for the translations.
.SILENT: $(STAMP)
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	echo "setting up $(VENV): the pinned requirements, then this project (editable)" >&2
	test -x $(PY) || $(PYTHON_BIN) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

# The tokenizer tests read every sentence of the embedded corpus, the catalog tests a few MB of
# real catalogs, the back-translation, lexicon and made-up-word tests WordNet, FreeDict, the
# English and Spanish word lists and Apertium: `data-bible` and `data-test` fetch them when
# missing (not the 2 GB of `data`). Apertium is installed with apt, as root; without it its
# tests skip.
# Then the CPU-dependent tests (pytest.ini's cpu_dependent marker) again with oneDNN's rewrite
# off: the Eigen kernels an AVX2-only CPU multiplies bfloat16 with (common/cpu.py), so every
# machine checks both kinds of CPU.
test: $(STAMP) data-bible data-test lint  ## ruff, then the suite but its large tests (make test-large runs those).
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not large" tests
	TF_ENABLE_ONEDNN_OPTS=0 $(PY) -m pytest -q -m cpu_dependent tests

# The tests marked large (tests/collection.py): end-to-end training runs, command-line exports,
# notebooks, CLIs' processes. CI runs them after `make test`.
test-large: $(STAMP) data-bible data-test browser  ## The large tests make test leaves out: trained runs, exports, notebooks, CLIs end to end (CI runs both).
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m large tests

# Debian's Chromium and its driver, for the translator page's browser test (tests/inference/
# test_web_browser.py), installed when missing and the user is root; elsewhere that test skips
# and says why.
browser:  ## Debian's chromium and chromium-driver (as root, when /usr/bin/chromedriver is missing).
	@if [ -x /usr/bin/chromedriver ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver; \
	else \
		echo "not root: the browser test skips (install chromium and chromium-driver to run it)"; \
	fi

# `make test` beside BUSY_PROCESSES processes that keep a core each busy, as a shared CI
# machine or a developer's other work does: the suite must not depend on an idle machine.
BUSY_PROCESSES ?= 2
test-under-load: $(STAMP)  ## make test beside BUSY_PROCESSES (2) busy processes, stopped when it ends.
	$(PY) -m tests.busy_processes $(BUSY_PROCESSES) -- $(MAKE) test

check-mutations: $(STAMP) data-bible data-test  ## Realistic bugs injected one at a time must each fail their tests (tests/mutations.py; not part of make test).
	$(PY) -m tests.mutations $(MUTATION_ARGS)

lint: $(STAMP)  ## The house style: ruff's lint and format checks (`ruff format .` fixes the latter).
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

data: data-bible data-catalogs data-catalogs-more data-catalog-fills data-catalog-fills-more data-wordnet-bt data-lexicon data-telephony  ## Every Spanish→English corpus: data/bible, data/catalogs, data/catalogs-more, data/catalog-fills, data/catalog-fills-more, data/wordnet-bt, data/lexicon, data/telephony (rebuilt only when missing).

data-bible: $(STAMP)  ## The embedded Bible corpus alone, data/bible.
	$(PY) -m training.prepare_data --out data/bible

data-catalogs: $(STAMP)  ## Debian's translated message catalogs, data/catalogs (downloads 1.2 GB into .debs/catalogs once).
	$(PY) -m training.prepare_data --corpus catalogs --out data/catalogs

data-catalogs-more: $(STAMP) data-catalogs  ## The catalogs of 44 more packages, apart from data/catalogs (downloads 0.6 GB into .debs/catalogs-more once).
	$(PY) -m training.prepare_data --corpus catalogs-more --out data/catalogs-more

data-catalog-fills: $(STAMP) data-catalogs  ## The messages data/catalogs drops for their placeholders, filled, apart from it, data/catalog-fills (the packages in .debs/catalogs; nothing more to download).
	$(PY) -m training.prepare_data --corpus catalog-fills --out data/catalog-fills

data-catalog-fills-more: $(STAMP) data-catalogs-more data-catalog-fills  ## The filled messages of the catalogs-more packages, apart from data/catalogs, data/catalogs-more and data/catalog-fills, data/catalog-fills-more (nothing more to download).
	$(PY) -m training.prepare_data --corpus catalog-fills-more --out data/catalog-fills-more

data-wordnet-bt: $(STAMP)  ## WordNet's usage examples back-translated by Apertium (installs apertium-en-es), data/wordnet-bt.
	$(PY) -m training.prepare_data --corpus wordnet-bt --out data/wordnet-bt

# Not part of `make data`: it needs an English→Spanish run of the user's, trained with
# `--reverse true` (docs/training.md, "Training the other direction"). Rebuilt when the run's
# weights or the decoding change; BACKTRANSLATION_ARGS="--beam_width 1" decodes greedily.
data-wordnet-bt-own: $(STAMP)  ## The same English as data-wordnet-bt, back-translated by BACKTRANSLATOR=RUN_DIR (a --reverse true run, e.g. runs/en-es), data/wordnet-bt-own.
	$(if $(BACKTRANSLATOR),,$(error BACKTRANSLATOR=RUN_DIR is needed: a run trained with --reverse true, e.g. runs/en-es))
	$(PY) -m training.prepare_data --corpus wordnet-bt-own --backtranslator $(BACKTRANSLATOR) \
		--out data/wordnet-bt-own $(BACKTRANSLATION_ARGS)

data-lexicon: $(STAMP)  ## FreeDict's and Apertium's word pairs, data/lexicon.
	$(PY) -m training.prepare_data --corpus lexicon --out data/lexicon

data-telephony: $(STAMP)  ## Asterisk's voice prompts (45 kB of packages), data/telephony: a domain to fine-tune the bundle to.
	$(PY) -m training.prepare_data --corpus telephony --out data/telephony

# The lexicon is small (a few seconds, 3 MB of packages): the tests' build is the real one.
data-test: $(STAMP)  ## What the tests read: a few MB of real catalogs (TEST_PACKAGES), WordNet, FreeDict, Asterisk's prompts, word lists, Apertium.
	$(PY) -m training.prepare_data --corpus catalogs --test_set --out data/catalogs-test
	$(PY) -m training.prepare_data --corpus wordnet-bt --limit 300 --out data/wordnet-bt-test \
		|| echo "wordnet-bt left out (Apertium: apt-get install apertium-en-es as root): its tests skip" >&2
	$(PY) -m training.prepare_data --corpus lexicon --out data/lexicon \
		|| echo "lexicon left out (Apertium: apt-get install apertium-en-es as root): its tests skip" >&2
	$(PY) -m training.prepare_data --corpus telephony --out data/telephony
	$(PY) -m training.made_up_words

train: $(STAMP)  ## make train PRESET=small DATA=bible (or DATA=path/to/pairs.tsv, DATA=tfds:NAME, DATA=bible:1,catalogs:3)
	$(PY) -m training.train --preset $(PRESET) --data $(DATA) --run_dir $(RUN_DIR) $(TRAIN_ARGS)

average: $(STAMP)  ## RUN_DIR/averaged/: mean of the last AVERAGE_LAST checkpoints; evaluate/export use it.
	$(PY) -m training.average --run_dir $(RUN_DIR) --last $(AVERAGE_LAST)

evaluate: $(STAMP)  ## BLEU/chrF of RUN_DIR (or of EXPORT_DIR=exports/translator/N) on its test split (EVAL_ARGS="--beam_width 4").
	$(PY) -m training.evaluate $(if $(EXPORT_DIR),--export_dir $(EXPORT_DIR),--run_dir $(RUN_DIR)) $(EVAL_ARGS)

export: $(STAMP)  ## exports/translator/<next version>/ from RUN_DIR (EXPORT_ARGS="--jit_compile": XLA greedy).
	$(PY) -m inference.export --run_dir $(RUN_DIR) --export_base $(EXPORT_BASE) --model_name $(MODEL_NAME) \
		$(EXPORT_ARGS)

# A run directory, a bundle or an export version; stdin and stdout unless INPUT=/OUTPUT= are given.
MODEL ?= $(PRETRAINED_DIR)
translate: $(STAMP)  ## make translate MODEL=pretrained/es-en < in.txt > out.txt (or INPUT=in.txt OUTPUT=out.txt; TRANSLATE_ARGS="--beam_width 4 --with_scores").
	@$(PY) -m inference.translate_text --model $(MODEL) $(if $(INPUT),--input_file $(INPUT)) \
		$(if $(OUTPUT),--output_file $(OUTPUT)) $(TRANSLATE_ARGS)

CT2_DIR ?= exports/ctranslate2
export-ctranslate2: $(STAMP)  ## RUN_DIR as a CTranslate2 model in CT2_DIR (CT2_ARGS="--quantization int8 --force").
	$(PY) -m inference.export_ctranslate2 --run_dir $(RUN_DIR) --output_dir $(CT2_DIR) $(CT2_ARGS)

serve: $(STAMP)  ## The real tensorflow_model_server when installed, else the local one; same flags (SERVE_ARGS="--xla_cpu_compilation_enabled=true" for --jit_compile exports).
	@if command -v tensorflow_model_server >/dev/null 2>&1; then \
		echo "serving with tensorflow_model_server"; tensorflow_model_server $(SERVER_FLAGS); \
	else \
		echo "tensorflow_model_server not found: serving with the local TF-Serving-compatible server"; \
		$(PY) -m serving.server $(SERVER_FLAGS); \
	fi

query: $(STAMP)  ## make query TEXT="..."
	$(PY) -m serving.client --server 127.0.0.1:$(PORT) --model_name $(MODEL_NAME) "$(TEXT)"

demo: $(STAMP)  ## The bundled pretrained model: export, server in the background, translations over gRPC.
	$(PY) -m inference.demo --port $(PORT)

demo-web: $(STAMP)  ## The translator page on the bundled model: export, server, page at http://127.0.0.1:$(WEB_PORT)/ until Ctrl+C.
	$(PY) -m inference.demo_web --port $(PORT) --rest_port $(REST_PORT) --web_port $(WEB_PORT)

demo-train: $(STAMP)  ## As demo, with a model trained on the spot (the demo preset, a few minutes).
	$(PY) -m inference.demo --port $(PORT) --train demo --run_dir runs/demo

# The bundled model (pretrained/es-en) is trained in two stages, each resumable (--resume: an
# interrupted stage goes on from its last checkpoint when the same command runs again).
#
# Stage 1 (make pretrained-base, about 2.5 hours on 2 cores at 1.2 s a step): from scratch on
# the Bible and Debian's message catalogs (data/catalogs) mixed half and half, one vocabulary of
# 8000 pieces learned on both (more would cost output-projection time on every step), 7500 steps,
# the last 5 checkpoints averaged, then the restoration of accents, capitals and names added to
# its tokenizer. This stage alone was the previous bundle, bible-catalogs-es-en.
PRETRAINED_BASE_RUN_DIR ?= runs/pretrained-bible-catalogs
PRETRAINED_BASE_DATA ?= bible:1,catalogs:1
PRETRAINED_BASE_STEPS ?= 7500
PRETRAINED_BASE_AVERAGE ?= 5
# Robust to how people type: lowercased all-caps sources, a third of the pairs noised as
# people type, 80% of the name and number slots refilled with unseen ones, 30% of those names with
# a figure (training.copying), and numbers and unknown names carried as placeholders
# (model.placeholders), 20% of the names written the same on both sides too.
ROBUSTNESS_TRAIN_ARGS := --source_noise 0.35 \
	--source_noise_kinds lowercase,strip_accents,no_final_punct,strip_accents+lowercase+no_final_punct,strip_diacritics+lowercase \
	--copy_substitution 0.8 --copy_figure_share 0.3 --placeholder_names 0.2
PRETRAINED_BASE_TRAIN_ARGS := --data $(PRETRAINED_BASE_DATA) --preset small --lr_scale 0.7 \
	--keep_checkpoints 8 --checkpoint_every 250 --train_steps $(PRETRAINED_BASE_STEPS) \
	--dev_bleu_sentences 100 --source_casing lower_all_caps --placeholders true \
	$(ROBUSTNESS_TRAIN_ARGS)
pretrained-base: $(STAMP) data-bible data-catalogs  ## Stage 1 of pretrained/es-en: the Bible and the catalogs from scratch (about 2.5 hours; rerun to resume).
	$(PY) -m training.train --run_dir $(PRETRAINED_BASE_RUN_DIR) --resume $(PRETRAINED_BASE_TRAIN_ARGS)
	$(PY) -m training.average --run_dir $(PRETRAINED_BASE_RUN_DIR) --last $(PRETRAINED_BASE_AVERAGE)
	$(PY) -m training.vocabulary --data $(PRETRAINED_BASE_DATA) \
		--out_dir $(PRETRAINED_BASE_RUN_DIR)/tokenizer --add_restoration

# Stage 2 (make pretrained, about 2.5 hours more): stage 1's weights and tokenizer trained on
# (--init_from) with the corpora made for everyday words mixed in: WordNet's usage examples
# back-translated by Apertium at half the Bible's weight, the lexicon at 0.15; 11,000 steps at 0.4
# of the schedule after 1,000 steps of warmup; the everyday dev set scored at every checkpoint,
# never trained on (docs/benchmark-log.md, Everyday Spanish). The last 4 checkpoints averaged,
# then the repair of made-up words added to its tokenizer (model.word_repair; Apertium's
# lexicon of the training sources' and Debian's Spanish words).
PRETRAINED_DIR ?= pretrained/es-en
PRETRAINED_RUN_DIR ?= runs/pretrained-es-en
PRETRAINED_DATA ?= bible:1,catalogs:1,wordnet-bt:0.5,lexicon:0.15
PRETRAINED_STEPS ?= 11000
PRETRAINED_AVERAGE ?= 4
# Decoding options of the bundle, chosen on the Bible's dev split for the Bible-only bundle
# (docs/benchmark-log.md, the bundle with placeholders) and kept.
PRETRAINED_ALPHA ?= 1.0
PRETRAINED_NO_REPEAT_NGRAM_SIZE ?= 3
PRETRAINED_TRAIN_ARGS := --init_from $(PRETRAINED_BASE_RUN_DIR) --data $(PRETRAINED_DATA) \
	--dev_data training/everyday --preset small --lr_scale 0.4 --warmup_steps 1000 \
	--keep_checkpoints 8 --checkpoint_every 500 --train_steps $(PRETRAINED_STEPS) \
	--dev_bleu_sentences 100 $(ROBUSTNESS_TRAIN_ARGS)
PRETRAINED_NOTES := Trained in two stages (make pretrained-base, then make pretrained). First \
	from scratch on the Bible corpus and Debian's translated message catalogs together (--data \
	$(PRETRAINED_BASE_DATA), training.mixture), one vocabulary learned on both, $(PRETRAINED_BASE_STEPS) \
	steps; then trained on from those weights (--init_from) to step $(PRETRAINED_STEPS) with \
	the corpora made for everyday words mixed in (--data $(PRETRAINED_DATA): WordNet's usage \
	examples back-translated by Apertium, and a Spanish-English lexicon; training/CORPUS.md), \
	the everyday dev set (training/everyday/dev.tsv) scored at every checkpoint and never \
	trained on. Both stages train to hold up on how people type: the Spanish side in modern \
	spelling (model.spelling), all-caps sources lowercased (--source_casing lower_all_caps), 35% of \
	the training pairs noised as people type (lowercased, accents stripped, final punctuation \
	dropped, and combinations), and 80% of the name and number slots refilled each epoch with \
	names and figures the corpora never hold, a figure in 30% of the refilled name slots \
	(--copy_substitution 0.8 --copy_figure_share 0.3, training.copying); numbers and capitalized \
	words its training sources never hold are carried through translation as placeholders, and \
	20% of the names a pair writes the same on both sides are trained as placeholders too \
	(--placeholders true --placeholder_names 0.2, model.placeholders). Decoding options chosen \
	on the Bible's dev split for the Bible-only bundle (docs/benchmark-log.md, the bundle with \
	placeholders) and kept: beam search's alpha \
	$(PRETRAINED_ALPHA) and no_repeat_ngram_size $(PRETRAINED_NO_REPEAT_NGRAM_SIZE) (CTranslate2's \
	semantics); pass --no_repeat_ngram_size 0 to training.evaluate or inference.export to decode \
	without it. Every decoder writes a placeholder at most as often as its source holds it \
	(model.decoding.copies, docs/benchmark-log.md, Placeholder limits; --limit_placeholders false: off). \
	Its source tokenizer restores accents and capitals (python -m training.vocabulary \
	--add_restoration, model.restoration: tables learned from the training sources put back the \
	accents of a source typed without them, and the capitals of one typed in lowercase; \
	docs/benchmark-log.md, Accents and capitals restored; in a source typed without any accent, \
	also the accents of words that are words either way, as se and sé, where their neighbours \
	in the sources call for them: docs/benchmark-log.md, Accents restored in context), and reads names typed in today's \
	spelling as the 1909 text writes them (Belén as Bethlehem; BENCHMARKS.md, Names in today's \
	spelling). Its greedy and beam translations repair made-up words (python -m \
	training.vocabulary --add_word_repair, model.word_repair): a word of the output that is no \
	English word and not copied from the source is replaced by Apertium's English of the source \
	word its attention points to, or by that word itself (--repair_words false: off).
pretrained: pretrained-base data-wordnet-bt data-lexicon  ## Reproduce pretrained/es-en: stage 1 (pretrained-base), then stage 2 (about 5 hours in all on 2 cores; rerun to resume).
	$(PY) -m training.train --run_dir $(PRETRAINED_RUN_DIR) --resume $(PRETRAINED_TRAIN_ARGS)
	$(PY) -m training.average --run_dir $(PRETRAINED_RUN_DIR) --last $(PRETRAINED_AVERAGE)
	$(PY) -m training.vocabulary --data $(PRETRAINED_DATA) --out_dir $(PRETRAINED_RUN_DIR)/tokenizer \
		--add_word_repair
	$(PY) -m training.bundle --run_dir $(PRETRAINED_RUN_DIR) --output_dir $(PRETRAINED_DIR) \
		--alpha $(PRETRAINED_ALPHA) --no_repeat_ngram_size $(PRETRAINED_NO_REPEAT_NGRAM_SIZE) \
		--notes "$(PRETRAINED_NOTES)" --reproduce "make pretrained"

notebooks: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

bench-train: $(STAMP)  ## Our input pipeline vs the tutorial's; then the XLA and bfloat16 training steps.
	$(PY) -m benchmarks.bench_train --output BENCHMARKS.md
	$(PY) -m benchmarks.bench_train --variants --steps 15 --rounds 4 --output BENCHMARKS.md

bench-sweep: $(STAMP) data-bible  ## Training recipes at equal time budgets (SWEEP_ARGS="--minutes 10 --cpus 1"), hours.
	$(PY) -m benchmarks.sweep_recipe --output BENCHMARKS.md $(SWEEP_ARGS)

bench-tokenizer: $(STAMP) data-bible  ## Vocabulary learning time, in-graph throughput, losslessness.
	$(PY) -m benchmarks.bench_tokenizer --output BENCHMARKS.md

# The bundled model unless RUN_DIR is given on the command line (ROBUSTNESS_ARGS="--beam_width 4").
ROBUSTNESS_RUN_DIR := $(if $(filter command line,$(origin RUN_DIR)),$(RUN_DIR),$(PRETRAINED_DIR))
bench-robustness: $(STAMP) data-bible data-catalogs  ## Test BLEU, chrF, looping share under each typing perturbation (training.evaluate --perturb all).
	$(PY) -m benchmarks.bench_robustness --run_dir $(ROBUSTNESS_RUN_DIR) --output BENCHMARKS.md $(ROBUSTNESS_ARGS)

EVERYDAY_RUN_DIR ?= $(PRETRAINED_DIR)
bench-everyday: $(STAMP) data-bible data-catalogs  ## Everyday sentences (training/everyday, EVERYDAY_ARGS="--split dev" to choose): BLEU, chrF, made-up words, time, greedy and beam 4 beside Apertium; EVERYDAY_RUN_DIR=runs/x.
	$(PY) -m benchmarks.bench_everyday --run_dir $(EVERYDAY_RUN_DIR) --output BENCHMARKS.md $(EVERYDAY_ARGS)

# A quick size by default; the million-line file (hours):
# TRANSLATE_BENCH_ARGS="--lines 1000000 --small_lines 100000 --window_lines 10000".
bench-translate: $(STAMP) data-bible  ## translate-text on large generated files with the bundled model (sentences/s, peak RSS at two sizes, memory plot in docs/), then beside CTranslate2 float32/int8 on the same weights and Apertium, and where one call's time goes
	$(PY) -m benchmarks.bench_translate --output BENCHMARKS.md --plot docs/translate_memory.png $(TRANSLATE_BENCH_ARGS)
	$(PY) -m benchmarks.bench_translate --peers --output BENCHMARKS.md $(TRANSLATE_PEERS_ARGS)
	$(PY) -m benchmarks.profile_translate_call --peer_lines 2000 --output BENCHMARKS.md

# BASELINE=DIR adds another checkout of the project (git worktree add DIR COMMIT), interleaved.
bench-cold-start: $(STAMP)  ## translate-text's first translation from a cold start, with a breakdown (import, load, first call), greedy and beam 4, its first start (tracing and keeping the translation path) apart.
	$(PY) -m benchmarks.bench_cold_start --output BENCHMARKS.md $(if $(BASELINE),--baseline_root $(BASELINE)) $(COLD_START_ARGS)

# About 10 minutes by default (SOAK_ARGS="--duration 60" for a short one); the bundled model,
# exported once into exports/soak/translator.
bench-soak: $(STAMP)  ## Soak and chaos: good and hostile traffic, a roll-out, a reload storm, kill -9 and restart; plot in docs/.
	$(PY) -m benchmarks.bench_soak --output BENCHMARKS.md --plot docs/serving_soak.png $(SOAK_ARGS)

# Opt-in, not part of make test: needs Debian's prometheus package and an export (make export).
check-prometheus: $(STAMP)  ## A real Prometheus (apt-get install prometheus) scrapes the local server's metrics.
	$(PY) -m benchmarks.check_prometheus --model_base_path $(EXPORT_BASE)/$(MODEL_NAME)

bench-decode: $(STAMP)  ## Decoders side by side with CTranslate2 on the same weights; then ms per sentence against output and source length (plot in docs/).
	$(PY) -m benchmarks.bench_decode --output BENCHMARKS.md
	$(PY) -m benchmarks.bench_length --output BENCHMARKS.md

bench-profile: $(STAMP)  ## Op profiles of the served beam_search: plain graph at batch 32, --jit_compile at batch 1 (where a step's time goes).
	$(PY) -m benchmarks.profile_decode --output BENCHMARKS.md
	$(PY) -m benchmarks.profile_decode --batch 1 --jit_compile --output BENCHMARKS.md

bench-serve: $(STAMP)  ## Serving throughput/latency at default TF threads (and RUN_DIR's --jit_compile export after load), REST under 1,000 idle + 200 slowloris + 200 slow-body + 20 CRLF-flood connections, then with one intra-op thread.
	$(PY) -m benchmarks.bench_serve --model_base_path $(EXPORT_BASE)/$(MODEL_NAME) \
		--xla_run_dir $(RUN_DIR) --output BENCHMARKS.md
	$(PY) -m benchmarks.bench_serve --model_base_path $(EXPORT_BASE)/$(MODEL_NAME) \
		--concurrency 1 32 --soak_requests 1000 --adversarial_idle 0 --adversarial_slowloris 0 \
		--adversarial_slow_body 0 --adversarial_crlf_flood 0 \
		--server_flags=--tensorflow_intra_op_parallelism=1 \
		--section 'Serving, one TensorFlow intra-op thread' --output BENCHMARKS.md

clean-venv:
	rm -rf $(VENV)
