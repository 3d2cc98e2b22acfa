"""The capacity model: instance counts, the binding limit, the disaggregation call, GPU profiles,
and the projected deployment from the dependency-DAG savings (read from `trace_dag` only)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from builders import WEATHER_TOOL, OpenAILoop, openai_tool_call, write_jsonl

from traceforge.analysis.deployment import (
    Demand,
    GpuProfileError,
    load_gpu_profiles,
    plan_deployment,
    prefill_ttft_s,
    project_demand,
    resolve_gpu_profile,
)
from traceforge.export.profile import build_profile
from traceforge.ingest import ingest_paths

# The worked example of reference/inference-profiles.md §6.1: the Mooncake conversation trace
# (3.40 req/s, 12,035 input and 343 output tokens on average, 37.4% prefix hits) on Llama-3.3-70B
# FP8 at TP2 on H100, using the saturated figures as they are (no derating) and a 30 ms ITL.
MOONCAKE_CONVERSATION = Demand(
    rps=3.40,
    mean_input_tokens=12_035,
    mean_uncached_input_tokens=12_035 * (1 - 0.374),
    mean_output_tokens=343,
    hit_ratio=0.374,
)


def undated(name: str) -> object:
    return dataclasses.replace(resolve_gpu_profile(name), derate=1.0, bandwidth_efficiency=1.0)


def test_shipped_profiles_hold_the_public_figures():
    profiles, default = load_gpu_profiles()
    big = profiles["h100-llama-3.3-70b-fp8-tp2"]
    assert default == big.name
    # TRT-LLM perf overview, Llama-3.3-70B FP8 TP2: 723 output tok/s at ISL 2048 / OSL 128
    assert big.prefill_tokens_per_s == pytest.approx(723 / 128 * 2048, rel=1e-3)
    assert big.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2  # layers x KV heads x head dim, K and V, BF16
    assert profiles["h100-llama-3.3-70b-fp8-tp2-fp8kv"].kv_bytes_per_token == 2 * 80 * 8 * 128
    assert profiles["h100-llama-3.1-8b-fp8"].kv_bytes_per_token == 2 * 32 * 8 * 128 * 2


def test_reproduces_the_reference_worked_example():
    bf16 = plan_deployment(MOONCAKE_CONVERSATION, undated("h100-llama-3.3-70b-fp8-tp2"), itl_ms=30)
    fp8 = plan_deployment(MOONCAKE_CONVERSATION, undated("h100-llama-3.3-70b-fp8-tp2-fp8kv"), itl_ms=30)

    # "Uncached prefill load ≈ 25.6k tok/s → 3 prefill instances (2.2 rounded up)"
    assert bf16["prefill"]["load_tokens_per_s"] == pytest.approx(25_600, rel=0.01)
    assert bf16["prefill"]["compute_instances"] == pytest.approx(2.2, abs=0.05)
    assert bf16["prefill"]["instances"] == 3
    # "≈ 35 concurrent sequences × 12.2k tokens ... ≈ 130 GiB of KV in BF16 (≈ 65 GiB in FP8)"
    assert bf16["decode"]["concurrent_sequences"] == pytest.approx(35, abs=0.5)
    assert bf16["decode"]["context_tokens"] == pytest.approx(12_200, rel=0.01)
    assert bf16["decode"]["kv_bytes"] / 2**30 == pytest.approx(130, rel=0.01)
    assert fp8["decode"]["kv_bytes"] / 2**30 == pytest.approx(65, rel=0.01)
    # "2 decode instances in BF16-KV, 1 in FP8-KV ... memory-bound, not compute-bound"
    assert (bf16["decode"]["instances"], fp8["decode"]["instances"]) == (2, 1)
    assert bf16["decode"]["binding"] == fp8["decode"]["binding"] == "kv_memory"
    assert bf16["decode"]["limits_instances"]["compute"] == pytest.approx(0.2, abs=0.02)
    assert bf16["recommendation"]["mode"] == "disaggregated"
    assert bf16["recommendation"]["prefill_decode_instances"] == "3:2"


def test_m_d_1_ttft_adds_instances_under_a_tight_target():
    demand = Demand(
        rps=4.0, mean_input_tokens=8_000, mean_uncached_input_tokens=8_000, mean_output_tokens=200
    )
    gpu = undated("h100-llama-3.3-70b-fp8-tp2")
    service = 8_000 / gpu.prefill_tokens_per_s

    def ttft(n: int) -> float:  # M/D/1 mean response time, written out independently
        lam = 4.0 / n
        return math.inf if lam * service >= 1 else service + lam * service**2 / (2 * (1 - lam * service))

    for target_ms in (5_000, 1_200, 800):
        plan = plan_deployment(demand, gpu, ttft_ms=target_ms)
        expected = next(n for n in range(1, 100) if ttft(n) <= target_ms / 1000)
        assert plan["prefill"]["instances"] == expected
        assert plan["prefill"]["mean_ttft_ms"] == pytest.approx(ttft(expected) * 1000)
    assert plan_deployment(demand, gpu, ttft_ms=800)["prefill"]["binding"] == "ttft"
    assert prefill_ttft_s(2.0, 0.5) == math.inf
    # one prompt alone takes longer than the target: reported, never looped forever
    plan = plan_deployment(demand, gpu, ttft_ms=100)
    assert not plan["prefill"]["ttft_feasible"] and "tensor parallel" in plan["prefill"]["note"]


def test_itl_target_below_a_weight_read_is_infeasible():
    plan = plan_deployment(MOONCAKE_CONVERSATION, undated("h100-llama-3.3-70b-fp8-tp2"), itl_ms=5)
    # 2 GPUs x 3.35 TB/s x 5 ms = 33.5 GB per step, less than the 70 GB of weights
    assert not plan["decode"]["itl_feasible"]
    assert plan["decode"]["instances"] is None and "weights" in plan["decode"]["note"]


def test_decode_heavy_chat_stays_aggregated():
    chat = Demand(rps=20.0, mean_input_tokens=600, mean_uncached_input_tokens=300, mean_output_tokens=400)
    plan = plan_deployment(chat, resolve_gpu_profile("h100-llama-3.1-8b-fp8"))
    assert plan["recommendation"]["mode"] == "aggregated"
    assert any("under llm-d" in r for r in plan["recommendation"]["reasons_against"])
    assert plan["engine_hints"]["dynamo_dgdr"]["workload"] == {"isl": 300, "osl": 400}


def test_engine_hints_follow_the_plan():
    demand = dataclasses.replace(
        MOONCAKE_CONVERSATION, tool_gaps_per_request=0.9, tool_gap_mean_s=20.0, tool_gap_p90_s=45.5
    )
    gpu = resolve_gpu_profile("h100-llama-3.3-70b-fp8-tp2")
    plan = plan_deployment(demand, gpu, target_rps=6.8)
    hints = plan["engine_hints"]
    assert plan["target_rps"] == 6.8
    assert "--enable-prefix-caching" in hints["vllm"]
    assert "--tensor-parallel-size 2" in hints["vllm"]
    assert any("NixlConnector" in h for h in hints["vllm"])
    assert hints["sglang_prefill"][0] == "--disaggregation-mode prefill"
    assert hints["kv_retention_ttl_s"] == 46
    # KV held across tool gaps (Little's law): 6.8 req/s x 0.9 gaps x 20 s x 12.2k tokens of context
    held = 6.8 * 0.9 * 20.0 * MOONCAKE_CONVERSATION.context_tokens
    assert plan["kv_retention"]["held_tokens"] == pytest.approx(held)
    assert "OffloadingConnector" in hints["vllm_kv_offload"]
    assert f'"num_cpu_blocks":{math.ceil(held / 64)}' in hints["vllm_kv_offload"]
    assert hints["llm_d"]["pd-profile-handler"]["threshold"] == int(
        gpu.prefill_tokens_per_s * gpu.derate * 0.03
    )


def test_user_gpu_profiles_and_their_errors(tmp_path):
    good = tmp_path / "gpus.toml"
    good.write_text(
        'default = "b"\n'
        "[profiles.a]\ngpus_per_instance = 1\nprefill_tokens_per_s = 1000\ndecode_tokens_per_s = 500\n"
        "hbm_bandwidth_gb_s = 1000\nweights_gb = 10\nkv_bytes_per_token = 1000\nkv_capacity_gb = 20\n"
        "[profiles.b]\ngpus_per_instance = 4\nprefill_tokens_per_s = 9000\ndecode_tokens_per_s = 900\n"
        "hbm_bandwidth_gb_s = 8000\nweights_gb = 100\nkv_bytes_per_token = 2000\nkv_capacity_gb = 200\n"
        "derate = 0.5\n"
    )
    assert resolve_gpu_profile(str(good)).name == "b"
    assert resolve_gpu_profile(f"{good}#a").gpus_per_instance == 1
    with pytest.raises(GpuProfileError, match="no profile 'c'"):
        resolve_gpu_profile(f"{good}#c")
    missing = tmp_path / "missing.toml"
    missing.write_text("[profiles.x]\ngpus_per_instance = 1\n")
    with pytest.raises(GpuProfileError, match="needs positive numbers for prefill_tokens_per_s"):
        resolve_gpu_profile(str(missing))
    with pytest.raises(GpuProfileError, match="neither a file nor a shipped profile"):
        resolve_gpu_profile("tpu-v9")


def test_projection_removes_saved_turns_and_resent_prefixes():
    demand = Demand(
        rps=2.0,
        mean_input_tokens=10_000,
        mean_uncached_input_tokens=4_000,
        mean_output_tokens=100,
        hit_ratio=0.6,
    )
    projected = project_demand(demand, llm_calls=100, savings={"turns_saved": 25, "tokens_saved": 300_000})
    assert projected.rps == pytest.approx(1.5)
    assert projected.mean_input_tokens == pytest.approx((1_000_000 - 300_000) / 75)
    assert projected.mean_uncached_input_tokens == pytest.approx((400_000 - 300_000 * 0.4) / 75)
    assert projected.mean_output_tokens == pytest.approx(10_000 / 75)


def agent_log(tmp_path, n: int) -> list[dict]:
    records = []
    for k in range(n):
        loop = OpenAILoop(
            "You research flights. " * 200,
            f"Flights {k}?",
            tools=[WEATHER_TOOL],
            workload="flights",
            t0=1_790_000_000 + 20 * k,
        )
        for i in range(3):
            loop.call(
                tool_calls=[openai_tool_call(f"c{k}_{i}", "get_weather", {"city": f"X{i}"})],
                prompt_tokens=1_500 + 600 * i,
                completion_tokens=30,
            )
            loop.result(f"c{k}_{i}", "result " * 300)
        loop.call(content="done", prompt_tokens=3_500, completion_tokens=60)
        records += loop.records
    write_jsonl(tmp_path / "log.jsonl", records)
    return records


def test_profile_projects_with_trace_dag_and_says_when_it_cannot(tmp_path, con):
    records = agent_log(tmp_path, 4)
    ingest_paths(con, [tmp_path / "log.jsonl"])

    empty = build_profile(con).document
    workload = empty["workloads"][0]["deployment"]
    assert workload["projected"] is None and "trace_dag table is empty" in workload["projection_note"]

    # the DAG analysis's contract: one row per trace; here every trace could save 2 of its 4 turns
    traces = [row[0] for row in con.execute("SELECT trace_id FROM traces ORDER BY trace_id").fetchall()]
    for trace_id in traces:
        con.execute(
            "INSERT INTO trace_dag (trace_id, tool_calls, observed_turns, min_turns, turns_saved, "
            "observed_ms, parallel_ms, tokens_saved) VALUES (?, 3, 4, 2, 2, 9000.0, 4000.0, 3100)",
            [trace_id],
        )
    document = build_profile(con).document
    deployment = document["workloads"][0]["deployment"]
    observed, projected = deployment["observed"][0], deployment["projected"][0]
    calls = len(records)
    assert deployment["projection"]["projected_llm_calls"] == calls - 2 * len(traces)
    assert projected["target_rps"] == pytest.approx(
        observed["target_rps"] * (calls - 2 * len(traces)) / calls
    )
    total_input = sum(r["response"]["usage"]["prompt_tokens"] for r in records)
    assert projected["mean_input_tokens"] == pytest.approx(
        (total_input - 3100 * len(traces)) / (calls - 2 * len(traces))
    )
    assert document["overall"]["deployment"]["projection"]["dag"]["turns_saved"] == 2 * len(traces)
