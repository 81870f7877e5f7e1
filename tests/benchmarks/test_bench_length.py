"""benchmarks/bench_length.py: ms per sentence and per output token, and their curves."""


def test_bench_length_tabulates_ms_per_sentence_and_per_output_token_and_plots_both_curves(
    tmp_path,
):
    from benchmarks import bench_length

    args = bench_length.parse_args(
        ["--output_lengths", "16", "32", "--source_lengths", "8", "64", "--fixed_output", "32"]
    )
    names = [bench_length.SERVED_GREEDY, bench_length.CT2_GREEDY]
    # Output curve: served 2 ms a token, CTranslate2 1; source curve: served flat, CT2 rising.
    results = {}
    for length in args.output_lengths:
        results[(bench_length.OUTPUT, length, names[0])] = 2.0 * length
        results[(bench_length.OUTPUT, length, names[1])] = 1.0 * length
    for length in args.source_lengths:
        results[(bench_length.SOURCE, length, names[0])] = 64.0
        results[(bench_length.SOURCE, length, names[1])] = 30.0 + length
    body = bench_length.markdown(args, results, "cmd", "docs/plot.png")
    lines = body.splitlines()
    assert "| output tokens | served greedy | CTranslate2 float32 greedy |" in lines
    assert "| 32 | 64.0 (2.00) | 32.0 (1.00) |" in lines
    assert "| 64 | 64.0 | 94.0 |" in lines
    assert "![decoding cost against output and source length](docs/plot.png)" in lines
    path = tmp_path / "plot.png"
    bench_length.plot(args, results, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
