"""inference/demo_web.py: what it refuses before any work (the whole of it runs in `make
demo-web`; the page and its forwarding are tested in test_web.py and test_web_browser.py)."""

import pytest

from common.serving_contract import SIGNATURE_NAMES
from inference.demo_web import PAGE_SIGNATURES, main


@pytest.mark.parametrize("flag", ["--port", "--rest_port"])
def test_a_model_server_port_the_page_cannot_know_is_refused_before_any_work(
    flag, capsys, tmp_path
):
    with pytest.raises(SystemExit) as exit_info:
        main([flag, "0", "--run_dir", str(tmp_path / "nothing")])
    assert exit_info.value.code == 2
    assert f"{flag} 0: give the model server a port from 1 to 65535" in capsys.readouterr().err


def test_a_run_without_a_model_is_refused(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["--run_dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "holds no trained model" in capsys.readouterr().err
    assert not (tmp_path / "exports").exists()


def test_the_page_signatures_are_in_the_export_order():
    """export_info.json lists them in SIGNATURES' order, and an up-to-date export is reused only
    when its list equals this one."""
    assert PAGE_SIGNATURES == tuple(name for name in SIGNATURE_NAMES if name in PAGE_SIGNATURES)
