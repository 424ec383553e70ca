"""Config files (pipeline, SFT, training): one reader, errors that name the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from curation.config_files import read_config_file
from curation.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_a_config_that_is_not_utf8_is_one_error_naming_file_and_byte(tmp_path, suffix):
    """A config saved in Latin-1 (an accented pool name) was a UnicodeDecodeError traceback
    from `sluice run`, `sluice sft run` and `sluice train grpo`; now one ConfigError naming
    the file and the byte, like a decontam --config or --policy file."""
    text = (REPO / "training/configs/acereason_math.toml").read_text(encoding="utf-8")
    if suffix == ".yaml":
        text = 'name: "acereason-math"\n'
    bad = text.replace('"acereason-math"', '"acereason-maths-é"').encode("latin-1")
    p = tmp_path / f"train{suffix}"
    p.write_bytes(bad)
    at = bad.index("é".encode("latin-1"))
    with pytest.raises(ConfigError, match=f"invalid UTF-8 at byte {at} ") as exc:
        read_config_file(p)
    assert str(p) in str(exc.value)


def test_a_config_path_that_is_a_folder_says_so(tmp_path):
    """`sluice run configs/` (a folder) said "config file 'configs' not found" while it is
    right there; now it says the path is a folder."""
    from curation.errors import NotFoundError

    (tmp_path / "pipeline.toml").mkdir()
    with pytest.raises(ConfigError, match=r"is a folder, not a config file") as exc:
        read_config_file(tmp_path / "pipeline.toml")
    assert not isinstance(exc.value, NotFoundError)


def test_a_yaml_config_that_does_not_parse_is_one_line_with_its_place(tmp_path):
    """A YAML syntax error printed PyYAML's five-line message (context, the "<unicode string>"
    mark, a caret line); now one line with the problem, the line and the column."""
    p = tmp_path / "pipeline.yaml"
    p.write_text("data_root: .sluice\npools: [1,\n")
    with pytest.raises(ConfigError) as exc:
        read_config_file(p)
    msg = str(exc.value)
    assert "\n" not in msg and "<unicode string>" not in msg, msg
    assert msg.startswith(f"config file {str(p)!r} is not valid yaml: ") and "(line 3" in msg
