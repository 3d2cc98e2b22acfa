"""Dependency inference: one hand-written trace per rule, ingested through the real store.

Each trace is an OpenAI chat transcript written to tmp_path and read by `ingest_paths`; the
expectations follow from the rule the test names, in both modes where they differ.
"""

from __future__ import annotations

import doctest
import json

import pytest
from dag_helpers import NEUTRAL, both, call, edges, levels, load, pairs, transcript, turn

from traceforge.analysis import dag, deps, effects
from traceforge.analysis.dag import analyze_dependencies, trace_schedule
from traceforge.analysis.effects import ConfigError, DepsConfig, classify, load_config, shell_reads_only

# --- data flow -------------------------------------------------------------------------------------


def test_a_value_first_seen_in_a_result_makes_a_data_edge(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Find my blue lamp order and show it.",
            turn(call("a", "search_orders", {"q": "blue lamp"}, {"order_id": "W-1043", "total": 59.9})),
            turn(call("b", "get_order", {"order_id": "W-1043"}, {"status": "shipped"})),
        ),
    )
    conservative, loose = both(con, "t")
    assert edges(conservative) == {("a", "b", "data")}
    assert edges(loose) == {("a", "b", "data")}
    (edge,) = conservative.edges
    assert edge.evidence == "order_id=W-1043" and edge.confidence >= deps.LOOSE_MIN_CONFIDENCE
    assert conservative.min_turns == 2


def test_a_value_the_user_named_first_is_no_dependency(con, tmp_path):
    # The order id is in get_user's result too, but the user wrote it before: a coincidence.
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Show customer u_8812 and the order W7731021.",
            turn(call("a", "get_user", {"user_id": "u_8812"}, {"orders": ["W7731021", "W1100234"]})),
            turn(call("b", "get_order", {"order_id": "W7731021"}, {"status": "pending"})),
        ),
    )
    conservative, loose = both(con, "t")
    assert edges(conservative) == set() == edges(loose)
    assert conservative.min_turns == 1 and conservative.turns_saved == 1


def test_the_earliest_source_is_credited(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Trace the parcel.",
            turn(call("a", "list_parcels", {}, [{"tracking": "TRK-55120"}])),
            turn(call("b", "get_depot", {"depot": "north"}, {"parcels": ["TRK-55120"], "city": "Leeds"})),
            turn(call("c", "track_parcel", {"tracking": "TRK-55120"}, {"at": "Leeds"})),
        ),
    )
    conservative = trace_schedule(con, "t")
    assert ("a", "c", "data") in edges(conservative)
    assert ("b", "c", "data") not in edges(conservative)


def test_trivial_values_and_stop_words_are_no_evidence(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "List three products and the weather.",
            turn(call("a", "list_products", {"limit": 3}, {"count": 3, "status": "ok", "page": 1})),
            turn(call("b", "get_reviews", {"limit": 3, "page": 1, "status": "ok"}, [])),
        ),
    )
    assert pairs(trace_schedule(con, "t")) == set()


def test_tool_definitions_are_known_before_any_result(con, tmp_path):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_forecast",
                "description": "Forecast for a city.",
                "parameters": {"properties": {"unit": {"enum": ["fahrenheit", "celsius"]}}},
            },
        }
    ]
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Weather in Oslo and Rome?",
            turn(
                call(
                    "a",
                    "get_forecast",
                    {"city": "Oslo", "unit": "fahrenheit"},
                    {"temp": 41, "unit": "fahrenheit"},
                )
            ),
            turn(call("b", "get_forecast", {"city": "Rome", "unit": "fahrenheit"}, {"temp": 70})),
            tools=tools,
        ),
    )
    assert pairs(trace_schedule(con, "t")) == set()


def test_ambiguous_evidence_is_kept_only_by_the_conservative_mode(con, tmp_path):
    # A four-letter word first seen in a result could be a coincidence: weak evidence.
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "What is near the station, and its opening hours?",
            turn(call("a", "search_places", {"near": "station"}, [{"name": "Mosk", "kind": "cafe"}])),
            turn(call("b", "get_opening_hours", {"place": "Mosk"}, {"opens": "08:00"})),
        ),
    )
    conservative, loose = both(con, "t")
    (edge,) = conservative.edges
    assert (edge.kind, edge.loose) == ("data", False) and edge.confidence < deps.LOOSE_MIN_CONFIDENCE
    assert conservative.min_turns == 2
    assert loose.edges == [] and loose.min_turns == 1


def test_a_phrase_made_of_the_users_words_is_known(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "I want a blue ergonomic chair.",
            turn(call("a", "search_products", {"query": "chairs"}, [{"name": "blue chair", "id": "P-10"}])),
            turn(call("b", "search_reviews", {"query": "blue chair"}, [])),
        ),
    )
    assert pairs(trace_schedule(con, "t")) == set()


def test_explicit_reference_to_an_earlier_calls_id(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Start the export and wait for it.",
            turn(call("call_Xk21", "start_export", {"table": "sales"}, NEUTRAL)),
            turn(call("call_Yq09", "wait_for_job", {"job": "call_Xk21"}, {"done": True})),
        ),
    )
    assert ("call_Xk21", "call_Yq09", "explicit") in edges(trace_schedule(con, "t", "loose"))


# --- state ---------------------------------------------------------------------------------------


def test_a_write_orders_later_calls_on_the_same_resource_only(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Ship W5550001 to 9 Mill Lane, then show W5550001 and W5550002.",
            turn(call("a", "update_address", {"order_id": "W5550001", "address": "9 Mill Lane"}, NEUTRAL)),
            turn(call("b", "get_order", {"order_id": "W5550001"}, {"address": "9 Mill Lane"})),
            turn(call("c", "get_order", {"order_id": "W5550002"}, {"address": "1 Elm Street"})),
        ),
    )
    for schedule in both(con, "t"):
        assert edges(schedule) == {("a", "b", "state")}
        assert levels(schedule) == {"a": 0, "b": 1, "c": 0}


def test_a_read_then_a_write_of_the_same_resource_keep_their_order(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Check order W8000001 and cancel it.",
            turn(call("a", "get_order", {"order_id": "W8000001"}, {"status": "pending"})),
            turn(call("b", "cancel_order", {"order_id": "W8000001", "reason": "asked"}, NEUTRAL)),
        ),
    )
    for schedule in both(con, "t"):
        assert edges(schedule) == {("a", "b", "state")}


def test_a_tool_of_unknown_effect_is_a_barrier_in_conservative_mode_only(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Weather in Oslo and Lima, and reindex.",
            turn(call("a", "get_weather", {"city": "Oslo"}, {"temp": 3})),
            turn(call("b", "frobnicate_index", {}, NEUTRAL)),
            turn(call("c", "get_weather", {"city": "Lima"}, {"temp": 19})),
        ),
    )
    conservative, loose = both(con, "t")
    assert {c.tool_call_id: c.effect.effect for c in conservative.trace.calls}["b"] == "unknown"
    assert levels(conservative) == {"a": 0, "b": 1, "c": 2}
    assert levels(loose) == {"a": 0, "b": 0, "c": 0}


def test_an_argument_less_read_follows_earlier_writes_in_conservative_mode(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Add P-4411 to my cart and show the cart.",
            turn(call("a", "add_to_cart", {"product_id": "P-4411"}, NEUTRAL)),
            turn(call("b", "list_cart", {}, [{"product_id": "P-4411"}])),
        ),
    )
    conservative, loose = both(con, "t")
    assert edges(conservative) == {("a", "b", "state")}
    assert loose.edges == []


def test_shell_commands_follow_the_edits_they_read(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Fix the date parsing and run the tests.",
            turn(
                call("a", "Edit", {"file_path": "src/dates.py", "old_string": "x", "new_string": "y"}, "ok")
            ),
            turn(call("b", "Bash", {"command": "cat src/dates.py | head -20"}, "def parse(): ...")),
            turn(call("c", "Bash", {"command": "ls docs"}, "index.md")),
            turn(call("d", "Bash", {"command": "python -m pytest -q"}, "3 passed")),
        ),
    )
    conservative, loose = both(con, "t")
    assert [c.effect.effect for c in loose.trace.calls] == ["write", "read", "read", "unknown"]
    # the read-only command names the edited file; the test run (unknown effects) reads anything
    assert {("a", "b"), ("a", "d")} <= pairs(loose)
    assert levels(loose) == {"a": 0, "b": 1, "c": 0, "d": 1}
    assert levels(conservative)["d"] == 2  # and a barrier after every call before it


def test_calls_of_one_turn_are_independent_by_construction(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Update W1234500 and read it back.",
            turn(
                call("a", "update_address", {"order_id": "W1234500", "address": "2 Castle Hill"}, NEUTRAL),
                call("b", "get_order", {"order_id": "W1234500"}, {"address": "2 Castle Hill"}),
            ),
        ),
    )
    schedule = trace_schedule(con, "t")
    assert schedule.edges == [] and schedule.observed_turns == 1 and schedule.parallel_turns == 1


# --- control -------------------------------------------------------------------------------------


def test_a_retry_depends_on_the_failure_even_with_another_call_of_the_tool_between(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Tell me about P-48213 and P-70021.",
            turn(call("a", "get_product", {"product_id": "P-48231"}, "Error: product P-48231 not found")),
            turn(call("b", "get_product", {"product_id": "P-70021"}, {"price": 12.5})),
            turn(call("c", "get_product", {"product_id": "P-48213"}, {"price": 99.9})),
        ),
    )
    conservative, loose = both(con, "t")
    for schedule in (conservative, loose):
        assert ("a", "c", "control") in edges(schedule)
        assert ("a", "b", "control") not in edges(schedule)
    assert levels(loose) == {"a": 0, "b": 0, "c": 1}


def test_a_search_corrected_after_an_empty_result(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Find an oak desk, ideally quiet and deluxe.",
            turn(call("a", "search_products", {"query": "oak quiet desk deluxe"}, "[]")),
            turn(call("b", "search_products", {"query": "oak desk"}, [{"id": "P-31337"}])),
        ),
    )
    for schedule in both(con, "t"):
        assert edges(schedule) == {("a", "b", "control")}


def test_a_write_after_the_same_tool_failed_is_never_speculated(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Book Chez Lou at 19:30, or Blue Fig if it is full.",
            turn(
                call("a", "reserve_table", {"restaurant": "Chez Lou", "time": "19:30"}, "Error: fully booked")
            ),
            turn(call("b", "reserve_table", {"restaurant": "Blue Fig", "time": "19:30"}, NEUTRAL)),
        ),
    )
    for schedule in both(con, "t"):
        assert pairs(schedule) == {("a", "b")}


def test_a_turn_quoting_a_result_depends_on_it_in_conservative_mode(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Is the shipment on time? Then check the weather in Oslo.",
            turn(call("a", "get_shipment", {"shipment": "S-1"}, {"eta": "2025-03-14", "code": "ETA-7781"})),
            turn(
                call("b", "get_weather", {"city": "Oslo"}, {"temp": 2}),
                text="Shipment arrives with code ETA-7781, now the weather.",
            ),
        ),
    )
    conservative, loose = both(con, "t")
    assert edges(conservative) == {("a", "b", "control")}
    assert loose.edges == []


# --- derived content -----------------------------------------------------------------------------


def test_free_text_written_after_results_may_draw_on_all_of_them(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Check the weather in Oslo and Lima and email me a note about it at kim@example.com.",
            turn(call("a", "get_weather", {"city": "Oslo"}, {"sky": "sleet", "temp": -2})),
            turn(call("b", "get_weather", {"city": "Lima"}, {"sky": "sunny", "temp": 24})),
            turn(
                call(
                    "c",
                    "send_email",
                    {"to": "kim@example.com", "body": "Pack a warm coat for the first leg of the trip."},
                    NEUTRAL,
                )
            ),
        ),
    )
    conservative, loose = both(con, "t")
    assert {(s, d) for s, d, k in edges(conservative) if k == "derived"} == {("a", "c"), ("b", "c")}
    assert levels(conservative)["c"] == 1
    assert loose.edges == [] and loose.min_turns == 1


@pytest.mark.parametrize(
    ("body", "conservative_turns"),
    [
        ("We meet on Monday at noon in the project room.", 1),  # the user's words only
        ("Reminder: our weekly sync is Monday noon, agenda to follow.", 2),  # words of its own
    ],
)
def test_free_text_from_the_users_own_words_after_neutral_results_depends_on_none(
    con, tmp_path, body, conservative_turns
):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Email john@example.com that the project is on track, and email jane@example.com that "
            "we meet on Monday at noon in the project room.",
            turn(
                call(
                    "a", "send_email", {"to": "john@example.com", "body": "The project is on track."}, NEUTRAL
                )
            ),
            turn(call("b", "send_email", {"to": "jane@example.com", "body": body}, NEUTRAL)),
        ),
    )
    conservative, loose = both(con, "t")
    assert conservative.min_turns == conservative_turns
    assert loose.min_turns == 1


def test_arithmetic_over_numbers_with_known_sources_is_explained_by_them(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Price of P-100 and P-200 together, and the weather in Oslo.",
            turn(call("a", "get_product", {"product_id": "P-100"}, {"price": 816.74})),
            turn(call("b", "get_weather", {"city": "Oslo"}, {"sky": "sleet"})),
            turn(call("c", "get_product", {"product_id": "P-200"}, {"price": 430.82})),
            turn(call("d", "calculate", {"expression": "816.74 + 430.82"}, {"value": 1247.56})),
            turn(call("e", "calculate", {"expression": "816.74 * 1.0825"}, {"value": 884.12})),
        ),
    )
    schedule = trace_schedule(con, "t")
    found = edges(schedule)
    assert {("a", "d", "data"), ("c", "d", "data")} <= found
    assert not any(dst == "d" and src == "b" for src, dst, _ in found)
    # 1.0825 is seen nowhere: the model computed it, so it may draw on any result, weather included.
    assert ("b", "e", "derived") in found or ("d", "e", "derived") in found
    assert levels(schedule)["e"] > levels(schedule)["b"]


# --- barriers and requestors ---------------------------------------------------------------------


def test_no_call_moves_across_a_user_message(con, tmp_path):
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Weather in Oslo?",
            turn(call("a", "get_weather", {"city": "Oslo"}, {"temp": 3})),
            "And in Lima?",
            turn(call("b", "get_weather", {"city": "Lima"}, {"temp": 19})),
            turn(call("c", "get_weather", {"city": "Quito"}, {"temp": 14})),
        ),
    )
    schedule = trace_schedule(con, "t", "loose")
    assert schedule.edges == []
    assert levels(schedule) == {"a": 0, "b": 1, "c": 1}
    assert [c.segment for c in schedule.trace.calls] == [1, 2, 2]
    assert schedule.min_turns == 2 and schedule.turns_saved == 1


def test_the_users_own_tool_calls_are_context_not_scheduled(con, tmp_path):
    messages = [
        {"role": "system", "content": "Telecom support."},
        {"role": "user", "content": "My phone has no signal."},
        {
            "role": "user",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "u1", "type": "function", "function": {"name": "check_status_bar", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "u1", "content": json.dumps({"network": "NET-4471"})},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a1",
                    "type": "function",
                    "function": {"name": "get_network", "arguments": json.dumps({"network": "NET-4471"})},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "a1", "content": json.dumps({"outage": False})},
        {"role": "assistant", "content": "No outage."},
    ]
    load(con, tmp_path, {"id": "t", "messages": messages})
    assert con.execute("SELECT requestor FROM tool_calls WHERE tool_call_id = 'u1'").fetchall() == [("user",)]
    schedule = trace_schedule(con, "t")
    assert [c.tool_call_id for c in schedule.trace.calls] == ["a1"]
    assert schedule.trace.user_tool_calls == 1 and schedule.edges == []
    analyze_dependencies(con)
    assert con.execute("SELECT tool_calls, user_tool_calls FROM trace_dag").fetchall() == [(1, 1)]
    assert con.execute("SELECT tool_call_id FROM tool_schedule").fetchall() == [("a1",)]


# --- tool effects --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "description", "expected"),
    [
        ("get_order_details", {}, None, "read"),
        ("cancel_pending_order", {}, None, "write"),
        ("calculate_return_on_investment", {}, None, "pure"),
        ("hotel_booking.check_availability", {}, None, "read"),
        ("BattleReignGameAPI.update_player_equipment", {}, None, "write"),
        ("car.rental", {}, "Rent a car at the specified location", "write"),
        ("lawsuit_info", {}, None, "read"),
        ("random.normalvariate", {}, "Returns a normal variate.", "read"),
        ("frobnicate", {}, None, "unknown"),
        ("Bash", {"command": "cd src && grep -rn TODO . | head -5"}, None, "read"),
        ("Bash", {"command": "pytest -q"}, None, "unknown"),
        ("str_replace_editor", {"command": "view", "path": "/a.py"}, None, "read"),
        ("str_replace_editor", {"command": "create", "path": "/a.py"}, None, "write"),
        ("Edit", {"file_path": "/a.py"}, None, "write"),
    ],
)
def test_effects_from_names_descriptions_and_known_tools(name, arguments, description, expected):
    assert classify(name, arguments, description).effect == expected


def test_shell_commands_that_only_read():
    assert shell_reads_only("git log --oneline | head -3")
    assert not shell_reads_only("git commit -m x")
    assert not shell_reads_only("cat a > b")
    assert not shell_reads_only("find . -name '*.pyc' -delete")
    assert not shell_reads_only("sed -i s/a/b/ f")


def test_mcp_annotations_in_tool_definitions_decide_the_effect(con, tmp_path):
    tools = [
        {"type": "function", "function": {"name": "frob_a", "annotations": {"readOnlyHint": True}}},
        {"type": "function", "function": {"name": "frob_b"}, "annotations": {"destructiveHint": True}},
    ]
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Frob both.",
            turn(call("a", "frob_a", {"x": "one"}, {"y": 1})),
            turn(call("b", "frob_b", {"x": "two"}, {"y": 2})),
            tools=tools,
        ),
    )
    stored = con.execute("SELECT name, annotations FROM tool_defs ORDER BY name").fetchall()
    assert [(n, json.loads(a)) for n, a in stored] == [
        ("frob_a", {"readOnlyHint": True}),
        ("frob_b", {"destructiveHint": True}),
    ]
    schedule = trace_schedule(con, "t")
    assert [c.effect.effect for c in schedule.trace.calls] == ["read", "write"]
    assert schedule.min_turns == 1  # a read and a write of unrelated things: no barrier


def test_traceforge_toml_declares_effects_and_resources(con, tmp_path):
    (tmp_path / "traceforge.toml").write_text(
        """
        [tools]
        default = "read"
        "mcp__fs__*" = "read"

        [tools.sync_everything]
        effect = "unknown"

        [tools.put_blob]
        effect = "write"
        resource = "bucket"

        [dag]
        llm_ms = 1000
        tool_ms = 250
        """
    )
    config = load_config(tmp_path / "traceforge.toml")
    assert classify("mcp__fs__list_dir", {}, config=config).effect == "read"
    assert classify("zorble", {}, config=config).effect == "read"  # the configured default
    assert (config.llm_ms, config.tool_ms) == (1000.0, 250.0)
    load(
        con,
        tmp_path,
        transcript(
            "t",
            "Store the two blobs in archive-7 and read the list back.",
            turn(call("a", "put_blob", {"bucket": "archive-7", "name": "a.bin"}, NEUTRAL)),
            turn(call("b", "list_bucket", {"bucket": "archive-7"}, ["a.bin"])),
            turn(call("c", "list_bucket", {"bucket": "archive-9"}, [])),
        ),
    )
    schedule = trace_schedule(con, "t", "conservative", config)
    assert pairs(schedule) == {("a", "b")}
    assert schedule.parallel_ms == 2 * (1000 + 250)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[tools]\nget_x = "readish"', "tools.get_x: effect must be one of"),
        ("[tools.put]\neffect = 'write'\nscope = 'x'", "tools.put: unknown key(s) scope"),
        ("[dag]\nllm_ms = -1", "dag.llm_ms must be a non-negative number"),
        ("[tools\n", "not valid TOML"),
    ],
)
def test_config_errors_name_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "traceforge.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(path) in str(raised.value) and message in str(raised.value)


def test_settings_fingerprint_changes_with_the_config():
    assert DepsConfig().fingerprint() == DepsConfig().fingerprint()
    assert DepsConfig(llm_ms=1.0).fingerprint() != DepsConfig().fingerprint()


def test_the_modules_examples_hold():
    for module in (deps, dag, effects):
        failures, _ = doctest.testmod(module)
        assert failures == 0, module.__name__
