"""Settings of a run directory's config.json that older runs saved under other names."""

import logging

logger = logging.getLogger(__name__)

# Settings renamed since runs were first saved: `{old name: new name}`. A config.json or
# --config file with an old name still loads (with a deprecation line in the log), and the old
# command-line flag still works.
RENAMED_SETTINGS = {"max_length": "max_sequence_length"}


def upgrade_renamed_settings(values, source):
    """`values` (a dict of settings read from `source`) with every old name of
    `RENAMED_SETTINGS` replaced by its new one, each logged as deprecated.

    Raises:
        ValueError: `values` holds both a setting's old and its new name.
    """
    upgraded = dict(values)
    for old_name, new_name in RENAMED_SETTINGS.items():
        if old_name not in upgraded:
            continue
        if new_name in upgraded:
            raise ValueError(f"{source}: both {old_name} and its new name {new_name} are set")
        logger.warning(
            "%s: the setting %s is deprecated; it is read as %s (rename it there).",
            source,
            old_name,
            new_name,
        )
        upgraded[new_name] = upgraded.pop(old_name)
    return upgraded
