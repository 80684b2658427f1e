"""``fusec.environ.getenv`` is ``os.environ.get`` (its fast path reads os.environ's own dict)."""

from __future__ import annotations

import os

import pytest

from fusec import environ


@pytest.mark.parametrize("value", ["", "0", "8G", "päth/ü", "a=b"])
def test_getenv_sees_every_change_made_through_os_environ(monkeypatch, value):
    name = "FUSEC_TEST_GETENV"
    monkeypatch.delenv(name, raising=False)
    assert environ.getenv(name) == "" and environ.getenv(name, "x") == "x"
    monkeypatch.setenv(name, value)
    assert environ.getenv(name, "x") == os.environ.get(name, "x") == value
    os.environ[name] = value + "1"
    assert environ.getenv(name) == value + "1"
    del os.environ[name]
    assert environ.getenv(name, "gone") == "gone"


def test_the_fast_path_is_taken_on_posix():
    if os.name == "posix":
        assert environ._DATA is not None


def test_a_switch_takes_its_first_choice_by_default_and_refuses_others(monkeypatch) -> None:
    from fusec.environ import switch

    monkeypatch.delenv("FUSEC_TEST_SWITCH", raising=False)
    assert switch("FUSEC_TEST_SWITCH", ("on", "off")) == "on"
    monkeypatch.setenv("FUSEC_TEST_SWITCH", " OFF ")
    assert switch("FUSEC_TEST_SWITCH", ("on", "off")) == "off"
    monkeypatch.setenv("FUSEC_TEST_SWITCH", "sometimes")
    expected = r"\$FUSEC_TEST_SWITCH: 'sometimes', expected 'on' or 'off'"
    with pytest.raises(ValueError, match=expected):
        switch("FUSEC_TEST_SWITCH", ("on", "off"))


def test_a_bad_switch_is_the_users_error(monkeypatch) -> None:
    """A FusecError (the command line reports it as bad input, not as a bug)."""
    from fusec.environ import switch
    from fusec.errors import FusecError

    monkeypatch.setenv("FUSEC_TEST_SWITCH", "sometimes")
    with pytest.raises(FusecError, match="FUSEC_TEST_SWITCH"):
        switch("FUSEC_TEST_SWITCH", ("on", "off"))
