"""The coding agent: a Claude-style agent working in a small Python repository (`ledgerly`).

Three scripts, chosen by the run's index: fixing a failing test (whose first edit misquotes the
code and fails, then is retried with the exact text it read), explaining code found by grep (the
two files it names read one per LLM call, or in parallel) and then changing it, and adding a
feature after listing a folder and reading two files in parallel. Extended thinking is on, so every
response opens with a thinking block, as the Messages API requires of tool loops with thinking.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from traceforge.samples.scenario import Builder, Scenario, ToolSpec

WORKLOAD = "coding-agent"
MODEL = "claude-sonnet-4-5"

SYSTEM = """You are a coding agent working in the user's repository at /home/dev/ledgerly, a Python 3.12 \
invoicing library (src layout, tests with pytest). Work in small, verifiable steps:
1. Find the relevant code with grep and list_dir before reading whole files.
2. Read a file before editing it. edit_file replaces old_str with new_str, and old_str must match the \
file exactly, including indentation.
3. After any change, run the affected tests with run_command, then the whole suite if they pass.
4. Never commit, push or install packages without being asked.
When you are done, summarise what you changed and why in two or three sentences."""

TOOLS = [
    ToolSpec(
        "list_dir",
        "List the entries of a directory, relative to the repository root.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        (0.1, 0.2),
    ),
    ToolSpec(
        "read_file",
        "Read a text file; returns its lines numbered like `cat -n`.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        (0.1, 0.25),
    ),
    ToolSpec(
        "grep",
        "Search files for a regular expression; returns matching lines as path:line:text.",
        {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "path": {"type": "string", "default": "."}},
            "required": ["pattern"],
        },
        (0.1, 0.4),
    ),
    ToolSpec(
        "edit_file",
        "Replace the single occurrence of old_str in a file with new_str.",
        {
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_str": {"type": "string"},
                "new_str": {"type": "string"},
            },
            "required": ["path", "old_str", "new_str"],
        },
        (0.1, 0.3),
    ),
    ToolSpec(
        "run_command",
        "Run a shell command in the repository root and return its exit code and output.",
        {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout_s": {"type": "integer", "default": 120}},
            "required": ["command"],
        },
        (0.9, 3.0),
    ),
]


@dataclass(frozen=True)
class Bug:
    test: str  # pytest node id
    function: str
    source: str  # the file the function lives in
    text: str  # the file's content
    broken: str  # the exact lines to replace (they occur in `text`)
    misquoted: str  # what the agent first tries to replace (not in `text`)
    fixed: str
    failure: str  # pytest's report of the failing test


DATES = '''"""Parsing and formatting of invoice timestamps."""

from datetime import datetime, timezone

ISO_FORMAT = "%Y-%m-%dT%H:%M:%S"


def parse_timestamp(text: str) -> datetime:
    """Parse an ISO-8601 timestamp; values without an offset are UTC."""
    value = datetime.strptime(text[:19], ISO_FORMAT)
    return value.replace(tzinfo=timezone.utc)


def format_timestamp(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime(ISO_FORMAT) + "Z"
'''

MONEY = '''"""Money amounts as integer cents."""

from decimal import ROUND_HALF_UP, Decimal


def to_cents(amount: str) -> int:
    """'12.345' -> 1235: amounts are rounded half up to whole cents."""
    return int(Decimal(amount) * 100)


def format_cents(cents: int, currency: str = "USD") -> str:
    return f"{cents / 100:,.2f} {currency}"
'''

BUGS = [
    Bug(
        test="tests/test_dates.py::test_parse_offset",
        function="parse_timestamp",
        source="src/ledgerly/dates.py",
        text=DATES,
        broken="    value = datetime.strptime(text[:19], ISO_FORMAT)\n"
        "    return value.replace(tzinfo=timezone.utc)",
        misquoted="    value = datetime.strptime(text, ISO_FORMAT)\n"
        "    return value.replace(tzinfo=timezone.utc)",
        fixed='    value = datetime.fromisoformat(text.replace("Z", "+00:00"))\n'
        "    if value.tzinfo is None:\n        value = value.replace(tzinfo=timezone.utc)\n"
        "    return value.astimezone(timezone.utc)",
        failure="""F                                                                        [100%]
=================================== FAILURES ===================================
______________________________ test_parse_offset _______________________________

    def test_parse_offset():
>       assert parse_timestamp("2026-03-02T09:30:00+02:00").hour == 7
E       AssertionError: assert 9 == 7
E        +  where 9 = datetime.datetime(2026, 3, 2, 9, 30, tzinfo=datetime.timezone.utc).hour

tests/test_dates.py:14: AssertionError
=========================== short test summary info ============================
FAILED tests/test_dates.py::test_parse_offset - AssertionError: assert 9 == 7
1 failed in 0.05s
exit code: 1""",
    ),
    Bug(
        test="tests/test_money.py::test_to_cents_rounds_half_up",
        function="to_cents",
        source="src/ledgerly/money.py",
        text=MONEY,
        broken="    return int(Decimal(amount) * 100)",
        misquoted="    return int(Decimal(amount)*100)",
        fixed='    return int((Decimal(amount) * 100).quantize(Decimal("1"), rounding=ROUND_HALF_UP))',
        failure="""F                                                                        [100%]
=================================== FAILURES ===================================
_________________________ test_to_cents_rounds_half_up _________________________

    def test_to_cents_rounds_half_up():
>       assert to_cents("12.345") == 1235
E       AssertionError: assert 1234 == 1235
E        +  where 1234 = to_cents('12.345')

tests/test_money.py:9: AssertionError
=========================== short test summary info ============================
FAILED tests/test_money.py::test_to_cents_rounds_half_up - AssertionError: assert 1234 == 1235
1 failed in 0.04s
exit code: 1""",
    ),
]

CLIENT = '''"""HTTP client for the ledger API."""

import time

import httpx

from ledgerly.config import Settings, backoff_delays


class LedgerClient:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.http = httpx.Client(base_url=settings.api_url, timeout=settings.timeout_s)

    def get(self, path: str) -> dict:
        for delay in [*backoff_delays(self.settings), None]:
            response = self.http.get(path)
            if response.status_code < 500 or delay is None:
                response.raise_for_status()
                return response.json()
            time.sleep(delay)
        raise AssertionError("unreachable")
'''

CONFIG = '''"""Settings, read from the environment."""

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    api_url: str = os.environ.get("LEDGERLY_API_URL", "https://api.ledgerly.dev")
    timeout_s: float = 10.0
    max_retries: int = 3
    backoff_base_s: float = 0.5


def backoff_delays(settings: Settings) -> list[float]:
    """Seconds to wait before each retry: 0.5, 1, 2, ... (exponential)."""
    return [settings.backoff_base_s * 2**attempt for attempt in range(settings.max_retries)]
'''

CLI = '''"""The `ledgerly` command."""

import click

from ledgerly.report import monthly_totals, render_table


@click.group()
def main() -> None:
    """Invoices from the command line."""


@main.command()
@click.argument("month")
def report(month: str) -> None:
    """Totals per customer for MONTH (YYYY-MM)."""
    click.echo(render_table(monthly_totals(month)))
'''

REPORT = '''"""Monthly totals per customer."""

from ledgerly.store import invoices_for


def monthly_totals(month: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for invoice in invoices_for(month):
        totals[invoice.customer] = totals.get(invoice.customer, 0) + invoice.total_cents
    return totals


def render_table(totals: dict[str, int]) -> str:
    width = max((len(name) for name in totals), default=8)
    return "\\n".join(f"{name:<{width}}  {cents / 100:>12,.2f}" for name, cents in sorted(totals.items()))
'''


def numbered(text: str) -> str:
    """A file's content as `cat -n` shows it."""
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.splitlines(), 1))


def matches(path: str, text: str, needle: str) -> str:
    """What grep prints for the lines of `text` that contain `needle`."""
    return "\n".join(f"{path}:{n}:{line}" for n, line in enumerate(text.splitlines(), 1) if needle in line)


def scenario(rng: random.Random, index: int, parallel: bool) -> Scenario:
    """The `index`-th coding-agent run."""
    script = (fix_failing_test, explain_then_change, add_flag)[index % 3]
    return script(rng, index, parallel)


def _builder(rng: random.Random) -> Builder:
    return Builder(rng, WORKLOAD, True, MODEL, SYSTEM, TOOLS)


def _suite(rng: random.Random) -> str:
    passed = rng.randrange(36, 58)
    seconds = rng.uniform(0.3, 1.4)
    return f"{'.' * passed}{' ' * max(1, 72 - passed)}[100%]\n{passed} passed in {seconds:.2f}s\nexit code: 0"


def fix_failing_test(rng: random.Random, index: int, parallel: bool) -> Scenario:
    bug = BUGS[(index // 3) % len(BUGS)]
    b = _builder(rng)
    b.user(
        rng.choice(
            ["CI is red: `{t}` fails. Can you fix it?", "`{t}` started failing on main, please fix."]
        ).format(t=bug.test)
    )
    run = b.tool("run_command", {"command": f"python -m pytest {bug.test} -q"}, bug.failure, error=True)
    b.llm(
        run,
        reasoning=f"Reproduce the failure first, then find {bug.function} and see how it handles this input.",
    )
    grep = b.tool(
        "grep",
        {"pattern": f"def {bug.function}", "path": "src"},
        matches(bug.source, bug.text, f"def {bug.function}"),
    )
    b.llm(
        grep,
        text=f"Reproduced. Let me find `{bug.function}`.",
        reasoning=f"The assertion fails inside {bug.function}, not in the test; find where it is defined.",
    )
    read = b.tool("read_file", {"path": bug.source}, numbered(bug.text), uses=[(grep, bug.source)])
    b.llm(read, reasoning="Read the whole module before changing it.")
    wrong = b.tool(
        "edit_file",
        {"path": bug.source, "old_str": bug.misquoted, "new_str": bug.fixed},
        f"Error: old_str not found in {bug.source}; no changes made. old_str must match the file exactly.",
        error=True,
    )
    b.llm(
        wrong,
        text=f"The bug is in `{bug.function}`; fixing it.",
        reasoning="The input is truncated or rounded before it is converted; replace that conversion.",
    )
    key_line = bug.broken.splitlines()[0].strip()
    edit = b.tool(
        "edit_file",
        {"path": bug.source, "old_str": bug.broken, "new_str": bug.fixed},
        f"Edited {bug.source}: 1 replacement.",
        retry_of=wrong,
        uses=[(read, key_line)],
    )
    b.llm(edit, reasoning="I misquoted the line. Using the exact text from the file this time.")
    rerun = b.tool(
        "run_command", {"command": f"python -m pytest {bug.test} -q"}, "1 passed in 0.04s\nexit code: 0"
    )
    b.llm(rerun, reasoning="Run the failing test again to confirm the fix.")
    b.llm(
        reasoning="The test passes; summarise.",
        text=f"Fixed `{bug.function}` in {bug.source}; `{bug.test}` passes now.",
    )
    if index % 2 == 0:
        b.user("Thanks! Run the whole suite to be sure nothing else broke.")
        suite = b.tool("run_command", {"command": "python -m pytest -q"}, _suite(rng))
        b.llm(suite, reasoning="Run the full suite quietly.")
        b.llm(
            reasoning="Everything passed.",
            text=f"The whole suite passes ({suite.result.splitlines()[1].split(' in ')[0]}).",
        )
    return b.build()


def explain_then_change(rng: random.Random, index: int, parallel: bool) -> Scenario:
    b = _builder(rng)
    b.user(
        rng.choice(
            [
                "How does the HTTP client retry failed requests, and where is the backoff configured?",
                "Can you explain the retry behaviour of our API client? Where do the delays come from?",
            ]
        )
    )
    grep = b.tool(
        "grep",
        {"pattern": "backoff", "path": "src"},
        matches("src/ledgerly/client.py", CLIENT, "backoff")
        + "\n"
        + matches("src/ledgerly/config.py", CONFIG, "backoff"),
    )
    b.llm(grep, reasoning="The retry loop is probably in client.py; grep for backoff to find both places.")
    reads = [
        b.tool("read_file", {"path": path}, numbered(text), uses=[(grep, path)])
        for path, text in (("src/ledgerly/client.py", CLIENT), ("src/ledgerly/config.py", CONFIG))
    ]
    if parallel and (index // 3) % 2 == 1:
        b.llm(*reads, reasoning="Both files are named in the grep output; read them.")
    else:
        b.llm(reads[0], reasoning="Start with the client, where the loop is.")
        b.llm(reads[1], reasoning="Now the config module, where the delays are computed.")
        b.serial(*reads)
    b.llm(
        reasoning="I have both halves: the loop in client.py and the delays in config.py.",
        text="`LedgerClient.get` retries responses with status ≥ 500: it waits each delay from "
        "`backoff_delays(settings)` and tries again, and after the last delay it raises. The delays are "
        "configured in `ledgerly/config.py`: `backoff_base_s * 2**attempt` for `max_retries` attempts "
        "(0.5 s, 1 s, 2 s by default). 4xx responses are never retried.",
    )
    b.user("Please make the number of retries configurable with LEDGERLY_MAX_RETRIES (default 3).")
    line = "    max_retries: int = 3"
    edit = b.tool(
        "edit_file",
        {
            "path": "src/ledgerly/config.py",
            "old_str": line,
            "new_str": '    max_retries: int = int(os.environ.get("LEDGERLY_MAX_RETRIES", "3"))',
        },
        "Edited src/ledgerly/config.py: 1 replacement.",
        uses=[(reads[1], line.strip())],
    )
    b.llm(edit, reasoning="Settings already reads LEDGERLY_API_URL from the environment; do the same.")
    tests = b.tool(
        "run_command",
        {"command": "python -m pytest -q tests/test_config.py tests/test_client.py"},
        _suite(rng),
    )
    b.llm(tests, reasoning="Run the config and client tests.")
    b.llm(
        reasoning="Tests pass.",
        text="`max_retries` now defaults to `LEDGERLY_MAX_RETRIES` (3 when unset), read like the API URL; "
        "the config and client tests pass.",
    )
    return b.build()


def add_flag(rng: random.Random, index: int, parallel: bool) -> Scenario:
    b = _builder(rng)
    b.user("Add a --json flag to `ledgerly report` that prints the totals as JSON instead of the table.")
    listing = b.tool(
        "list_dir",
        {"path": "src/ledgerly"},
        "__init__.py\ncli.py\nclient.py\nconfig.py\ndates.py\nmoney.py\nreport.py\nstore.py",
    )
    b.llm(listing, reasoning="Find where the command is defined and where the table is rendered.")
    reads = [
        b.tool("read_file", {"path": f"src/ledgerly/{name}"}, numbered(text), uses=[(listing, name)])
        for name, text in (("cli.py", CLI), ("report.py", REPORT))
    ]
    if parallel:
        b.llm(*reads, reasoning="cli.py defines the command, report.py renders the table; read both.")
    else:
        b.llm(reads[0], reasoning="cli.py should define the report command.")
        b.llm(reads[1], reasoning="And report.py renders the table.")
        b.serial(*reads)
    signature = "def report(month: str) -> None:"
    edit = b.tool(
        "edit_file",
        {
            "path": "src/ledgerly/cli.py",
            "old_str": f'@click.argument("month")\n{signature}',
            "new_str": '@click.argument("month")\n@click.option("--json", "as_json", is_flag=True, '
            'help="Print the totals as JSON.")\ndef report(month: str, as_json: bool) -> None:',
        },
        "Edited src/ledgerly/cli.py: 1 replacement.",
        uses=[(reads[0], signature)],
    )
    b.llm(
        edit,
        text="I'll add the option in cli.py and branch on it.",
        reasoning="monthly_totals already returns a dict, so --json only needs a branch in the command.",
    )
    body = "    click.echo(render_table(monthly_totals(month)))"
    branch = b.tool(
        "edit_file",
        {
            "path": "src/ledgerly/cli.py",
            "old_str": body,
            "new_str": "    totals = monthly_totals(month)\n"
            "    click.echo(json.dumps(totals, indent=2) if as_json else render_table(totals))",
        },
        "Edited src/ledgerly/cli.py: 1 replacement.",
    )
    imports = b.tool(
        "edit_file",
        {
            "path": "src/ledgerly/cli.py",
            "old_str": "import click\n",
            "new_str": "import json\n\nimport click\n",
        },
        "Edited src/ledgerly/cli.py: 1 replacement.",
    )
    b.llm(branch, imports, reasoning="Now the branch in the body, and import json at the top.")
    tests = b.tool("run_command", {"command": "python -m pytest -q"}, _suite(rng))
    b.llm(tests, reasoning="Run the suite.")
    b.llm(
        reasoning="All green.",
        text="`ledgerly report MONTH --json` now prints the totals per customer (cents) as JSON; tests pass.",
    )
    return b.build()
