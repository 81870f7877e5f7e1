"""inference/demo.py: what it refuses before any work (the whole demo runs in `make demo`)."""

import pytest

from inference.demo import main


@pytest.mark.parametrize("port", ["0", "-1", "65536"])
def test_a_port_the_client_cannot_know_is_refused_before_any_work(port, capsys, tmp_path):
    """With --port 0 the server bound a free port its client never learned, and the demo
    waited 180 s for a server at 127.0.0.1:0."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--port", port, "--run_dir", str(tmp_path / "nothing")])
    assert exit_info.value.code == 2
    assert f"--port {port}: give the server a port from 1 to 65535" in capsys.readouterr().err
    assert not (tmp_path / "nothing").exists()
