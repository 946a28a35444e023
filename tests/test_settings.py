"""Settings: an unknown tool name in `[tools.policy]` or a profile's `tools` is an error at start
that names it and the nearest valid name, before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from lace.config import load_settings
from lace.core.errors import LaceError
from lace.core.tool_names import ALL_TOOL_NAMES, nearest_tool_name
from lace.tools import names
from tests.conftest import run_cli


def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    config = tmp_path / "lace.toml"
    config.write_text(text)
    monkeypatch.setenv("LACE_CONFIG", str(config))
    return config


def test_an_unknown_tool_in_the_policy_names_the_nearest(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, monkeypatch, '[tools.policy]\nBash = "deny"\n')
    with pytest.raises(LaceError) as raised:
        load_settings()
    assert str(raised.value) == (f"Bad setting tools.policy in {config}: unknown tool 'Bash': "
                                 "did you mean 'bash'?")


def test_an_unknown_tool_in_a_profile_names_the_nearest(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, monkeypatch,
                     '[profiles.critic]\ntools = ["task_view", "file_raed"]\n')
    with pytest.raises(LaceError) as raised:
        load_settings()
    assert str(raised.value) == (f"Bad setting profiles.critic.tools in {config}: unknown tool "
                                 "'file_raed': did you mean 'file_read'?")


def test_a_name_like_no_tool_lists_the_tools(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _config(tmp_path, monkeypatch, '[tools.policy]\nxyzzy = "allow"\n')
    with pytest.raises(LaceError, match=r"unknown tool 'xyzzy': the tools are task_create, "):
        load_settings()


def test_known_names_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config(tmp_path, monkeypatch, '[tools.policy]\nbash = "deny"\nfile_write = "allow"\n'
                                   '[profiles.coder]\ntools = ["bash", "file_edit"]\n')
    settings = load_settings()
    assert settings.tools.policy_for("bash") == "deny"
    assert settings.profiles["coder"].tools == ["bash", "file_edit"]


def test_lace_run_refuses_a_bad_tool_name_before_writing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        db_path: Path) -> None:
    config = _config(tmp_path, monkeypatch, '[tools.policy]\nBash = "deny"\n')
    code, out, err = run_cli(capsys, "run", "hello", "--db", str(db_path))
    assert (code, out) == (2, "")
    assert err == (f"lace: error: Bad setting tools.policy in {config}: unknown tool 'Bash': "
                   "did you mean 'bash'?\n")
    assert not db_path.exists()


def test_the_tools_layer_and_the_core_share_one_list() -> None:
    assert names.ALL_TOOL_NAMES is ALL_TOOL_NAMES
    assert nearest_tool_name("FILE_WRITE") == "file_write"
    assert nearest_tool_name("spawn_wait") == "spawn_await"
