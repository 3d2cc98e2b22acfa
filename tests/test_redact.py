"""Redaction: each rule on values it must catch and look-alikes it must leave, placeholders stable
within a trace, and every export redacted unless --no-redact is said."""

from __future__ import annotations

import json
import re
from pathlib import Path
from unittest.mock import patch

import pytest
from datasets import load_dataset
from export_helpers import (
    FAKE_OPENAI_KEY,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from traceforge.cli import cli
from traceforge.export import redact as redact_module
from traceforge.export.redact import RULES, Finding, _resolve, find, redact
from traceforge.export.source import Conversation, message

# Fake credentials are assembled at run time so no secret scanner flags this file.
A = "a1B2c3D4e5F6g7H8i9J0"
CAUGHT = [
    ("openai_key", "key sk-" + "proj-" + A + A + " ok", "sk-proj-" + A + A),
    ("anthropic_key", "sk-" + "ant-api03-" + A + A, "sk-ant-api03-" + A + A),
    ("hf_token", "token=hf_" + A + "abcdefghijklmn", "hf_" + A + "abcdefghijklmn"),
    ("aws_access_key", "AKIA" + "IOSFODNN7EXAMPL3 is the id", "AKIAIOSFODNN7EXAMPL3"),
    ("aws_secret_key", "aws_secret_access_key = " + A + A, A + A),
    ("github_token", "ghp_" + A + "0123456789abcdef", "ghp_" + A + "0123456789abcdef"),
    ("gitlab_token", "glpat-" + A, "glpat-" + A),
    ("google_api_key", "AIza" + A + "K" * 15, "AIza" + A + "K" * 15),
    ("slack_token", "xoxb-" + "123456789012-" + A, "xoxb-123456789012-" + A),
    (
        "slack_webhook",
        "https://hooks.slack.com/services/T000/B000/" + A,
        "https://hooks.slack.com/services/T000/B000/" + A,
    ),
    ("stripe_key", "sk_" + "live_" + A, "sk_live_" + A),
    (
        "jwt",
        "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4",
        "eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4",
    ),
    ("bearer_token", "Authorization: Bearer " + A + "xyz", A + "xyz"),
    ("basic_auth", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("private_key", "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", None),
    ("url_password", "postgres://admin:s3cr3t@db.example.com/app", "s3cr3t"),
    ("secret_assignment", 'config: password="Hunter2!x"', "Hunter2!x"),
    ("email", "write to ann.lee+news@example.co.uk today", "ann.lee+news@example.co.uk"),
    ("card_number", "pay with 4111 1111 1111 1111.", "4111 1111 1111 1111"),
    ("card_number", "amex 378282246310005", "378282246310005"),
    ("phone", "call +44 20 7946 0958 now", "+44 20 7946 0958"),
    ("phone", "call (415) 555-2671 now", "(415) 555-2671"),
    ("ip_address", "from 192.168.1.20:8080", "192.168.1.20"),
    ("ip_address", "host 2001:db8:85a3::8a2e:370:7334 up", "2001:db8:85a3::8a2e:370:7334"),
]
LEFT_ALONE = [
    "card-like but not Luhn-valid: 4111 1111 1111 1112",
    "a millisecond timestamp 1700000000000 is not a card",
    "a fraction 0.4111111111111111 and 4111111111111111.5 are not cards",
    # a tau2-bench trace id: 35246-6684-4425-8 is 14 digits with a card prefix and Luhn-valid
    "trace fca35246-6684-4425-8dca-8f79be13bf24 and ids x4111111111111111 or 4111111111111111_b",
    "loopback 127.0.0.1 and unspecified 0.0.0.0 stay",
    "at 10:20:30 on 2025-03-01 the job ran",
    "version 1.2.3 and 1.2.3.4.5 are not addresses",
    "std::vector<int> and a::b",
    "password: string (the schema type, not a secret)",
    "api_key: anthropic_api_key() and token=${API_TOKEN}",
    "### Ensuring Basic Connectivity for your phone",
    "order 12345 shipped, total 1 234 567",
    "task-force and sk-short",
]


@pytest.mark.parametrize(("kind", "text", "value"), CAUGHT)
def test_each_rule_catches_its_kind(kind, text, value):
    findings = find(text)
    assert [f.kind for f in findings] == [kind]
    if value is not None:
        assert text[findings[0].start : findings[0].end] == value


@pytest.mark.parametrize("text", LEFT_ALONE)
def test_look_alikes_are_left_alone(text):
    assert find(text) == []


def conversation(trace_id: str, *texts: str, arguments: dict | None = None) -> Conversation:
    messages = [message("user", texts[0])]
    if arguments is not None:
        messages.append(
            message(
                "assistant",
                None,
                tool_calls=[
                    {"id": "c1", "type": "function", "function": {"name": "login", "arguments": arguments}}
                ],
            )
        )
        messages.append(message("tool", texts[1], tool_call_id="c1", name="login"))
    messages += [message("assistant", t) for t in texts[2 if arguments is not None else 1 :]]
    return Conversation(trace_id, None, "unknown", None, messages, [])


# The rules that run on every text, in their plain form: the shipped patterns open with a character
# rather than a lookbehind, for speed (see traceforge.export.redact), and must match exactly these.
PLAIN_FORMS = {
    "card_number": [r"(?<![\w.,-])\d(?:[ -]?\d){12,18}(?![\w-]|[.,]\d)"],
    "ip_address": [  # one per rule: IPv4, IPv6
        r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)",
        r"(?<![\w:])[0-9A-Fa-f]{1,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])",
    ],
}
# The two phone rules together (the priority between them picks what one pattern's scan would).
PLAIN_PHONE = (
    r"(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\w])"
    r"|(?<![\w(])(?:\(\d{3}\)\s?|\d{3}[-. ])\d{3}[-. ]\d{4}(?!\w)"
)


def _spans(pattern: re.Pattern, text: str) -> list[tuple[int, int]]:
    return [m.span() for m in pattern.finditer(text)]


# Texts made of the pieces these patterns are built from: digit groups, separators, hex words, and
# the characters their lookarounds test.
PIECES = [
    "4111",
    "1111",
    "378282",
    "555",
    "123",
    "4567",
    "10",
    "0",
    "7",
    "+",
    "+44",
    "+1",
    " ",
    "-",
    ".",
    ",",
]
PIECES += ["(", ")", ":", "::", "fe80", "db8", "a", "F", "x", "_", "/", "@", "\n"]
PIECES += ["10.0.0.7", "(415) 555-2671", "555-123-4567", "4111 1111 1111 1111", "+44 20 7946 0958"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=24).map("".join))
def test_fast_patterns_match_what_their_plain_forms_match(text):
    for kind, plain in PLAIN_FORMS.items():
        rules = [rule for rule in RULES if rule.kind == kind]
        assert [_spans(r.pattern, text) for r in rules] == [_spans(re.compile(p), text) for p in plain], kind
    phones = [(priority, rule) for priority, rule in enumerate(RULES) if rule.kind == "phone"]
    found = _resolve(
        [
            Finding(*m.span(), "phone", priority)
            for priority, rule in phones
            for m in rule.pattern.finditer(text)
        ]
    )
    assert [(f.start, f.end) for f in found] == _spans(re.compile(PLAIN_PHONE), text)


# Whole texts of each kind caught, look-alikes and plain words: a conversation's messages and
# arguments are made of them.
FRAGMENTS = [text for _, text, _ in CAUGHT] + LEFT_ALONE + ["the weather is fine", "ok", "", "Key", "TOKEN"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=4).map(" ".join), min_size=1, max_size=6),
    st.lists(st.sampled_from(FRAGMENTS), max_size=3),
)
def test_rules_chosen_for_the_whole_trace_redact_as_every_rule_on_every_text(contents, argument_values):
    """`redact` tries on each text only the rules whose hints occur somewhere in the trace
    (`rules_for`): the redacted trace and the counts are what trying every rule gives."""
    said = [message("user" if i % 2 else "assistant", text) for i, text in enumerate(contents)]
    said[0]["tool_calls"] = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": argument_values}}}
    ]
    conversation = Conversation("trace", "work", "unknown", None, said, [])
    chosen, chosen_counts = redact(conversation)
    with patch.object(redact_module, "rules_for", lambda texts: redact_module.PRIORITIZED_RULES):
        every, every_counts = redact(conversation)
    assert chosen.messages == every.messages and chosen_counts == every_counts


def test_same_value_same_placeholder_within_a_trace_and_numbers_restart():
    first, counts = redact(
        conversation(
            "t1", "I am bob@example.com", "mail eve@example.com", "bob@example.com and eve@example.com"
        )
    )
    texts = [m["content"] for m in first.messages]
    assert texts == [
        "I am [REDACTED_EMAIL_1]",
        "mail [REDACTED_EMAIL_2]",
        "[REDACTED_EMAIL_1] and [REDACTED_EMAIL_2]",
    ]
    assert counts == {"email": 4}
    second, _ = redact(conversation("t2", "I am eve@example.com"))
    assert second.messages[0]["content"] == "I am [REDACTED_EMAIL_1]"


def test_secret_fields_and_later_bare_occurrences():
    token = "Zq8" + A
    redacted, counts = redact(
        conversation(
            "t",
            "log in please",
            f"welcome, session {token} and password pw42",
            arguments={"user": "ann", "password": "pw42", "confirm": "pw42", "header": f"Bearer {token}"},
        )
    )
    arguments = redacted.messages[1]["tool_calls"][0]["function"]["arguments"]
    assert arguments["user"] == "ann"
    assert arguments["password"] == arguments["confirm"] == "[REDACTED_SECRET_FIELD_1]"
    assert arguments["header"] == "Bearer [REDACTED_BEARER_TOKEN_1]"
    # the token seen after "Bearer" is caught bare in the result too;
    # a short password only where a rule sees it
    assert redacted.messages[2]["content"] == "welcome, session [REDACTED_BEARER_TOKEN_1] and password pw42"
    assert counts == {"secret_field": 2, "bearer_token": 2}
    assert redacted.messages[1]["tool_calls"][0]["id"] == "c1"  # structure untouched


SECRETS = [
    "ann.lee@example.org",
    FAKE_OPENAI_KEY,
    "hunter2pass",
    "+44 20 7946 0958",
    "10.20.30.40",
    "4111 1111",
]


def everything_written(out: Path, tmp_path: Path) -> str:
    """The text of every file of the export folder, parquet shards decoded through `datasets`."""
    parts = [p.read_text() for p in out.rglob("*") if p.suffix in (".md", ".json", ".jsonl")]
    manifest = json.loads((out / "traceforge-export.json").read_text())
    for config, entry in manifest["configs"].items():
        if entry["format"] == "hf":
            for split in entry["rows"]:
                dataset = load_dataset(str(out), config, split=split, cache_dir=str(tmp_path / "c"))
                parts.append(json.dumps(dataset.to_list()))
    return "\n".join(parts)


@pytest.mark.parametrize(
    ("kind", "fmt"),
    [(k, "hf") for k in ("sft", "parallel", "preference", "rl")]
    + [(k, "openai") for k in ("sft", "parallel", "preference")],
)
def test_every_export_is_redacted_by_default(runner, db, tmp_path, kind, fmt):
    out = tmp_path / kind
    args = [
        "export",
        kind,
        "--db",
        str(db),
        "--out",
        str(out),
        "--split",
        "train=1",
        "--format",
        fmt,
        "--json",
    ]
    result = runner.invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    written = everything_written(out, tmp_path)
    for secret in SECRETS:
        assert secret not in written
    assert json.loads(result.output)["redaction"]["enabled"] is True


def test_no_redact_keeps_them_and_says_so(runner, db, tmp_path):
    out = tmp_path / "raw"
    args = ["export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1", "--no-redact"]
    result = runner.invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0
    assert "Redaction is OFF" in result.output
    written = everything_written(out, tmp_path)
    assert all(secret in written for secret in SECRETS)
    assert "Redaction: **off**" in (out / "README.md").read_text()


def test_counts_per_kind_in_the_output(runner, db, tmp_path):
    out = tmp_path / "data"
    result = runner.invoke(
        cli, ["export", "sft", "--db", str(db), "--out", str(out), "--split", "train=1", "--json"]
    )
    counts = json.loads(result.output)["redaction"]["counts"]
    # by hand from export_helpers: the weather trip names one email twice (prompt and arguments);
    # the ops trace has a phone, a URL password, an IP, the key twice (result and arguments), a card
    assert counts == {
        "email": 2,
        "phone": 1,
        "url_password": 1,
        "ip_address": 1,
        "openai_key": 2,
        "card_number": 1,
    }
    manifest = json.loads((out / "traceforge-export.json").read_text())
    assert manifest["configs"]["sft"]["redaction"]["counts"] == counts
    readme = (out / "README.md").read_text()
    assert "Redaction: on; 8 values replaced in 2 traces" in readme
    assert "  - openai_key: 2" in readme
