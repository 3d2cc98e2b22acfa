"""Redaction of secrets and personal data, on by default for every export.

Each finding is replaced by a placeholder naming its kind and a number, `[REDACTED_EMAIL_1]`: the
same value gets the same placeholder everywhere in one trace (a user's email in the prompt, the
tool arguments and the results stays one entity), and numbers restart in the next trace. Every
string is searched: message text, reasoning, tool arguments (keys kept), tool results and tool
definitions.

Two passes over a trace: the first finds values with the rules below; the second replaces them,
and also replaces any other occurrence of a found value of 8 characters or more (a token first seen
after `Bearer ` and later quoted bare is still caught).

Rules, in priority order (where two overlap, the earlier one wins):
- provider keys and tokens: OpenAI, Anthropic, Hugging Face, AWS access keys and secret keys,
  GitHub, GitLab, Google API keys / OAuth tokens / client secrets, Slack tokens and webhooks,
  Stripe, SendGrid, npm, PyPI; JSON Web Tokens;
- private key blocks (`-----BEGIN ... PRIVATE KEY-----` to its END line);
- passwords in URLs (`scheme://user:PASSWORD@host`);
- `Bearer` and `Basic` credentials;
- `password=`, `api_key: `... assignments in text, and the string values of object keys named
  like a secret (password, api_key, access_token, client_secret, ...);
- email addresses; card numbers (13-19 digits, Luhn-valid, with a card network prefix);
  phone numbers (international `+` form with 8-15 digits, or North American `(555) 123-4567`);
- IPv4 and IPv6 addresses (valid per `ipaddress`; IPv6 with at least three groups), except
  loopback and unspecified ones.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from traceforge.export.source import Conversation

LITERAL_MIN_CHARS = 8
SECRET_KEYS = re.compile(
    r"^(password|passwd|pwd|passphrase|secret|client_secret|api_?key|access_?token|refresh_?token"
    r"|auth_?token|private_?key|credentials?)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern
    group: int = 0  # the group holding the value to replace
    valid: Callable[[str], bool] | None = None
    hints: tuple[str, ...] = ()  # lowercase substrings one of which a match must contain (a fast skip)


def _luhn(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        n = int(char)
        if index % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


_CARD_PREFIX = re.compile(r"^(4|5[1-5]|2[2-7]|3[47]|3[068]|35|6011|64[4-9]|65|62)")


def _card(text: str) -> bool:
    digits = re.sub(r"[ -]", "", text)
    return 13 <= len(digits) <= 19 and bool(_CARD_PREFIX.match(digits)) and _luhn(digits)


def _phone(text: str) -> bool:
    return 8 <= len(re.sub(r"\D", "", text)) <= 15


def _ip(text: str) -> bool:
    if ":" in text:  # IPv6: at least three groups and a digit, so `a::b` in code is not one
        groups = [g for g in text.split(":") if g]
        if len(groups) < 3 or not any(c.isdigit() for c in text):
            return False
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    return not (address.is_loopback or address.is_unspecified)


def _secretish(text: str) -> bool:
    """An assigned value that looks like a credential rather than prose or code: no brackets (a call,
    a `${VAR}` template), and a digit, mixed case or a symbol (not `string`, `anthropic_api_key`)."""
    if any(c in text for c in "()[]{}"):
        return False
    return (
        any(c.isdigit() for c in text)
        or (any(c.isupper() for c in text) and any(c.islower() for c in text))
        or any(c in "!@#$%^*+=/~?" for c in text)
    )


def _basic_credentials(text: str) -> bool:
    """Base64 of `user:password`, as HTTP Basic auth sends it (not the word after "Basic")."""
    try:
        decoded = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return b":" in decoded and decoded.isascii()


RULES: list[Rule] = [
    Rule(
        "private_key", re.compile(r"-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?-----END[A-Z ]*PRIVATE KEY-----")
    ),
    Rule("anthropic_key", re.compile(r"\bsk-ant-[a-z]+\d*-[A-Za-z0-9_-]{20,}"), hints=("sk-ant-",)),
    Rule(
        "openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}"), hints=("sk-",)
    ),
    Rule("hf_token", re.compile(r"\b(?:hf|api_org)_[A-Za-z0-9]{30,}\b"), hints=("hf_", "api_org_")),
    Rule(
        "aws_access_key",
        re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"),
        hints=("akia", "asia", "abia", "acca", "agpa", "aida", "aroa"),
    ),
    Rule(
        "aws_secret_key",
        re.compile(r"(?i)aws.{0,20}?(?:secret|private).{0,20}?['\"=:\s]([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"),
        group=1,
        hints=("aws",),
    ),
    Rule(
        "github_token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
        hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    Rule("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), hints=("glpat-",)),
    Rule("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), hints=("aiza",)),
    Rule("google_oauth_token", re.compile(r"\bya29\.[0-9A-Za-z_-]{20,}"), hints=("ya29.",)),
    Rule("google_client_secret", re.compile(r"\bGOCSPX-[A-Za-z0-9_-]{20,}"), hints=("gocspx-",)),
    Rule(
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
        hints=("hooks.slack.com",),
    ),
    Rule(
        "slack_token",
        re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}|\bxapp-\d-[A-Za-z0-9-]{10,}"),
        hints=("xox", "xapp-"),
    ),
    Rule(
        "stripe_key",
        re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|\bwhsec_[A-Za-z0-9]{16,}"),
        hints=("_live_", "_test_", "whsec_"),
    ),
    Rule("sendgrid_key", re.compile(r"\bSG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}"), hints=("sg.",)),
    Rule("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), hints=("npm_",)),
    Rule("pypi_token", re.compile(r"\bpypi-AgE[A-Za-z0-9_-]{50,}"), hints=("pypi-",)),
    Rule(
        "jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), hints=("eyj",)
    ),
    Rule(
        "url_password",
        re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s/:@]+:([^\s/@]+)@"),
        group=1,
        hints=("://",),
    ),
    Rule(
        "bearer_token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/-]{16,}=*)"), group=1, hints=("bearer",)
    ),
    Rule(
        "basic_auth",
        re.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"),
        group=1,
        valid=_basic_credentials,
        hints=("basic",),
    ),
    Rule(
        "secret_assignment",
        re.compile(
            r"(?i)\b(?:password|passwd|pwd|secret|client[_-]?secret|api[_-]?key|access[_-]?token"
            r"|auth[_-]?token)[\"']?\s*[:=]\s*[\"']?([^\s\"'`,;&<>]{6,})"
        ),
        group=1,
        valid=_secretish,
        hints=("pass", "pwd", "secret", "key", "token"),
    ),
    Rule("email", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), hints=("@",)),
    # The rules below run on every text (digits are everywhere), so each pattern opens with the
    # character it must start with and checks what precedes it after that, as `(?<!X)\d` reads
    # `\d(?<!X\d)`: a pattern opening with a lookbehind is tried at every position of the text, one
    # opening with a character class only where that character is (2-5x faster on tool results).
    # tests/test_redact.py checks each against its plain form.
    # A card number: not the digits of a decimal fraction, of a longer number, or of a word (a
    # UUID's `fca35246-6684-4425-8dca-…` holds 14 digits that pass the card checks).
    Rule("card_number", re.compile(r"\d(?<![\w.,-]\d)(?:[ -]?\d){12,18}(?![\w-]|[.,]\d)"), valid=_card),
    # A phone number: international (+ and 8-15 digits), or North American: (555) 123-4567, 555-123-4567.
    Rule(
        "phone",
        re.compile(r"\+(?<![\w+]\+)[1-9]\d{0,2}(?:[ .-]?\(?\d{1,4}\)?){2,5}(?![\w])"),
        valid=_phone,
        hints=("+",),
    ),
    Rule(
        "phone",
        re.compile(r"[(\d](?<![\w(][(\d])(?:(?<=\()\d{3}\)\s?|(?<=\d)\d{2}[-. ])\d{3}[-. ]\d{4}(?!\w)"),
        valid=_phone,
    ),
    Rule(
        "ip_address",
        re.compile(r"\d(?<![\w.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?![\w]|\.\d)"),
        valid=_ip,
        hints=(".",),
    ),
    Rule(
        "ip_address",
        re.compile(r"[0-9A-Fa-f](?<![\w:][0-9A-Fa-f])[0-9A-Fa-f]{0,3}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])"),
        valid=_ip,
        hints=(":",),
    ),
]
SECRET_FIELD = "secret_field"


@dataclass(frozen=True)
class Finding:
    start: int
    end: int
    kind: str
    priority: int


PRIORITIZED_RULES = list(enumerate(RULES))  # (priority, rule): lower numbers win overlaps


def find(text: str, rules: list[tuple[int, Rule]] = PRIORITIZED_RULES) -> list[Finding]:
    """Non-overlapping findings in `text`, in order; where two overlap, the higher-priority rule
    wins. `rules`: those to try (`rules_for` a trace's texts), with their priorities.

    >>> [(f.kind, f.start) for f in find("mail bob@example.com from 10.1.2.3")]
    [('email', 5), ('ip_address', 26)]
    """
    candidates = []
    lowered = text.lower()
    for priority, rule in rules:
        if rule.hints and not any(hint in lowered for hint in rule.hints):
            continue
        for match in rule.pattern.finditer(text):
            value = match.group(rule.group)
            if not value or (rule.valid is not None and not rule.valid(value)):
                continue
            candidates.append(Finding(match.start(rule.group), match.end(rule.group), rule.kind, priority))
    return _resolve(candidates)


def rules_for(texts: Iterable[str]) -> list[tuple[int, Rule]]:
    """The rules that can find something in one of `texts`: those without hints, and those with a
    hint somewhere in them (a rule's hint is in every text it matches). One search of all of a
    trace's texts for each hint, instead of one per text, where most traces hold few hints.

    >>> [rule.kind for _, rule in rules_for(["call me at noon"]) if rule.hints]
    []
    >>> [rule.kind for _, rule in rules_for(["call me at noon", "mail bob@example.com"]) if rule.hints]
    ['email', 'ip_address']
    """
    lowered = "\n".join(texts).lower()
    return [
        (priority, rule)
        for priority, rule in PRIORITIZED_RULES
        if not rule.hints or any(hint in lowered for hint in rule.hints)
    ]


def _resolve(candidates: list[Finding]) -> list[Finding]:
    chosen: list[Finding] = []
    for finding in sorted(candidates, key=lambda f: (f.priority, f.start)):
        if all(finding.end <= c.start or finding.start >= c.end for c in chosen):
            chosen.append(finding)
    return sorted(chosen, key=lambda f: f.start)


class TraceRedactor:
    """Redacts one trace: findings map to placeholders numbered per kind, in order of appearance.
    `rules`: those worth trying on its texts (`rules_for`), all by default."""

    def __init__(self, rules: list[tuple[int, Rule]] = PRIORITIZED_RULES) -> None:
        self.rules = rules
        self.placeholders: dict[str, str] = {}  # value -> placeholder
        self.kind_of: dict[str, str] = {}
        self.numbers: Counter = Counter()
        self.counts: Counter = Counter()  # kind -> occurrences replaced
        self.findings: dict[str, list[Finding]] = {}  # text -> its findings, from the first pass

    def learn(self, value: Any, key: str | None = None) -> None:
        """First pass: register every finding in a JSON value (strings, lists, objects).

        `key` is the object key the value sits under: a string under a secret-like key (password,
        api_key...) is a finding as a whole."""
        if isinstance(value, str):
            if key is not None and SECRET_KEYS.match(key) and value:
                self._register(value, SECRET_FIELD)
                return
            self.findings[value] = find(value, self.rules)
            for finding in self.findings[value]:
                self._register(value[finding.start : finding.end], finding.kind)
        elif isinstance(value, list):
            for item in value:
                self.learn(item)
        elif isinstance(value, dict):
            for item_key, item in value.items():
                self.learn(item, str(item_key))

    def apply(self, value: Any) -> Any:
        """Second pass: the JSON value with every finding, and every other occurrence of a found
        value of `LITERAL_MIN_CHARS` or more, replaced; a string equal to a found value is replaced
        whole whatever its length."""
        if isinstance(value, str):
            if value in self.placeholders:
                self.counts[self.kind_of[value]] += 1
                return self.placeholders[value]
            return self._replace(value)
        if isinstance(value, list):
            return [self.apply(item) for item in value]
        if isinstance(value, dict):
            return {item_key: self.apply(item) for item_key, item in value.items()}
        return value

    def _register(self, value: str, kind: str) -> None:
        if value not in self.placeholders:
            self.numbers[kind] += 1
            self.placeholders[value] = f"[REDACTED_{kind.upper()}_{self.numbers[kind]}]"
            self.kind_of[value] = kind

    def _replace(self, text: str) -> str:
        spans = [(f.start, f.end) for f in self.findings[text]]
        for value in self.placeholders:
            if len(value) >= LITERAL_MIN_CHARS:
                start = text.find(value)
                while start != -1:
                    spans.append((start, start + len(value)))
                    start = text.find(value, start + 1)
        if not spans:
            return text
        out, position = [], 0
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            if start < position:
                continue
            value = text[start:end]
            out.append(text[position:start])
            out.append(self.placeholders[value])
            self.counts[self.kind_of[value]] += 1
            position = end
        out.append(text[position:])
        return "".join(out)


TEXT_FIELDS = ("content", "reasoning_content")


def _strings(value: Any) -> Iterator[str]:
    """The strings in a JSON value (not its objects' keys)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)


def redact(conversation: Conversation) -> tuple[Conversation, Counter]:
    """The conversation with secrets and personal data replaced, and the occurrences per kind.

    Searched: message text and reasoning, tool call arguments (values, not keys), tool results,
    the tool definitions' descriptions and parameter schemas, and the trace id and workload name
    that rows publish (a gateway may key sessions by the user's email). Roles, tool call ids and
    tool names are structure, left as they are.

    >>> from traceforge.export.source import Conversation, message
    >>> said = [message("user", "I am bob@example.com"), message("assistant", "Hi bob@example.com")]
    >>> c = Conversation("t", None, "unknown", None, said, [])
    >>> redacted, counts = redact(c)
    >>> redacted.messages[1]["content"], dict(counts)
    ('Hi [REDACTED_EMAIL_1]', {'email': 2})
    """
    searched: list[Any] = []
    for m in conversation.messages:
        searched.extend(m[key] for key in TEXT_FIELDS)
        searched.extend(call["function"]["arguments"] for call in m["tool_calls"] or [])
    for tool in conversation.tools:
        searched.extend((tool["function"].get("description"), tool["function"].get("parameters")))
    searched.extend((conversation.trace_id, conversation.workload))
    redactor = TraceRedactor(rules_for(text for value in searched for text in _strings(value)))
    for value in searched:
        redactor.learn(value)
    if not redactor.placeholders:
        return conversation, Counter()
    messages = []
    for m in conversation.messages:
        m = dict(m)
        for key in TEXT_FIELDS:
            m[key] = redactor.apply(m[key])
        if m["tool_calls"]:
            m["tool_calls"] = [
                {
                    **call,
                    "function": {
                        **call["function"],
                        "arguments": redactor.apply(call["function"]["arguments"]),
                    },
                }
                for call in m["tool_calls"]
            ]
        messages.append(m)
    tools = []
    for tool in conversation.tools:
        function = dict(tool["function"])
        for key in ("description", "parameters"):
            if key in function:
                function[key] = redactor.apply(function[key])
        tools.append({**tool, "function": function})
    redacted = conversation.with_messages(messages)
    redacted.tools = tools
    redacted.published_trace_id = redactor.apply(conversation.trace_id)
    if conversation.workload is not None:
        redacted.published_workload = redactor.apply(conversation.workload)
    return redacted, redactor.counts
