"""Property-based tests (hypothesis) of every adapter and of the dependency inference.

Adapters, on each format's well-formed files (`corpus.SEEDS`):
- new content in well-formed records (every piece of free text replaced, consistently, by random
  text: quotes, newlines, markup, emoji, control characters) is detected as the same format and
  gives the same structure: as many traces, LLM calls, tool calls and messages;
- mutated records (wrong types, removed keys, odd values, records dropped, duplicated or shuffled,
  ids made to collide, parents made their own parents) never crash an adapter, whether detection
  picks it or it is forced, and the adapter's accounting holds.

Dependency inference (`traceforge.analysis.deps.infer`, `dag.schedule`), on random agent runs
ingested into a store:
- every edge points forward: from an earlier turn to a later one, never within a turn;
- no call moves across a user message in the parallel schedule, and every edge is respected by it;
- adding an unrelated call anywhere never removes a dependency between the other calls.

Reading in chunks (`traceforge.ingest.stream`): any JSON array of records, laid out any way, and any
CSV table (cells with commas, quotes and line breaks, rows that do not fit), cut into chunks of any
size, plain or gzip, gives what a whole read gives: the same records and rejects, or the same
reason the file is not records.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from accounting import check_parse_result
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from seed_traces import SEEDS, dump, get_at, paths_in, read_back, read_seed, replace_at

from traceforge import store
from traceforge.analysis import deps
from traceforge.analysis.dag import schedule
from traceforge.analysis.deps import infer, read_traces
from traceforge.ingest import detect, openai_chat, tau2
from traceforge.ingest.parallel import write_batch
from traceforge.ingest.writer import ParsedFile

SEED_FILES = [(fmt, path) for fmt, paths in sorted(SEEDS.items()) for path in paths]
SEED_IDS = [f"{fmt}:{path.name}" for fmt, path in SEED_FILES]

# Keys whose strings are names, kinds or references the formats match on, not free text.
STRUCTURAL_KEYS = {
    "name",
    "type",
    "role",
    "model",
    "id",
    "kind",
    "run_type",
    "action",
    "source",
    "observation",
}
# Texts a format recognises by their words (tau2's canned greeting is no LLM call).
MEANINGFUL_TEXTS = {tau2.DEFAULT_GREETING}
FREE_TEXT = st.lists(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
    | st.sampled_from(["<script>alert(1)</script>", '"', "\\", "\n", "\r\n", "\x00", "\u202e", "😀"]),
    max_size=5,
).map("".join)


def structure(records: list, fmt: str, path: Path) -> tuple:
    """What an adapter made of records: its name and the shape of every trace."""
    adapter = detect.detect(records[: detect.SAMPLE_SIZE])
    assert adapter is not None
    assert fmt == adapter.FORMAT
    result = adapter.parse(records, str(path))
    check_parse_result(result)
    return (
        result.records,
        len(result.rejects),
        sorted(result.skipped.items()),
        sorted((len(t.llm_calls), len(t.tool_calls), len(t.messages)) for t in result.traces),
    )


def is_free_text(key: Any, text: str) -> bool:
    return (
        key not in STRUCTURAL_KEYS
        and text not in MEANINGFUL_TEXTS
        and len(text) >= 8
        and (" " in text or "\n" in text)
    )


def with_new_text(value: Any, new_text, key: Any = None) -> Any:
    """`value` with each free-text string replaced by `new_text(old)`; JSON held in a string (OTel
    attributes, Langfuse cells) is changed inside and written back."""
    if isinstance(value, dict):
        return {k: with_new_text(v, new_text, k) for k, v in value.items()}
    if isinstance(value, list):
        return [with_new_text(v, new_text, key) for v in value]
    if isinstance(value, str):
        if value[:1] in "[{":
            try:
                inner = json.loads(value)
            except ValueError:
                inner = None
            if isinstance(inner, dict | list):
                return json.dumps(with_new_text(inner, new_text, key))
        if is_free_text(key, value):
            return new_text(value)
    return value


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.parametrize(("fmt", "path"), SEED_FILES, ids=SEED_IDS)
@given(data=st.data())
def test_new_content_in_well_formed_records_keeps_format_and_structure(fmt, path, data):
    records, lines = read_seed(path)
    expected = structure(read_back(dump(records, lines), path)[0], fmt, path)
    replacements: dict[str, str] = {}

    def new_text(old: str) -> str:
        if old not in replacements:  # the same text stays the same text: links by content hold
            replacements[old] = data.draw(FREE_TEXT, label="text") + f" #{len(replacements)}"
        return replacements[old]

    changed = [with_new_text(r, new_text) for r in records]
    assert structure(read_back(dump(changed, lines), path)[0], fmt, path) == expected


ODD_VALUES = [None, True, 0, -1, 2**64, 10**30, 1.5, "", "x", "2024-13-45T99:99:99", [], {}, [None], {"": 0}]
PARENT_KEYS = ("parentUuid", "parentSpanId", "parent_run_id", "parentObservationId", "parent_id", "cause")
ID_KEYS = ("id", "uuid", "spanId", "tool_call_id", "tool_use_id", "call_id", "traceId", "sessionId")


@st.composite
def mutations(draw):
    """A list of (operation, record number, path number, value) to apply to a file's records."""
    operation = st.sampled_from(["set", "delete", "duplicate", "drop", "shuffle", "same-id", "own-parent"])
    return draw(
        st.lists(
            st.tuples(operation, st.integers(0, 10**6), st.integers(0, 10**6), st.sampled_from(ODD_VALUES)),
            min_size=1,
            max_size=6,
        )
    )


def mutate(records: list, steps: list) -> list:
    records = copy.deepcopy(records)
    for operation, which, where, value in steps:
        if not records:
            break
        index = which % len(records)
        record = records[index]
        paths = list(paths_in(record))
        if operation == "duplicate":
            records.insert(index, copy.deepcopy(record))
        elif operation == "drop" and len(records) > 1:
            del records[index]
        elif operation == "shuffle":
            records = records[index:] + records[:index]
        elif operation in ("set", "delete") and paths:
            path = paths[where % len(paths)]
            if operation == "set":
                replace_at(record, path, copy.deepcopy(value))
            else:
                del get_at(record, path[:-1])[path[-1]]
        elif operation in ("same-id", "own-parent"):
            keys = ID_KEYS if operation == "same-id" else PARENT_KEYS
            targets = [p for p in paths if p[-1] in keys and isinstance(get_at(record, p), str | int)]
            if targets:
                path = targets[where % len(targets)]
                own = next((p for p in paths if p[:-1] == path[:-1] and p[-1] in ID_KEYS), None)
                replace_at(record, path, get_at(record, own) if own else "dup-id")
    return records


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@pytest.mark.parametrize(("fmt", "path"), SEED_FILES, ids=SEED_IDS)
@given(steps=mutations())
def test_mutated_records_never_crash_an_adapter(fmt, path, steps):
    records, lines = read_seed(path)
    changed = mutate(records, steps)
    if not lines:  # a document stays one document (a list of them once records were duplicated)
        changed = [changed[0] if len(changed) == 1 else changed]
    read, _ = read_back(dump(changed, lines), path)
    for adapter in {detect.by_name(fmt), detect.detect(read[: detect.SAMPLE_SIZE])} - {None}:
        result = adapter.parse(read, str(path))
        check_parse_result(result)


# --------------------------------------------------------------------------- dependency inference

TOOLS = ["search_orders", "get_order", "cancel_order", "get_weather", "lookup", "send_email", "read_file"]


@st.composite
def agent_runs(draw):
    """An OpenAI chat transcript of 1-3 user turns, each with 1-4 tool-calling turns of 1-3 calls.

    Arguments take values from earlier results (data dependencies), from the user's words, or
    fresh ones; results bring new id-like values."""
    messages: list[dict] = [{"role": "system", "content": "You are an order assistant."}]
    results: list[str] = []  # values that results brought
    number = 0
    for segment in range(draw(st.integers(1, 3))):
        user_words = [f"ORD-{segment}{i}77" for i in range(2)]
        messages.append({"role": "user", "content": f"Please check {' and '.join(user_words)} today."})
        for _ in range(draw(st.integers(1, 4))):
            calls, answers = [], []
            for _ in range(draw(st.integers(1, 3))):
                call_id = f"call_{number}"
                source = draw(st.sampled_from(["result", "user", "fresh"]))
                if source == "result" and results:
                    value = draw(st.sampled_from(results))
                elif source == "user":
                    value = draw(st.sampled_from(user_words))
                else:
                    value = f"Q{number}X{draw(st.integers(1000, 9999))}"
                name = draw(st.sampled_from(TOOLS))
                calls.append(openai_chat_call(call_id, name, {"order_id": value}))
                brought = f"W-{number}{draw(st.integers(100000, 999999))}"
                answers.append(
                    {"role": "tool", "tool_call_id": call_id, "content": f'{{"ref": "{brought}"}}'}
                )
                results.append(brought)
                number += 1
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages.extend(answers)
        messages.append({"role": "assistant", "content": "Done."})
    return messages


def openai_chat_call(call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def analysed(messages: list[dict]) -> tuple[Any, dict[str, int]]:
    """Ingest one transcript into an in-memory store and infer its dependencies; also the index
    of each call by its source id."""
    con = store.connect(":memory:")
    try:
        records, _ = read_back(json.dumps({"messages": messages}), Path("run.json"))
        result = openai_chat.parse(records, "run.json")
        write_batch(con, [ParsedFile("run.json", "0" * 64, 0, openai_chat.FORMAT, result)], set())
        [(trace_id,)] = con.execute("SELECT trace_id FROM traces").fetchall()
        (trace,) = read_traces(con, [trace_id])
    finally:
        con.close()
    inference = infer(trace)
    return inference, {call.source_id: call.index for call in trace.calls}


def edge_pairs(inference, mode: str) -> set[tuple[str, str]]:
    calls = inference.trace.calls
    return {(calls[e.src].source_id, calls[e.dst].source_id) for e in inference.edges_for(mode)}


DEPS_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@DEPS_SETTINGS
@given(agent_runs())
def test_edges_point_forward_and_the_schedule_never_crosses_a_user_message(messages):
    inference, _ = analysed(messages)
    calls = inference.trace.calls
    for mode in ("conservative", "loose"):
        for edge in inference.edges_for(mode):
            src, dst = calls[edge.src], calls[edge.dst]
            assert src.turn < dst.turn and src.segment <= dst.segment, (edge, src.turn, dst.turn)
        plan = schedule(inference, mode)
        for edge in plan.edges:
            assert plan.levels[edge.src] < plan.levels[edge.dst], edge
        for a in calls:
            for b in calls:
                if a.segment < b.segment:
                    assert plan.levels[a.index] < plan.levels[b.index], (a.tool_call_id, b.tool_call_id)
        assert plan.min_turns <= plan.observed_turns == len({c.turn for c in calls})


@DEPS_SETTINGS
@given(agent_runs(), st.data())
def test_an_unrelated_call_never_removes_a_dependency(messages, data):
    before, _ = analysed(messages)
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("tool_calls")]
    where = data.draw(st.sampled_from(turns), label="turn")
    unrelated = openai_chat_call("call_unrelated", "lookup", {"order_id": "ZZ-unrelated-0000"})
    result = {"role": "tool", "tool_call_id": "call_unrelated", "content": '{"ref": "nothing-new-here"}'}
    changed = copy.deepcopy(messages)
    if data.draw(st.booleans(), label="same turn"):  # issued beside the turn's other calls
        changed[where]["tool_calls"].append(unrelated)
        changed.insert(where + 1 + len(changed[where]["tool_calls"]) - 1, result)
    else:  # a turn of its own, just before this one
        changed[where:where] = [{"role": "assistant", "content": None, "tool_calls": [unrelated]}, result]
    after, _ = analysed(changed)
    for mode in ("conservative", "loose"):
        assert edge_pairs(before, mode) <= edge_pairs(after, mode), mode


# Text made of the characters tokenisation turns on: word characters, the in-token punctuation,
# separators, digits with commas and dots, URLs, and a few non-ASCII letters and spaces.
_TOKENISER_TEXT = st.lists(
    st.sampled_from([*"abZ09_-./@ ,:;\n\t\"'(){}[]<>`$", "://", "1,234", "4.50", "é", "ß", "\u2014"]),
    max_size=60,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TOKENISER_TEXT)
def test_the_split_tokeniser_gives_the_regular_expression_s_tokens(text):
    """`tokens` splits ASCII text rather than matching `_TOKEN` per token, and `token_set` strips
    only ragged runs: both must give exactly what the regular expression gives."""
    folded = deps._THOUSANDS.sub("", text).casefold()
    expected = [deps.canonical(t) if "." in t else t for t in deps._TOKEN.findall(folded)]
    assert deps.tokens(text) == expected
    assert deps.token_set(text) == set(expected)


# --- reading in chunks ---------------------------------------------------------------------------

_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
_RECORD = st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=5) | st.lists(_JSON_VALUES, max_size=4)
# records, then any elements: bare numbers, strings and literals too, which a chunk can end inside
_RECORDS = st.builds(
    lambda first, rest: [first, *rest], _RECORD, st.lists(_RECORD | _JSON_VALUES, max_size=40)
)


def _read_both(data: bytes, name: str, chunk: int, compressed: bool) -> tuple[tuple, tuple]:
    """What `stream.open_records` gives in chunks of `chunk` bytes, and what a whole read gives:
    the records and rejects, or why the file as a whole is not records."""
    import gzip
    import tempfile

    from traceforge.ingest import stream
    from traceforge.ingest.sources import SourceError, SourceFile, read_records

    def outcome(read) -> tuple:
        rejects: list = []
        try:
            records = [(r.line, r.value, r.raw) for r in read(rejects)]
        except SourceError as exc:
            return ("failed", str(exc))
        return records, [(r.line, r.error, r.raw) for r in rejects]

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(gzip.compress(data) if compressed else data)
        saved, stream.CHUNK_BYTES = stream.CHUNK_BYTES, chunk
        try:
            streamed = outcome(lambda rejects: stream.open_records(path, rejects).records)
        finally:
            stream.CHUNK_BYTES = saved
    whole = outcome(lambda rejects: read_records(SourceFile(path, data, "", len(data), False), rejects))
    return streamed, whole


@settings(max_examples=150, deadline=None)
@given(
    records=_RECORDS,
    separator=st.sampled_from([",", ",\n", ", ", ",\r\n", "\n,\t"]),
    indent=st.sampled_from([None, 1, 2]),
    ensure_ascii=st.booleans(),
    chunk=st.sampled_from([48, 128, 700]),
    compressed=st.booleans(),
    lead=st.sampled_from(["", "\n", "\r\n  ", "\ufeff", "\ufeff\n"]),
)
# found by this test: the chunk ended at `1.3510798882109872e`, which parsed as a number ending
# before the `e`, so the next chunk's `+16` read as a missing comma
@example(
    records=[[-2210544551123], {"": "á$º", "f¢ã": None}, 1.3510798882109872e16],
    separator=",\r\n",
    indent=2,
    ensure_ascii=True,
    chunk=48,
    compressed=False,
    lead="",
)
def test_any_json_array_read_in_chunks_gives_what_a_whole_read_gives(
    records, separator, indent, ensure_ascii, chunk, compressed, lead
):
    """Elements cut anywhere by the chunks (inside strings, escapes, numbers, multi-byte
    characters), laid out any way, after blank lines or a BOM, give the same records, element
    numbers and rejects."""
    elements = [json.dumps(r, indent=indent, ensure_ascii=ensure_ascii) for r in records]
    data = (lead + "[\n" + separator.join(elements) + "\n]\n").encode()
    streamed, whole = _read_both(data, "export.json", chunk, compressed)
    assert streamed == whole


_LINE_NOISE = st.sampled_from(["", "   ", "\t", "oops", '{"cut": ', "[1, 2", "\ufeff{}", "\udcff"])


@settings(max_examples=150, deadline=None)
@given(
    records=_RECORDS,
    noise=st.lists(st.tuples(st.integers(0, 40), _LINE_NOISE), max_size=6),
    line_end=st.sampled_from(["\n", "\r\n"]),
    ensure_ascii=st.booleans(),
    bom=st.booleans(),
    chunk=st.sampled_from([32, 48, 128, 700]),
    compressed=st.booleans(),
)
# found by this test: a blank first line hid that the first line (a whole array, longer than the
# chunk) was JSON, so the file was read as one JSON array and failed at its second line
@example(
    records=[[[None, 1.0000000000000002e16]], {}],
    noise=[(0, "")],
    line_end="\n",
    ensure_ascii=False,
    bom=False,
    chunk=32,
    compressed=False,
)
@example(  # and a BOM before the blank line
    records=[[[], 1.0000000000000002e16], {}],
    noise=[(0, "")],
    line_end="\n",
    ensure_ascii=False,
    bom=True,
    chunk=32,
    compressed=False,
)
def test_any_json_lines_file_read_in_chunks_gives_what_a_whole_read_gives(
    records, noise, line_end, ensure_ascii, bom, chunk, compressed
):
    """Lines cut anywhere by the chunks, with blank lines, lines that are not JSON or are cut
    short, a BOM (at the start, or inside where files were concatenated), a byte that is not
    UTF-8, either line ending: the same records, line numbers, raw text and rejects."""
    lines = [json.dumps(r, ensure_ascii=ensure_ascii) for r in records]
    for at, line in noise:
        lines.insert(min(at, len(lines)), line)
    text = line_end.join(lines) + line_end
    data = ("\ufeff" if bom else "").encode() + text.encode("utf-8", errors="surrogateescape")
    streamed, whole = _read_both(data, "gateway.jsonl", chunk, compressed)
    assert streamed == whole


_CELLS = st.text(st.sampled_from([*'ab é,"\n\r\t;x1']), max_size=15)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.lists(_CELLS, min_size=2, max_size=4), min_size=1, max_size=40),
    line_end=st.sampled_from(["\n", "\r\n"]),
    chunk=st.sampled_from([48, 128, 700]),
    compressed=st.booleans(),
)
def test_any_csv_table_read_in_chunks_gives_what_a_whole_read_gives(rows, line_end, chunk, compressed):
    """Cells holding commas, quotes and line breaks, rows of any length (those that do not fit the
    header rejected): the same records, raw text, lines and rejects."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator=line_end)
    writer.writerow(["id", "input", "output"])
    writer.writerows(rows)
    streamed, whole = _read_both(out.getvalue().encode(), "export.csv", chunk, compressed)
    assert streamed == whole


_KEYS = st.sampled_from(["a", "b", "0", "metadata", ""])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.text("ab", max_size=2),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(value=_JSON, paths=st.lists(st.lists(_KEYS, min_size=1, max_size=3).map(".".join), max_size=4))
def test_first_is_the_first_path_that_digs_to_a_value(value, paths):
    """`values.first` walks its paths inline (it is called a dozen times per log record): it finds
    what `dig` along each path's keys finds, lists never indexed by a dotted key, falsy values kept."""
    from traceforge.ingest.values import dig, first

    found = (dig(value, *path.split(".")) for path in paths)
    assert first(value, *paths) == next((v for v in found if v is not None), None)
