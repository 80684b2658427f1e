"""The fusion rules parser loads from LALR tables built ahead (``rules_tables``): they must
be the grammar's, parse as a parser built from it does, and be left alone once stale."""

from __future__ import annotations

import lark
import pytest
from lark import Lark
from lark.exceptions import UnexpectedInput

from fusec.passes.fusion import rules, rules_tables

# The default policy, each construct of the language, and texts that fail at each stage.
TEXTS = [
    rules.default_rules_text(),
    'param p = 3 "a limit"\n'
    'kind k "doc" {\n  anchor matmul\n  epilogue relu max p where row <= p\n}\n',
    "kind k {\n  body relu, ai.add where same_shape, last_axis\n  prologue softmax duplicate\n}\n",
    "# a comment\nkind k {\n  anchor conv2d\n}\n",
]
BAD_TEXTS = [
    "kind k {\n  anchor matmul\n  epilogue relu max\n}",
    "param = 1\n",
    "kind {",
    "kind k {\n  anchor matmul\n",
]


def _prebuilt() -> Lark:
    return Lark.load(rules_tables.TABLES)


def test_the_tables_are_the_grammars_for_this_lark():
    regenerate = "the grammar changed: run python -m fusec.passes.fusion.rules"
    assert rules_tables.GRAMMAR_SHA256 == rules.grammar_digest(), regenerate
    assert rules_tables.LARK == lark.__version__, f"lark {lark.__version__}: {regenerate}"


@pytest.mark.parametrize("text", TEXTS)
def test_the_tables_parse_as_the_grammar(text):
    built, prebuilt = rules.build_parser().parse(text), _prebuilt().parse(text)
    assert prebuilt == built
    positions = [(t.line, t.column) for t in built.scan_values(lambda v: True)]
    assert [(t.line, t.column) for t in prebuilt.scan_values(lambda v: True)] == positions


@pytest.mark.parametrize("text", BAD_TEXTS)
def test_the_tables_refuse_what_the_grammar_refuses_at_the_same_place(text):
    with pytest.raises(UnexpectedInput) as built:
        rules.build_parser().parse(text)
    with pytest.raises(UnexpectedInput) as prebuilt:
        _prebuilt().parse(text)
    assert (prebuilt.value.line, prebuilt.value.column) == (built.value.line, built.value.column)
    assert type(prebuilt.value) is type(built.value)


def test_the_parser_comes_from_the_tables_and_from_the_grammar_once_they_are_stale(monkeypatch):
    rules._parser.cache_clear()
    try:
        assert rules._parser().source_path == "<deserialized>"  # Lark.load's mark
        rules._parser.cache_clear()
        monkeypatch.setattr(rules_tables, "GRAMMAR_SHA256", "0" * 64)
        parser = rules._parser()
        assert parser.source_path != "<deserialized>"
        assert parser.parse(TEXTS[1]) == rules.build_parser().parse(TEXTS[1])
    finally:
        rules._parser.cache_clear()


# ------------------------------------------------- the default policy, parsed ahead


def test_the_default_policy_parsed_ahead_is_the_files():
    from pathlib import Path

    from fusec.passes.fusion import rules_default

    regenerate = "default.rules or the grammar changed: run python -m fusec.passes.fusion.rules"
    assert Path(rules_default.__file__).read_text() == rules.default_rules_source(), regenerate
    parsed = rules.parse_rules(rules.default_rules_text(), rules.DEFAULT_RULES_FILE)
    assert rules_default.RULES == parsed
    assert list(rules_default.RULES.params) == list(parsed.params)  # in file order


def test_the_default_policy_is_parsed_once_what_was_parsed_ahead_is_stale(monkeypatch):
    from fusec.passes.fusion import rules_default

    rules.default_rules.cache_clear()
    try:
        assert rules.default_rules() is rules_default.RULES
        rules.default_rules.cache_clear()
        monkeypatch.setattr(rules_default, "RULES_SHA256", "0" * 64)
        fresh = rules.default_rules()
        assert fresh is not rules_default.RULES and fresh == rules_default.RULES
    finally:
        rules.default_rules.cache_clear()
