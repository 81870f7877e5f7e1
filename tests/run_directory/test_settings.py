"""run_directory/settings.py: settings that older runs saved under other names still load."""

import json

import pytest

from run_directory import artifacts
from run_directory.settings import RENAMED_SETTINGS, upgrade_renamed_settings


def test_every_old_name_is_read_as_its_new_one_with_a_deprecation_line(caplog):
    old = {old_name: index for index, old_name in enumerate(RENAMED_SETTINGS)}
    with caplog.at_level("WARNING", logger="run_directory.settings"):
        upgraded = upgrade_renamed_settings({**old, "d_model": 8}, "somewhere.json")
    assert upgraded == {
        **{RENAMED_SETTINGS[name]: value for name, value in old.items()},
        "d_model": 8,
    }
    for old_name, new_name in RENAMED_SETTINGS.items():
        assert (
            f"somewhere.json: the setting {old_name} is deprecated; it is read as {new_name}"
            in caplog.text
        )


def test_a_run_saved_with_an_old_name_loads_and_both_names_are_refused(tmp_path):
    (tmp_path / artifacts.CONFIG_FILE).write_text(json.dumps({"max_length": 40, "d_model": 8}))
    saved = artifacts.read_config(str(tmp_path))
    assert saved["max_sequence_length"] == 40 and "max_length" not in saved
    with pytest.raises(ValueError, match="both max_length and its new name max_sequence_length"):
        upgrade_renamed_settings({"max_length": 40, "max_sequence_length": 48}, "config.json")
