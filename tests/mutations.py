"""Keeps the suite honest: realistic bugs, each injected into a copy of the repository, must make
the tests that guard that code fail (`make check-mutations`; not part of `make test`).

    .venv/bin/python -m tests.mutations                 # every mutation
    .venv/bin/python -m tests.mutations --only beam     # those whose name contains "beam"
    .venv/bin/python -m tests.mutations --list

Each `Mutation` replaces one snippet of one file (the snippet must occur exactly once, so a
mutation whose code has moved is reported as stale, not silently skipped) and names the pytest
selection that should catch it. The repository's tracked files are copied once into a temporary
directory; each mutation is applied there, its tests are run in a fresh process with that copy
first on the import path, and the file is restored. Outcomes:

    killed    the tests failed (pytest exit code 1): the suite catches the bug
    survived  the tests passed: a bug the suite lets through
    stale     the snippet is not in the file (update the mutation)
    error     pytest could not run the tests (collection error, no test selected, timeout)

The exit code is 0 only when every mutation is killed.
"""

import argparse
import dataclasses
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# A mutation's tests must fail well within this; a hang counts as an error, not a kill.
TIMEOUT_SECONDS = 900


@dataclasses.dataclass(frozen=True)
class Mutation:
    """One realistic bug: `original` replaced by `mutated` in `path`, caught by `tests`
    (pytest arguments: files, node ids, `-k` expressions)."""

    name: str
    path: str
    original: str
    mutated: str
    tests: tuple


MUTATIONS = (
    Mutation(
        "beam search continues the first beam_width origins, not the alive beams' parents",
        "model/decoding/beam.py",
        "parents = _gather_beams(top_origins, alive_choice)",
        "parents = top_origins[:, :beam_width]",
        ("tests/model/decoding", "-k", "narrow or own_prefix"),
    ),
    Mutation(
        "beam search's finished scores without the length penalty",
        "model/decoding/beam.py",
        "new_scores = top_log_probs / length_penalty(step + 1, alpha)",
        "new_scores = top_log_probs",
        ("tests/model/decoding", "-k", "exhaustive or narrow"),
    ),
    Mutation(
        "beam search under XLA keeps each beam's cache instead of its parent's",
        "model/decoding/beam.py",
        "step_state=reorder_state(step_state, parent_rows),",
        "step_state=step_state if positions.compiled else reorder_state(step_state, parent_rows),",
        ("tests/model/decoding", "-k", "xla_compiled_beam and 5-20"),
    ),
    Mutation(
        "fixed-shape beam search feeds the end of each hypothesis's buffer, not its last token",
        "model/decoding/beam.py",
        "last_ids=tf.reshape(alive_seq[:, :, step], [-1]),",
        "last_ids=tf.reshape(alive_seq[:, :, -1], [-1]),",
        ("tests/model/decoding", "-k", "fixed_shape_beam"),
    ),
    Mutation(
        "GNMT length penalty with 5 in the denominator",
        "model/decoding/common.py",
        "return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)",
        "return tf.pow((5.0 + tf.cast(length, tf.float32)) / 5.0, alpha)",
        ("tests/model/decoding", "-k", "length_penalty"),
    ),
    Mutation(
        "greedy decoding keeps finished rows and drops the others",
        "model/decoding/greedy.py",
        "lambda: take_rows(alive, tf.where(tf.logical_not(finished))[:, 0]),",
        "lambda: take_rows(alive, tf.where(finished)[:, 0]),",
        ("tests/model/decoding", "-k", "greedy_search_follows or naive"),
    ),
    Mutation(
        "only the served greedy signature cuts sources one token shorter than the model allows",
        "model/translator.py",
        "        source_ids, decoded = self._greedy_decode(text)\n        return {",
        "        source_ids = truncate_source_ids(\n"
        "            self.source_tokenizer.tokenize(text), self.model.pe_input - 1\n"
        "        )\n"
        "        decoded = self._decode(\n"
        "            GreedySearch(), source_ids, with_alignment=self._repairs_words, **self._xla\n"
        "        )\n"
        "        return {",
        ("tests/inference/test_export.py", "-k", "long_input"),
    ),
    Mutation(
        "the decoding flags of a command that reads decoding.json parse the defaults in its place",
        "training/decoding_flags.py",
        "default = field_default(name) if defaults == FIELD_DEFAULTS else None",
        "default = field_default(name) if defaults != RUN_OR_EXPORT_DEFAULTS else None",
        ("tests/training/test_decoding_flags.py",),
    ),
    Mutation(
        "the repetition penalty multiplies positive logits (rewarding repeats)",
        "model/decoding/penalties.py",
        "tf.where(logits < 0, logits * repetition_penalty, logits / repetition_penalty)",
        "logits * repetition_penalty",
        ("tests/model/decoding", "-k", "repetition_penalty"),
    ),
    Mutation(
        "repeated n-grams banned one token too early (the context is the last n tokens)",
        "model/decoding/penalties.py",
        "    context = ngram_size - 1\n",
        "    context = ngram_size\n",
        ("tests/model/decoding", "-k", "banned_ngrams"),
    ),
    Mutation(
        "REST: a base64 value that does not decode answers INTERNAL (HTTP 500)",
        "serving/model_server/json_tensor.py",
        'raise errors.invalid_argument("Unable to base64 decode")',
        'raise errors.internal("Unable to base64 decode")',
        ("tests/serving/model_server/test_json_tensor.py", "-k", "json_tensor_errors"),
    ),
    Mutation(
        "REST: empty lines before a request line escape the head limit (a CRLF flood is read forever)",
        "serving/model_server/http_server.py",
        "if skipped + head_end > MAX_REQUEST_HEAD_BYTES:",
        "if 0 * skipped + head_end > MAX_REQUEST_HEAD_BYTES:",
        ("tests/serving/model_server/test_http_server.py", "-k", "empty_lines"),
    ),
    Mutation(
        "REST: `100 Continue` invites a body before the size limit refuses it",
        "serving/model_server/http_server.py",
        "        if length > limit:\n"
        "            raise _too_large(limit, str(length))\n"
        "        if length:\n"
        "            self._continue()\n",
        "        if length:\n"
        "            self._continue()\n"
        "        if length > limit:\n"
        "            raise _too_large(limit, str(length))\n",
        ("tests/serving/model_server/test_http_server.py", "-k", "expect_100"),
    ),
    Mutation(
        "REST: one body may take the whole memory budget (no fair share)",
        "serving/model_server/http_server.py",
        "most=budget.limit_bytes // FAIR_SHARE_OF_BUDGET",
        "most=0",
        ("tests/serving/model_server/test_http_server.py", "-k", "fair_share"),
    ),
    Mutation(
        "the free-memory guard reads the host's available memory, not what the cgroup leaves",
        "serving/model_server/memory_budget.py",
        "available = min(available, max(limit - usage, 0))",
        "available = max(available, 0)",
        ("tests/serving/model_server/test_server_limits.py", "-k", "follow_the_cgroup_limit"),
    ),
    Mutation(
        "the free-memory guard reads the cgroup and the host, not the address-space limit",
        "serving/model_server/memory_budget.py",
        "        available = min(available, address_space)\n",
        "        available = available\n",
        ("tests/serving/model_server/test_server_limits.py", "-k", "address_space_limit"),
    ),
    Mutation(
        "the default memory budget ignores the address-space limit",
        "serving/model_server/memory_budget.py",
        "budget = min(budget, address_space // _DEFAULT_BUDGET_SHARE_OF_LIMIT)",
        "budget = min(budget, DEFAULT_BUDGET_BYTES)",
        ("tests/serving/model_server/test_server_limits.py", "-k", "address_space_limit"),
    ),
    Mutation(
        "REST: a JSON body's values are counted by its bytes, not its items (14.3 MiB of [] parsed)",
        "serving/model_server/json_tensor.py",
        "return items * JSON_ITEM_BYTES + len(body) * _JSON_BYTES_PER_TEXT_BYTE",
        "return len(body) * _JSON_BYTES_PER_TEXT_BYTE",
        ("tests/serving/model_server/test_server_memory_limit.py", "-k", "address_space"),
    ),
    Mutation(
        "the budget counts a padded string tensor's first values only",
        "serving/model_server/tensors.py",
        "payload += (num_elements - count) * len(values[count - 1])",
        "payload += 0",
        ("tests/serving/model_server/test_server_limits.py", "-k", "counted_from_its_proto"),
    ),
    Mutation(
        "an error quotes a client's model name whole (16 KiB: RESOURCE_EXHAUSTED, not NOT_FOUND)",
        "serving/model_server/errors.py",
        "if len(text) <= MAX_QUOTED_CHARS:",
        "if True:",
        ("tests/serving/model_server/test_grpc_service.py", "-k", "unknown_name_of_any_length"),
    ),
    Mutation(
        "REST: a duplicate JSON key keeps its last value (TF Serving keeps the first)",
        "serving/model_server/json_tensor.py",
        "members.setdefault(key, value)",
        "members[key] = value",
        ("tests/serving/model_server/test_rest_api.py", "-k", "duplicate_json"),
    ),
    Mutation(
        "REST: no minimum body rate (a body trickling a byte at a time holds its connection)",
        "serving/model_server/http_server.py",
        "self._received / MIN_BODY_BYTES_PER_SECOND",
        "self._received / MIN_BODY_BYTES_PER_SECOND + 3600",
        ("tests/serving/model_server/test_http_server.py", "-k", "minimum_rate"),
    ),
    Mutation(
        "REST: chunked trailers are read without a bound",
        "serving/model_server/http_server.py",
        "budget -= len(line) + 2",
        "budget -= 0",
        ("tests/serving/model_server/test_http_server.py", "-k", "trailers"),
    ),
    Mutation(
        "attention without the 1/sqrt(d_k) scaling",
        "model/attention.py",
        "scaled_q = q * tf.math.rsqrt(depth)",
        "scaled_q = q",
        ("tests/model/test_attention.py",),
    ),
    Mutation(
        "look-ahead mask that hides the past instead of the future",
        "model/masks.py",
        "return 1.0 - tf.linalg.band_part(tf.ones((size, size)), -1, 0)",
        "return 1.0 - tf.linalg.band_part(tf.ones((size, size)), 0, -1)",
        ("tests/model/test_masks.py",),
    ),
    Mutation(
        "positional encoding with sin and cos swapped",
        "model/positional_encoding.py",
        "np.where(np.arange(d_model) % 2 == 0, np.sin(angles), np.cos(angles))",
        "np.where(np.arange(d_model) % 2 == 0, np.cos(angles), np.sin(angles))",
        ("tests/model/test_positional_encoding.py",),
    ),
    Mutation(
        "warmup schedule rising with warmup_steps^-0.5",
        "training/schedule.py",
        "rise = step_num * warmup**-1.5",
        "rise = step_num * warmup**-0.5",
        ("tests/training/test_schedule.py",),
    ),
    Mutation(
        "loss averaged over every position, pads included",
        "training/losses.py",
        "return tf.reduce_sum(token_loss) / tf.maximum(tf.reduce_sum(mask), 1.0)",
        "return tf.reduce_mean(token_loss)",
        ("tests/training/test_losses.py",),
    ),
    Mutation(
        "beam search's cache reorder ignores the parents",
        "model/decoder.py",
        "layer.name: layer.reorder_cache(cache[layer.name], indices) for layer in self.dec_layers",
        "layer.name: cache[layer.name] for layer in self.dec_layers",
        (
            "tests/model/test_transformer.py",
            "tests/model/decoding",
            "-k",
            "reorder or beam",
        ),
    ),
    Mutation(
        "checkpoint averaging divides by one checkpoint too many",
        "training/average.py",
        "weight.assign((total / len(checkpoint_paths)).astype(weight.dtype))",
        "weight.assign((total / (len(checkpoint_paths) + 1)).astype(weight.dtype))",
        ("tests/training/test_average.py",),
    ),
    Mutation(
        "the sampler's noise ignores the step: a row draws alike at every step",
        "model/decoding/sampling.py",
        "row_codes = triple32(xor(tf.bitcast(tf.cast(seeds, tf.int32), tf.uint32), step_code))",
        "row_codes = triple32(tf.bitcast(tf.cast(seeds, tf.int32), tf.uint32))",
        ("tests/model/decoding", "-k", "independent"),
    ),
    Mutation(
        "the sampler adds the step to the seed: seed s + 1 draws as seed s a step later",
        "model/decoding/sampling.py",
        "row_codes = triple32(xor(tf.bitcast(tf.cast(seeds, tf.int32), tf.uint32), step_code))",
        "row_codes = triple32(tf.bitcast(tf.cast(seeds, tf.int32), tf.uint32) + tf.cast(step, tf.uint32))",
        ("tests/model/decoding", "-k", "independent"),
    ),
    Mutation(
        "TSV lines with more than one tab accepted",
        "training/corpus/tsv.py",
        "if len(fields) > 2:",
        "if len(fields) > 3:",
        ("tests/training/corpus/test_tsv.py",),
    ),
    Mutation(
        "a placeholder allowed once more than its source holds it",
        "model/decoding/copies.py",
        "written >= tf.gather(self.counts, rows)",
        "written > tf.gather(self.counts, rows)",
        ("tests/model/decoding", "-k", "placeholder"),
    ),
    Mutation(
        "a bare form that is itself a word accented anyway",
        "model/restoration.py",
        "if bare != word and bare not in counts:",
        "if bare != word:",
        ("tests/model/test_restoration.py",),
    ),
    Mutation(
        "capitals put back on a source its writer cased",
        "model/restoration.py",
        "return tf.where(lowercase_only, restored, texts)",
        "return restored",
        ("tests/model/test_restoration.py",),
    ),
    Mutation(
        "an accent in context kept without a clear majority there",
        "model/restoration.py",
        "return (form, fractions.Fraction(count, total)) if count >= min_share * total else None",
        "return (form, fractions.Fraction(count, total))",
        ("tests/model/test_restoration.py", "-k", "context_accent_table"),
    ),
    Mutation(
        "an accent in context kept on a single occurrence",
        "model/restoration.py",
        "    if total < min_count:\n        return None\n",
        "",
        ("tests/model/test_restoration.py", "-k", "clear_majorities"),
    ),
    Mutation(
        "the context table drops the entries that keep a bare form (a wider context accents it)",
        "model/restoration.py",
        "            keep = form != context_lookup(below, previous, bare, following)\n",
        "            keep = form != bare\n",
        ("tests/model/test_restoration.py", "-k", "backing_off"),
    ),
    Mutation(
        "the context table drops the next word's entries of the word alone's form",
        "model/restoration.py",
        'keep = form != alone(bare) or share > lowest[(bare, "previous")]',
        "keep = form != alone(bare)",
        ("tests/model/test_restoration.py", "-k", "backing_off"),
    ),
    Mutation(
        "the context table keeps a previous word's entry of the word alone's form only where it "
        "outweighs, not ties, a next word's",
        "model/restoration.py",
        'share >= lowest[(bare, "next")]',
        'share > lowest[(bare, "next")]',
        ("tests/model/test_restoration.py", "-k", "backing_off"),
    ),
    Mutation(
        "the context table's reading gives a tie of the one-sided entries to the next word",
        "model/restoration.py",
        "return (before if before[1] >= after[1] else after)[0]",
        "return (before if before[1] > after[1] else after)[0]",
        ("tests/model/test_restoration.py", "-k", "backing_off"),
    ),
    Mutation(
        "a neighbour in context across punctuation is the word beyond it",
        "model/restoration.py",
        'tf.where(tf.not_equal(between, ""), character, tf.where(room < 2, edge, beside)),',
        "tf.where(room < 2, edge, beside),",
        ("tests/model/test_restoration.py", "-k", "random_rows"),
    ),
    Mutation(
        "the context's one-sided entries read before the two-sided ones",
        "model/restoration.py",
        "        both[0],\n        both[1],\n"
        "        tf.where(before[0] | after[0], one_sided, tf.where(alone[0], alone[1], lowered)),\n",
        "        before[0] | after[0],\n        one_sided,\n"
        "        tf.where(both[0], both[1], tf.where(alone[0], alone[1], lowered)),\n",
        ("tests/model/test_restoration.py", "-k", "random_rows"),
    ),
    Mutation(
        "the context's previous word read before the next word whatever their shares",
        "model/restoration.py",
        "after_wins = after[0] & tf.logical_not(before[0] & (before[2] >= after[2]))",
        "after_wins = after[0] & tf.logical_not(before[0])",
        ("tests/model/test_restoration.py", "-k", "random_rows"),
    ),
    Mutation(
        "the context's tie of the one-sided entries goes to the next word in the graph",
        "model/restoration.py",
        "after_wins = after[0] & tf.logical_not(before[0] & (before[2] >= after[2]))",
        "after_wins = after[0] & tf.logical_not(before[0] & (before[2] > after[2]))",
        ("tests/model/test_restoration.py", "-k", "random_rows"),
    ),
    Mutation(
        "the context table's shares not read back from its file",
        "model/restoration.py",
        "(row[3], fractions.Fraction(row[4]))",
        "(row[3], fractions.Fraction(1))",
        ("tests/model/test_restoration.py", "-k", "without_the_context_table"),
    ),
    Mutation(
        "accents put in context on a source its writer typed with accents",
        "model/restoration.py",
        "found &= is_word & tf.gather(unaccented, rows) & tf.not_equal(value, lowered)",
        "found &= is_word & tf.not_equal(value, lowered)",
        ("tests/model/test_restoration.py", "-k", "accented_rows_alone"),
    ),
    Mutation(
        "a word accented in context loses its typed case",
        "model/restoration.py",
        "    recased = _in_typed_case(typed, tf.equal(typed, lowered), value)\n",
        "    recased = value\n",
        ("tests/model/test_restoration.py", "-k", "typed_case"),
    ),
    Mutation(
        "a tokenizer directory without the context table cannot be loaded",
        "model/restoration.py",
        "read_context_table(contexts) if accents and os.path.exists(contexts) else None,",
        "read_context_table(contexts) if accents else None,",
        ("tests/model/test_restoration.py", "-k", "without_the_context_table"),
    ),
    Mutation(
        "the vocabularies' restoration leaves the context table out",
        "training/vocabulary.py",
        "            os.path.join(directory, ACCENT_CONTEXTS_FILE), context_accent_table(sources)",
        "            os.path.join(directory, ACCENT_CONTEXTS_FILE), {}",
        ("tests/model/test_restoration.py", "-k", "carry_the_tables"),
    ),
    Mutation(
        "the XLA warmup buckets ignore the output slots a source length gives",
        "model/decoding/xla.py",
        "            int(xla_slots(max_decoding_length(length))),\n",
        "            0,\n",
        ("tests/model/decoding", "-k", "xla_buckets"),
    ),
    Mutation(
        "a --jit_compile export warms every bucket with one sentence, not the bucket's batch",
        "inference/export.py",
        "requests.extend((name, [texts[length]] * batch_size) for batch_size, length in buckets)",
        "requests.extend((name, [texts[length]]) for batch_size, length in buckets)",
        ("tests/inference/test_export_xla.py", "-k", "other_bounds"),
    ),
    Mutation(
        "a --jit_compile export's warmup leaves out a bucket (the first: batch 1, shortest sources)",
        "inference/export.py",
        "sorted(translator.xla_buckets(max_batch, max_source_tokens).values()) if compiled else []",
        "sorted(translator.xla_buckets(max_batch, max_source_tokens).values())[1:] if compiled else []",
        ("tests/inference/test_export_xla.py", "-k", "compiles_nothing"),
    ),
    Mutation(
        "the signature registry says --jit_compile compiles sample, which the Translator runs plain",
        "common/serving_contract.py",
        "        options=LOOP_OPTIONS + REPETITION_OPTIONS + SAMPLING_OPTIONS,\n",
        "        options=LOOP_OPTIONS + REPETITION_OPTIONS + SAMPLING_OPTIONS,\n"
        "        jit_compiled=True,\n",
        ("tests/common/test_serving_contract.py",),
    ),
    Mutation(
        "the signature registry gives the score output a dtype the export does not serve",
        "common/serving_contract.py",
        '            SCORE_OUTPUT,\n            "float32",\n',
        '            SCORE_OUTPUT,\n            "float64",\n',
        ("tests/inference/test_export.py", "-k", "registry_records"),
    ),
    Mutation(
        "a run given restoration after training cannot resume (make pretrained run again)",
        "training/vocabulary.py",
        "    added = [name for name in ADDED_AFTER_TRAINING if existing.get(name) and name not in config]",
        "    added = []",
        ("tests/training/test_train.py", "-k", "restoration_after"),
    ),
    Mutation(
        "the catalogs corpus keeps es_AR's voseo when it comes first",
        "training/corpus/catalogs.py",
        "        if locale_rank(message.locale) < locale_rank(current.locale):",
        "        if False:",
        ("tests/training/corpus/test_catalogs.py", "-k", "voseo"),
    ),
    Mutation(
        "the catalogs corpus splits by the English as written, not its near-duplicate key",
        "training/corpus/catalogs.py",
        "            kept.append((key, pair))\n",
        "            kept.append((pair[1], pair))\n",
        ("tests/training/corpus/test_catalogs.py", "-k", "near_duplicate"),
    ),
    Mutation(
        "catalog pairs with Wesnoth's $name| placeholders are kept",
        "training/corpus/catalog_cleaning.py",
        'r"|\\$\\w+"',
        'r"|\\$\\d+"',
        ("tests/training/corpus/test_catalogs.py", "-k", "placeholders"),
    ),
    Mutation(
        "the model server runs an unbatched request whole, not in pieces (a deadline cannot stop it)",
        "serving/model_server/predict.py",
        "    if max_rows_per_run <= 0 or rows <= max_rows_per_run:",
        "    if True:",
        ("tests/serving/model_server/test_server_limits.py", "-k", "pieces"),
    ),
    Mutation(
        "the model server runs a request's next piece after its caller has gone",
        "serving/model_server/predict.py",
        "        if caller_gone is not None and caller_gone.is_set():",
        "        if False:",
        ("tests/serving/model_server/test_server_limits.py", "-k", "caller_has_gone"),
    ),
    Mutation(
        "the model server feeds a tensor of any shape (rank 33 crashes the process)",
        "serving/model_server/tensors.py",
        "    sizes = [dim.size for dim in proto.tensor_shape.dim]",
        "    return",
        ("tests/serving/model_server/test_server_limits.py", "-k", "refused_before_any_run"),
    ),
    Mutation(
        "the model server reads a version directory beyond int64 as a version",
        "serving/model_server/manager.py",
        "    return version if version <= MAX_VERSION else None",
        "    return version",
        ("tests/serving/model_server/test_server_limits.py", "-k", "as_tf_serving_reads_them"),
    ),
    Mutation(
        "a benchmark's section ends at any heading, leaving its own subsections on the page",
        "benchmarks/report.py",
        'following = re.compile(rf"^#{{1,{level}}} ", re.M)',
        'following = re.compile(r"^#+ ", re.M)',
        ("tests/benchmarks/test_report.py", "-k", "write_section"),
    ),
    Mutation(
        "a benchmark's new section goes at the end of the results page, not in its area",
        "benchmarks/report.py",
        "        if area_match:\n",
        "        if False:\n",
        ("tests/benchmarks/test_report.py", "-k", "write_section"),
    ),
    Mutation(
        "a word copied from the source counts as made up",
        "training/made_up_words.py",
        "            if _fold(word) not in copied and not self.is_known(word)\n",
        "            if not self.is_known(word)\n",
        ("tests/training/test_made_up_words.py",),
    ),
    Mutation(
        "Apertium's segments joined by a newline alone, which its rules reorder words across",
        "training/corpus/apertium.py",
        '_SEGMENT_SEPARATOR = "\\n\\n"\n',
        '_SEGMENT_SEPARATOR = "\\n"\n',
        ("tests/training/corpus/test_apertium.py",),
    ),
    Mutation(
        "a back-translated pair keeps Apertium's unknown-word marks",
        "training/corpus/backtranslation.py",
        "        if source and not apertium.has_unknown_marks(source)\n",
        "        if source\n",
        ("tests/training/corpus/test_backtranslation.py", "-k", "builds_offline"),
    ),
    Mutation(
        "catalogs-more keeps the English of the catalogs corpus",
        "training/corpus/catalogs.py",
        "    keyed_pairs = remove_duplicates(yields, seen)\n",
        "    keyed_pairs = remove_duplicates(yields)\n",
        ("tests/training/corpus/test_catalogs.py", "-k", "apart_from_another"),
    ),
    Mutation(
        "a REST body may take as long as its length allows at the minimum rate",
        "serving/model_server/http_server.py",
        "        remaining = min(rate_deadline, body_deadline) - loop.time()\n",
        "        remaining = rate_deadline - loop.time()\n",
        ("tests/serving/model_server/test_http_server.py", "-k", "body_deadline"),
    ),
    Mutation(
        "a made-up word's possessive ending is not taken off before the English lookup",
        "model/word_repair.py",
        '        bare = tf.strings.regex_replace(keys, _POSSESSIVE, "")\n',
        "        bare = keys\n",
        ("tests/model/test_word_repair.py", "-k", "evaluation_counts"),
    ),
    Mutation(
        "a made-up word is replaced from the source word its attention points to least",
        "model/word_repair.py",
        "        strongest = tf.argmax(word_alignment, axis=2, output_type=tf.int32)\n",
        "        strongest = tf.argmin(word_alignment, axis=2, output_type=tf.int32)\n",
        ("tests/model/test_word_repair.py", "-k", "aligned_source_word"),
    ),
    Mutation(
        "a name (capitalized where its source does not start) is translated, not copied",
        "model/word_repair.py",
        '        return tf.where(name | tf.equal(translated, ""), source_words, translated)\n',
        '        return tf.where(tf.equal(translated, ""), source_words, translated)\n',
        ("tests/model/test_word_repair.py", "-k", "aligned_source_word"),
    ),
    Mutation(
        "Apertium's subject of a lone verb is kept in the lexicon",
        "training/word_repair_tables.py",
        "    if len(parts) > 1 and parts[0].lower() in _SUBJECTS:\n",
        "    if False:\n",
        ("tests/model/test_word_repair.py", "-k", "lone_word"),
    ),
    Mutation(
        "a made-up word's attention on [START] and [END] counts in choosing its source word",
        "model/word_repair.py",
        '        word_alignment = tf.einsum("btw,bts->bws", membership, alignment) * on_pieces\n',
        '        word_alignment = tf.einsum("btw,bts->bws", membership, alignment)\n',
        ("tests/model/test_word_repair.py", "-k", "aligned_source_word"),
    ),
    Mutation(
        "a corpus of one-word references counts in the mean dev BLEU that picks the best",
        "training/dev_bleu.py",
        "    return long_enough >= MIN_SHARE_OF_LONG_REFERENCES * len(pairs)\n",
        "    return True\n",
        ("tests/training/test_dev_bleu.py", "-k", "corpus_of_words"),
    ),
    Mutation(
        "the fine-tuning watch leaves out the corpora the base was only scored on",
        "training/fine_tuning.py",
        '        watched += parse_data(base_config["dev_data"])\n',
        "        pass\n",
        ("tests/training/test_fine_tuning_defaults.py", "-k", "scored_on"),
    ),
    Mutation(
        "the word repair's share of a call is the whole call, not the difference",
        "benchmarks/profile_translate_call.py",
        '        ("the word repair (whole − repair off)", whole - no_repair),\n',
        '        ("the word repair (whole − repair off)", whole),\n',
        ("tests/benchmarks/test_profile_translate_call.py", "-m", "large"),
    ),
    Mutation(
        "a telephony prompt in brackets (what is not said) is kept as a pair",
        "training/corpus/telephony.py",
        "            if match and match.group(2) and not _NOT_SAID.search(match.group(2)):\n",
        "            if match and match.group(2):\n",
        ("tests/training/corpus/test_telephony.py", "-k", "not_said"),
    ),
    Mutation(
        "telephony pairs matched by position, not by prompt name",
        "training/corpus/telephony.py",
        "    return [(text, english[name]) for name, text in spanish.items() if name in english]\n",
        "    return list(zip(spanish.values(), english.values()))\n",
        ("tests/training/corpus/test_telephony.py", "-k", "same_prompt"),
    ),
    Mutation(
        "a source word said twice counts as said once its English is there once",
        "model/word_repair.py",
        '        return (in_translation >= in_source) & tf.not_equal(english, "")\n',
        '        return (in_translation >= 1) & tf.not_equal(english, "")\n',
        ("tests/model/test_word_repair.py", "-k", "said_twice"),
    ),
    Mutation(
        "a made-up word takes the English of a source word the translation already says",
        "model/word_repair.py",
        "            unsaid_alignment,\n",
        "            word_alignment,\n",
        ("tests/model/test_word_repair.py", "-k", "already_says"),
    ),
    Mutation(
        "a REST body is given back to the budget at its 504, while its run still holds it",
        "serving/model_server/http_server.py",
        "            answer.add_done_callback(lambda _: held_by_the_handler.close())\n",
        "            held_by_the_handler.close()\n",
        ("tests/serving/model_server/test_http_server.py", "-k", "past_its_504"),
    ),
    Mutation(
        "a request's rows are not bounded without batching",
        "serving/model_server/core.py",
        "check_rows(rows, self.max_rows_per_request)",
        "check_rows(rows, 0)",
        ("tests/serving/model_server/test_server_limits.py", "-k", "more_rows"),
    ),
    Mutation(
        "batching refuses a request over max_batch_size only once its tensors are made",
        "serving/model_server/core.py",
        "self.batcher.check_task_size(rows)",
        "self.batcher.check_task_size(0)",
        ("tests/serving/model_server/test_batching.py", "-k", "max_batch_size_is_refused"),
    ),
    Mutation(
        "the status API says nothing while the memory budget refuses requests",
        "serving/model_server/core.py",
        "                status.status.error_message = pressure\n",
        '                status.status.error_message = ""\n',
        ("tests/serving/model_server/test_server_limits.py", "-k", "status_api_says"),
    ),
    Mutation(
        "a source is renamed, protected and tokenized whole before the model's cut",
        "model/translator.py",
        "        return cut_to_words(text, READ_WORDS_PER_TOKEN * self.model.pe_input)\n",
        "        return text\n",
        ("tests/model/test_translator.py", "-k", "costs_what"),
    ),
    Mutation(
        "a source is cut to fewer words than the model reads pieces",
        "model/translator.py",
        "        return cut_to_words(text, READ_WORDS_PER_TOKEN * self.model.pe_input)\n",
        "        return cut_to_words(text, self.model.pe_input // 4)\n",
        ("tests/model/test_translator.py", "-k", "same_pieces"),
    ),
    Mutation(
        "a fine-tuning run's lr_scale from a config file is replaced by the fine-tuning peak's",
        "training/config.py",
        'if peak_rate is not None and "lr_scale" not in given and "lr_scale" not in from_file:',
        'if peak_rate is not None and "lr_scale" not in given:',
        ("tests/training/test_fine_tuning_defaults.py", "-k", "explicit_lr_scale"),
    ),
    Mutation(
        "the fine-tuning peak is the base's rate one step past where it ended",
        "training/fine_tuning.py",
        "    return step, float(schedule(step - 1))\n",
        "    return step, float(schedule(step))\n",
        ("tests/training/test_fine_tuning_defaults.py", "-k", "peaks_below"),
    ),
    Mutation(
        "a fine-tuning run that mixes in the base's corpora peaks as one that does not",
        "training/fine_tuning.py",
        "    fraction = MIXED_PEAK_FRACTION if mix_base else PEAK_FRACTION\n",
        "    fraction = PEAK_FRACTION\n",
        ("tests/training/test_fine_tuning_defaults.py", "-k", "peaks_below"),
    ),
    Mutation(
        "a fine-tuning run's own decoding.json is overwritten by the base's",
        "training/fine_tuning.py",
        "    if os.path.exists(target):\n        return False\n",
        "",
        ("tests/training/test_fine_tuning_defaults.py", "-k", "decoding"),
    ),
    Mutation(
        "--mix_base adds the base's corpora without scaling the run's own shares",
        "training/fine_tuning.py",
        "Corpus(corpus.spec, corpus.share * (1 - share), corpus.name)",
        "Corpus(corpus.spec, corpus.share, corpus.name)",
        ("tests/training/test_fine_tuning_defaults.py", "-k", "mix_base"),
    ),
    Mutation(
        "the watch on the base's dev sets warns when they rise, not fall",
        "training/fine_tuning.py",
        'fall = before[name]["bleu"] - now["bleu"]',
        'fall = now["bleu"] - before[name]["bleu"]',
        ("tests/training/test_fine_tuning.py", "-k", "watches_its_dev_sets"),
    ),
    Mutation(
        "a resumed fine-tuning run measures the base's dev sets 'before' again, on its own weights",
        "training/fine_tuning.py",
        '        if self.report["before"] is None:\n',
        "        if True:\n",
        ("tests/training/test_fine_tuning.py", "-k", "resume_continues"),
    ),
    Mutation(
        "a kept translation's entry is named without the decoding settings (another width loads it)",
        "run_directory/traced_cache.py",
        '"options": dataclasses.asdict(options),',
        '"options": {},',
        ("tests/run_directory/test_traced_cache.py", "-k", "named_by"),
    ),
    Mutation(
        "a kept translation's entry is named without the run's weights (retrained weights load it)",
        "run_directory/traced_cache.py",
        "return sorted([os.path.join(run_dir, artifacts.CONFIG_FILE), *tokenizer, *weights])",
        "return sorted([os.path.join(run_dir, artifacts.CONFIG_FILE), *tokenizer])",
        ("tests/run_directory/test_traced_cache.py", "-k", "named_by or stale_entry"),
    ),
    Mutation(
        "the code a kept translation is named by leaves out the subpackages (model/decoding/)",
        "run_directory/traced_cache.py",
        'for path in (root / package).rglob("*.py")',
        'for path in (root / package).glob("*.py")',
        ("tests/run_directory/test_traced_cache.py", "-k", "code_digest"),
    ),
    Mutation(
        "a run's new entry leaves the entries of its old weights behind",
        "run_directory/traced_cache.py",
        'for part in ("format", "run_files", "code", "libraries")',
        "for part in ()",
        ("tests/run_directory/test_traced_cache.py", "-k", "stale_entry"),
    ),
    Mutation(
        "an entry is saved in its place, not in a staging directory renamed into it",
        "run_directory/traced_cache.py",
        '    staging = os.path.join(directory, f"{_STAGING_PREFIX}{uuid.uuid4().hex}")\n'
        "    os.mkdir(staging)\n",
        "    staging = os.path.join(directory, entry_name)\n"
        "    os.makedirs(staging, exist_ok=True)\n",
        ("tests/run_directory/test_traced_cache.py", "-k", "written_whole"),
    ),
    Mutation(
        "a run directory that cannot be written keeps no translation (no user cache)",
        "run_directory/traced_cache.py",
        "return [os.path.join(run_dir, TRACED_DIR), os.path.join(user_cache, USER_CACHE_PATH)]",
        "return [os.path.join(run_dir, TRACED_DIR)]",
        ("tests/run_directory/test_traced_cache.py", "-k", "cannot_be_written"),
    ),
    Mutation(
        "a kept beam search is looked for as the greedy signature (traced again at every start)",
        "run_directory/traced_cache.py",
        "            loaded = _load_entry(entry, name)\n",
        "            loaded = _load_entry(entry, GREEDY_SIGNATURE)\n",
        ("tests/run_directory/test_traced_cache.py", "-k", "byte_for_byte and beam2"),
    ),
    Mutation(
        "a loaded signature is called with its inputs in the signature's order, not its own",
        "run_directory/traced_cache.py",
        "                *(by_name[name] for name in self._argument_names),\n",
        "                *inputs,\n",
        ("tests/run_directory/test_traced_cache.py", "-k", "score_signature"),
    ),
    Mutation(
        "training.evaluate keeps its traced translation under --no_cache",
        "training/evaluate.py",
        "            args.changed_only,\n            cache=not args.no_cache,\n",
        "            args.changed_only,\n            cache=True,\n",
        ("tests/run_directory/test_traced_cache.py", "-k", "evaluate_keeps"),
    ),
    Mutation(
        "a bundle's evaluation keeps its traced translation inside the bundle",
        "training/bundle.py",
        "    evaluation = load_for_evaluation(staging, beam_width=beam_width, cache=False)",
        "    evaluation = load_for_evaluation(staging, beam_width=beam_width)",
        ("tests/training/test_bundle.py", "-k", "without_checkpoints"),
    ),
    Mutation(
        "the batch-by-batch comparison with CTranslate2 divides its time by ours",
        "benchmarks/profile_translate_call.py",
        'f"{mine / peer:.2f}× |"',
        'f"{peer / mine:.2f}× |"',
        ("tests/benchmarks/test_profile_translate_call.py", "-m", "large", "-k", "ctranslate2"),
    ),
    Mutation(
        "dev BLEU translates a corpus again that the same measurement scored already",
        "training/dev_bleu.py",
        "        if known is not None and key in known:\n            return known[key]\n",
        "",
        ("tests/training/test_dev_bleu.py", "-k", "not_translated_again"),
    ),
    Mutation(
        "restore leaves the markers of a translation as they are",
        "model/placeholders.py",
        "restored = tf.where(tf.reduce_any(is_marker, axis=1), words, pieces.flat_values)",
        "restored = pieces.flat_values",
        ("tests/model/test_placeholders.py", "-k", "restore"),
    ),
    Mutation(
        "split_words drops what separates the words (a joined row is not its text)",
        "model/placeholders.py",
        "return regex_split_with_offsets(texts, NOT_WORD, NOT_WORD)[0]",
        "return regex_split_with_offsets(texts, NOT_WORD)[0]",
        ("tests/model/test_placeholders.py", "-k", "restore_inverts or protect_examples"),
    ),
    Mutation(
        "a fine-tuning run keeps no copy of its base's settings",
        "training/train.py",
        "        keep_base_config(config.init_from, out.run_dir)\n",
        "",
        ("tests/training/test_fine_tuning.py", "-k", "base_has_gone"),
    ),
    Mutation(
        "a resumed fine-tuning run reads its base again instead of its own settings",
        "training/train.py",
        "    if config.init_from and not (resume and checkpointed_config(run_dir)):",
        "    if config.init_from:",
        ("tests/training/test_fine_tuning.py", "-k", "base_has_gone"),
    ),
    Mutation(
        "a resumed fine-tuning run takes its schedule from the base again",
        "training/train.py",
        'if resumed_config is not None and resumed_config.get("init_from"):',
        "if False:",
        ("tests/training/test_fine_tuning.py", "-k", "base_has_gone"),
    ),
    Mutation(
        "a reversed run reads its pairs as the corpus writes them",
        "training/corpus/loading.py",
        "        return [(target, source) for source, target in pairs]\n",
        "        return pairs\n",
        ("tests/training/corpus/test_loading.py", "-k", "reversed"),
    ),
    Mutation(
        "a reversed run trains on its corpora unswapped",
        "training/train.py",
        '"reverse": config.reverse}',
        '"reverse": False}',
        ("tests/training/test_reversed_run.py", "-k", "learns_from"),
    ),
    Mutation(
        "a reversed run's source tokenizer records the Spanish spelling of its corpora",
        "training/vocabulary.py",
        'source_spelling=None if settings.get("reverse") else mixture_source_spelling(corpora),',
        "source_spelling=mixture_source_spelling(corpora),",
        ("tests/training/test_reversed_run.py", "-k", "learns_from"),
    ),
    Mutation(
        "a reversed run is evaluated on its pairs unswapped",
        "training/evaluate.py",
        "            reverse=self.reverse,\n",
        "",
        ("tests/training/test_reversed_run.py", "-k", "evaluation"),
    ),
    Mutation(
        "a reversed run's Spanish counted against the English word lists",
        "training/evaluate.py",
        "listed = spanish_words() if reverse else english_words()",
        "listed = english_words()",
        ("tests/training/test_made_up_words.py", "-k", "reversed"),
    ),
    Mutation(
        "a reversed run's made-up words know its English side, not its Spanish targets",
        "training/evaluate.py",
        'load_splits(at_hand, "train", reverse=reverse)',
        'load_splits(at_hand, "train")',
        ("tests/training/test_made_up_words.py", "-k", "reversed"),
    ),
    Mutation(
        "Apertium beside a reversed run translates Spanish to English",
        "training/corpus/apertium.py",
        "return ENGLISH_TO_SPANISH if reverse else SPANISH_TO_ENGLISH",
        "return SPANISH_TO_ENGLISH",
        ("tests/training/test_reversed_run.py", "-k", "apertium or model_card"),
    ),
    Mutation(
        "a fine-tuning run watches a reversed base's dev sets unswapped",
        "training/fine_tuning.py",
        'reverse=base_config.get("reverse", False),',
        "reverse=False,",
        ("tests/training/test_fine_tuning_defaults.py", "-k", "watch"),
    ),
    Mutation(
        "reverse is no model setting: fine-tuning and resume may change it",
        "training/train.py",
        '    "reverse",\n)',
        ")",
        (
            "tests/training/test_reversed_run.py::test_fine_tuning_a_reversed_run_stays_reversed",
            "tests/training/test_train.py::test_refuses_to_overwrite_or_resume_with_another_model",
        ),
    ),
    Mutation(
        "a reversed run's number slots are found Spanish first only",
        "training/copying.py",
        "        (_ENGLISH_NUMBER, _SPANISH_NUMBER, False),\n",
        "",
        ("tests/training/test_copying.py", "-k", "either_way"),
    ),
    Mutation(
        "a reversed run takes the restoration tables and the noise that writes Spanish",
        "training/config.py",
        "    if config.reverse:\n        validate_reversed(config)\n",
        "",
        ("tests/training/test_train.py", "-k", "bad_robustness"),
    ),
    Mutation(
        "a noise kind composed with one that writes Spanish reaches a reversed run",
        "training/noise.py",
        'set(kind.split("+")) & set(SPANISH_ONLY)',
        "{kind} & set(SPANISH_ONLY)",
        ("tests/training/test_train.py", "-k", "bad_robustness"),
    ),
    Mutation(
        "a reversed run's tokenizer takes the tables of Spanish sources and English targets",
        "training/vocabulary.py",
        "if getattr(args, option) and reverse:",
        "if False:",
        ("tests/training/test_reversed_run.py", "-k", "spanish_sources"),
    ),
    Mutation(
        "a reversed run's model card says Spanish→English",
        "training/bundle.py",
        '    languages = run_languages(config.get("reverse", False))\n',
        "    languages = run_languages(False)\n",
        ("tests/training/test_reversed_run.py", "-k", "model_card"),
    ),
    Mutation(
        "catalog fills: draws seeded by Python's salted hash, not the message's SHA-256",
        "training/corpus/catalog_fills.py",
        'digest = hashlib.sha256(f"{english}\\0{spanish}".encode()).digest()',
        'digest = hash(english + spanish).to_bytes(8, "big", signed=True)',
        ("tests/training/corpus/test_catalog_fills.py", "-k", "any_process"),
    ),
    Mutation(
        "catalog fills: every message draws the same values",
        "training/corpus/catalog_fills.py",
        'digest = hashlib.sha256(f"{english}\\0{spanish}".encode()).digest()',
        'digest = hashlib.sha256(b"catalogs").digest()',
        ("tests/training/corpus/test_catalog_fills.py", "-k", "different_messages"),
    ),
    Mutation(
        "catalog fills: a placeholder one side lacks is filled anyway",
        "training/corpus/catalog_fills.py",
        "    if slots[0] != slots[1]:",
        "    if False:",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "mismatched"),
    ),
    Mutation(
        "catalog fills: a date format is filled against a time format",
        "training/corpus/catalog_fills.py",
        "    if parts[0] != parts[1]:",
        "    if False:",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "mismatched"),
    ),
    Mutation(
        "catalog fills: Spanish decimals written with a point",
        "training/corpus/fill_values.py",
        '        text = text.translate(str.maketrans(",.", ".,"))',
        "        text = text",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "decimals"),
    ),
    Mutation(
        "catalog fills: Spanish dates rendered with English names",
        "training/corpus/fill_values.py",
        "    if language == ENGLISH:",
        "    if True:",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "date_format or spanish_dates"),
    ),
    Mutation(
        "catalog fills: a count before a noun may be 1, against the plural noun",
        "training/corpus/fill_values.py",
        "return rng.randint(2 if plural else 1, 12)",
        "return rng.randint(1, 12)",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "decimals"),
    ),
    Mutation(
        "catalog fills: positional printf placeholders counted from 0, apart from numbered ones",
        "training/corpus/catalog_fills.py",
        'slot = ("number", int(match["number"] or positional + 1))',
        'slot = ("number", int(match["number"] or positional))',
        ("tests/training/corpus/test_catalog_fills.py", "-k", "positional"),
    ),
    Mutation(
        "catalog fills: numbered printf placeholders matched by position, not number",
        "training/corpus/catalog_fills.py",
        'slot = ("number", int(match["number"] or positional + 1))',
        'slot = ("number", positional + 1)',
        ("tests/training/corpus/test_catalog_fills.py", "-k", "reordered"),
    ),
    Mutation(
        "catalog fills: a plural message filled in its singular forms",
        "training/corpus/catalog_fills_corpus.py",
        "            return message.english_plural, message.spanish_plural",
        "            return message.english, message.spanish",
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "plural"),
    ),
    Mutation(
        "catalog fills: a filled pair a rule rejects counted as a pair without placeholders",
        "training/corpus/catalog_cleaning.py",
        "    return pair, FILLED_THEN + reason if reason and filled else reason",
        "    return pair, reason",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "counted_apart"),
    ),
    Mutation(
        "catalog fills: tags and wiki links the filling leaves are not checked",
        "training/corpus/catalog_cleaning.py",
        "        if has_placeholder(english) or has_placeholder(spanish):\n            return None, PLACEHOLDER_NOT_FILLED",
        "        if False:\n            return None, PLACEHOLDER_NOT_FILLED",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "not_filled"),
    ),
    Mutation(
        "the catalogs corpus of another format version is not rebuilt",
        "training/corpus/catalogs.py",
        "    if version != format_version:",
        "    if False:",
        ("tests/training/corpus/test_catalogs.py", "-k", "rebuild"),
    ),
    Mutation(
        "catalog fills: no time after 'a las'",
        "training/corpus/catalog_fills.py",
        "        (values.TIME, context.spanish_before[-2:] in _TIME_BEFORE),",
        "        (values.TIME, False),",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "a_time_after"),
    ),
    Mutation(
        "the catalogs corpus fills placeholders (the bundled model's test set would change)",
        "training/corpus/catalog_cleaning.py",
        "        return None, PLACEHOLDER\n",
        "        return clean_filled_message(english, spanish)\n",
        ("tests/training/corpus/test_catalogs.py", "-k", "placeholders or as_it_was"),
    ),
    Mutation(
        "catalog-fills takes messages the catalogs corpus keeps or drops for other reasons",
        "training/corpus/catalog_fills_corpus.py",
        "    if clean_message(message.english, message.spanish)[1] != PLACEHOLDER:",
        "    if False:",
        (
            "tests/training/corpus/test_catalog_fills_corpus.py",
            "-k",
            "drop_for_their_placeholders",
        ),
    ),
    Mutation(
        "catalog-fills keeps the filled pairs the catalogs corpus holds",
        "training/corpus/catalog_fills_corpus.py",
        "    keyed_pairs = remove_duplicates(yields, others.splits)",
        "    keyed_pairs = remove_duplicates(yields)",
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "catalogs_hold"),
    ),
    Mutation(
        "catalog-fills splits a message by its own hash, wherever the catalogs put its sentence",
        "training/corpus/catalog_fills_corpus.py",
        "        split = apart_from.splits.get(key)",
        "        split = None",
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "takes_the_split"),
    ),
    Mutation(
        "catalog-fills keys a message by its English with the placeholders in",
        "training/corpus/catalog_fills_corpus.py",
        "    return near_duplicate_key(without_placeholders(strip_context_key(english)))",
        "    return near_duplicate_key(strip_context_key(english))",
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "takes_the_split"),
    ),
    Mutation(
        "catalog-fills trains on Spanish the catalogs corpus holds out",
        "training/corpus/catalog_fills_corpus.py",
        "pair for pair in trained if normalize_for_dedup(pair[0]) not in apart_from.held_out_spanish",
        "pair for pair in trained",
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "crosses"),
    ),
    Mutation(
        "catalog-fills holds out Spanish the catalogs corpus trains on",
        "training/corpus/catalog_fills_corpus.py",
        'dedup_against(splits[split], [*splits["train"], *apart_from.trained])',
        'dedup_against(splits[split], splits["train"])',
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "crosses"),
    ),
    Mutation(
        "catalog-fills is not rebuilt when the catalogs corpus is",
        "training/corpus/catalog_fills_corpus.py",
        '    digest = f"{packages_digest(packages)}:{others.digest}"',
        "    digest = packages_digest(packages)",
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "rebuild"),
    ),
    Mutation(
        "catalog-fills without the catalogs corpus fails without saying to build it",
        "training/corpus/catalog_fills_corpus.py",
        "        if missing:\n",
        "        if False:\n",
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "says_to_build"),
    ),
    Mutation(
        "catalog-fills splits by Python's salted hash(), another split in each process",
        "training/corpus/catalog_fills_corpus.py",
        'split = split_for_key(f"{SPLIT_SALT}:{key}", DEV_FRACTION, TEST_FRACTION)',
        'split = split_for_key(f"{SPLIT_SALT}:{hash(key)}", DEV_FRACTION, TEST_FRACTION)',
        ("tests/training/corpus/test_catalog_fills_corpus.py", "-k", "any_process"),
    ),
    Mutation(
        "catalog fills: a noun of either gender after a Spanish article",
        "training/corpus/fill_values.py",
        "if gender in (None, thing.gender) and",
        "if",
        ("tests/training/corpus/test_catalog_fills.py", "-k", "agrees"),
    ),
    Mutation(
        "wordnet-bt-own keeps a looping back-translation",
        "training/corpus/own_backtranslation.py",
        "        elif is_looping(source, target):\n",
        "        elif False:\n",
        ("tests/training/corpus/test_own_backtranslation.py", "-k", "fit_to_train_on"),
    ),
    Mutation(
        "wordnet-bt-own keeps an empty back-translation",
        "training/corpus/own_backtranslation.py",
        "        if not source.strip():\n",
        "        if not source:\n",
        ("tests/training/corpus/test_own_backtranslation.py", "-k", "fit_to_train_on"),
    ),
    Mutation(
        "wordnet-bt-own back-translates with a Spanish→English run",
        "training/corpus/own_backtranslation.py",
        '    if not config.get("reverse"):\n',
        "    if False:\n",
        ("tests/training/corpus/test_own_backtranslation.py", "-k", "no_reversed_run"),
    ),
    Mutation(
        "wordnet-bt-own is built on first use with nothing to build it",
        "training/corpus/loading.py",
        "            if build is None:\n",
        "            if False:\n",
        ("tests/training/corpus/test_own_backtranslation.py", "-k", "missing_corpus"),
    ),
    Mutation(
        "wordnet-bt-own's Spanish is of the English sorted by length",
        "training/corpus/own_backtranslation.py",
        'spanish = translate_examples(wordnet["english"], signature)',
        'spanish = translate_examples(sorted(wordnet["english"], key=len), signature)',
        ("tests/training/corpus/test_own_backtranslation.py", "-m", "large", "-k", "each_english"),
    ),
    Mutation(
        "wordnet-bt-own decodes greedily whatever the run's decoding says",
        "training/corpus/own_backtranslation.py",
        'run_signature(backtranslator, fields.pop("beam_width"), cache, **fields)',
        "run_signature(backtranslator, 1, cache)",
        ("tests/training/corpus/test_own_backtranslation.py", "-m", "large", "-k", "each_english"),
    ),
    Mutation(
        "back-translated corpora split by a hash of their Spanish",
        "training/corpus/backtranslation.py",
        "((normalize_for_dedup(target), (source, target)) for source, target in pairs)",
        "((normalize_for_dedup(source), (source, target)) for source, target in pairs)",
        ("tests/training/corpus/test_own_backtranslation.py", "-m", "large", "-k", "split"),
    ),
    Mutation(
        "wordnet-bt-own is current whatever the run's weights and the decoding",
        "training/corpus/own_backtranslation.py",
        "    if not needs_build(out_dir, force, stale_unless(out_dir, identity, what)):\n",
        '    if not needs_build(out_dir, force, stale_unless(out_dir, {"limit": limit}, what)):\n',
        ("tests/training/corpus/test_own_backtranslation.py", "-m", "large", "-k", "rebuild"),
    ),
    Mutation(
        "the digest of a run's files leaves its weights out",
        "run_directory/traced_cache.py",
        "    return sorted([os.path.join(run_dir, artifacts.CONFIG_FILE), *tokenizer, *weights])",
        "    return sorted([os.path.join(run_dir, artifacts.CONFIG_FILE), *tokenizer])",
        ("tests/training/corpus/test_own_backtranslation.py", "-m", "large", "-k", "rebuild"),
    ),
    Mutation(
        "the step of model.keras's weights is not known",
        "run_directory/artifacts.py",
        "    return kept[-1][0] if kept else None\n",
        "    return None\n",
        ("tests/training/corpus/test_own_backtranslation.py", "-m", "large", "-k", "recorded"),
    ),
    Mutation(
        "wordnet-bt-own keeps the Spanish of weights replaced while it translated",
        "training/corpus/own_backtranslation.py",
        '    if traced_cache.run_files_digest(backtranslator) != identity["backtranslator_sha256"]:\n',
        "    if False:\n",
        ("tests/training/corpus/test_own_backtranslation.py", "-m", "large", "-k", "while_it"),
    ),
)


def tracked_copy(destination):
    """The repository's tracked files (as in the working tree) copied under `destination`, with
    the untracked build outputs the tests read (`data/`, and the Debian packages cached in
    `.debs/`) linked in."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source = REPO_ROOT / os.fsdecode(name)
        if source.is_file():
            target = destination / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for built in ("data", ".debs"):
        if (REPO_ROOT / built).exists():
            (destination / built).symlink_to(REPO_ROOT / built)


def run_mutation(mutation, copy_root):
    """Applies `mutation` in `copy_root`, runs its tests, restores the file: `(outcome, seconds)`."""
    path = copy_root / mutation.path
    original_text = path.read_text(encoding="utf-8")
    if original_text.count(mutation.original) != 1:
        return "stale", 0.0
    path.write_text(original_text.replace(mutation.original, mutation.mutated), encoding="utf-8")
    started = time.monotonic()
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "0"]
            + list(mutation.tests),
            cwd=copy_root,
            env={**os.environ, "PYTHONPATH": str(copy_root)},
            capture_output=True,
            timeout=TIMEOUT_SECONDS,
        )
        outcome = {0: "survived", 1: "killed"}.get(result.returncode, "error")
    except subprocess.TimeoutExpired:
        outcome = "error"
    finally:
        path.write_text(original_text, encoding="utf-8")
    return outcome, time.monotonic() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="run the mutations whose name contains this")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args(argv)
    selected = [m for m in MUTATIONS if args.only.lower() in m.name.lower()]
    if args.list or not selected:
        for mutation in MUTATIONS:
            print(f"{mutation.path}: {mutation.name}")
        return 0 if args.list else 2
    outcomes = {}
    with tempfile.TemporaryDirectory(prefix="mutations-") as temporary:
        copy_root = pathlib.Path(temporary)
        tracked_copy(copy_root)
        for number, mutation in enumerate(selected, 1):
            outcome, seconds = run_mutation(mutation, copy_root)
            outcomes[mutation.name] = outcome
            print(f"[{number}/{len(selected)}] {outcome:8} {seconds:6.1f} s  {mutation.name}")
    not_killed = {name: outcome for name, outcome in outcomes.items() if outcome != "killed"}
    print(f"{len(outcomes) - len(not_killed)} of {len(outcomes)} mutations killed")
    for name, outcome in not_killed.items():
        print(f"  {outcome}: {name}")
    return 0 if not not_killed else 1


if __name__ == "__main__":
    sys.exit(main())
