"""A capacity model: how many prefill and decode instances a workload needs on a given GPU and
model, which limit binds, whether to disaggregate, and the engine settings that follow.

The sizing rule is the one DistServe and Dynamo's SLA planner use: instances = ceil(load /
per-instance capacity under the latency target), separately for prefill and decode.

Prefill. Load = request rate x mean *uncached* input tokens (prefix-cache hits are not
recomputed). Capacity per instance = saturated prefill throughput x derate. Each instance is an
M/D/1 queue (DistServe §3): with service time D = uncached tokens / capacity and per-instance
arrival rate λ, mean TTFT = D + λD² / (2(1 - λD)). The count is the smallest that keeps λD < 1
and the mean TTFT within the target.

Decode. Little's law gives the sequences decoding at once: C = rate x output tokens x ITL. Each
holds about input + output/2 tokens of context (Dynamo's planner uses the same midpoint). Three
limits, each as a (fractional) number of instances:
- kv_memory: C x context x KV bytes per token over the KV memory of an instance;
- itl: a decode step reads the weights and every sequence's KV once, so at the ITL target an
  instance can run (ITL x GPUs x HBM bandwidth x efficiency - weights) / (context x KV bytes)
  sequences;
- compute: output tokens/s over the saturated decode throughput x derate.
The largest binds. All inputs are in a `GpuProfile`; the shipped ones hold public figures
(traceforge/gpu_profiles.toml).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb

DEFAULT_TTFT_MS = 2000.0
DEFAULT_ITL_MS = 30.0
LLM_D_ISL_OSL = 10.0  # llm-d recommends P/D disaggregation from about 10:1 ISL:OSL


class GpuProfileError(ValueError):
    """A GPU profile file or name that cannot be used, with what to do."""


@dataclass(frozen=True)
class GpuProfile:
    """One engine replica (instance) of a model on `gpus_per_instance` GPUs."""

    name: str
    gpus_per_instance: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    hbm_bandwidth_gb_s: float
    weights_gb: float
    kv_bytes_per_token: float
    kv_capacity_gb: float
    derate: float = 0.7
    bandwidth_efficiency: float = 0.8
    description: str = ""
    source: str = ""
    gpu: str = ""


_REQUIRED = (
    "gpus_per_instance",
    "prefill_tokens_per_s",
    "decode_tokens_per_s",
    "hbm_bandwidth_gb_s",
    "weights_gb",
    "kv_bytes_per_token",
    "kv_capacity_gb",
)


def load_gpu_profiles(path: str | Path | None = None) -> tuple[dict[str, GpuProfile], str]:
    """The profiles in `path` (a TOML file in the format of traceforge/gpu_profiles.toml), or the
    shipped ones; and the name of the default profile."""
    if path is None:
        origin = "traceforge/gpu_profiles.toml"
        text = resources.files("traceforge").joinpath("gpu_profiles.toml").read_text(encoding="utf-8")
    else:
        origin = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise GpuProfileError(f"{path}: cannot read the GPU profile file: {exc.strerror or exc}") from exc
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GpuProfileError(f"{origin}: not valid TOML: {exc}. Fix the file and rerun.") from exc
    sections = document.get("profiles")
    if not isinstance(sections, dict) or not sections:
        raise GpuProfileError(
            f'{origin}: no [profiles."NAME"] tables; see traceforge/gpu_profiles.toml for the format'
        )
    known = {f.name for f in fields(GpuProfile)}
    profiles = {}
    for name, entry in sections.items():
        missing = [k for k in _REQUIRED if not isinstance(entry.get(k), int | float) or entry.get(k) <= 0]
        if missing:
            raise GpuProfileError(
                f'{origin}: [profiles."{name}"] needs positive numbers for {", ".join(missing)}'
            )
        unknown = sorted(set(entry) - known)
        if unknown:
            raise GpuProfileError(f'{origin}: [profiles."{name}"] has unknown fields: {", ".join(unknown)}')
        profiles[name] = GpuProfile(name=name, **{k: v for k, v in entry.items() if k != "name"})
    default = document.get("default") or next(iter(profiles))
    if default not in profiles:
        raise GpuProfileError(f"{origin}: default = {default!r} names no profile in the file")
    return profiles, default


def resolve_gpu_profile(choice: str | None) -> GpuProfile:
    """A profile by shipped name, or the default profile of a TOML file path, or the shipped
    default when `choice` is None. A file may also be given as PATH#NAME."""
    if choice is None:
        profiles, default = load_gpu_profiles()
        return profiles[default]
    path, _, wanted = choice.partition("#")
    if Path(path).is_file():
        profiles, default = load_gpu_profiles(path)
        name = wanted or default
        if name not in profiles:
            raise GpuProfileError(f"{path}: no profile {name!r}; it has {', '.join(profiles)}")
        return profiles[name]
    profiles, _ = load_gpu_profiles()
    if choice in profiles:
        return profiles[choice]
    raise GpuProfileError(
        f"GPU profile {choice!r} is neither a file nor a shipped profile; shipped: {', '.join(profiles)}"
    )


@dataclass
class Demand:
    """What a workload asks of inference, per request and per second."""

    rps: float
    mean_input_tokens: float
    mean_uncached_input_tokens: float
    mean_output_tokens: float
    hit_ratio: float | None = None
    tool_gaps_per_request: float = 0.0  # tool gaps per LLM call (KV held across them)
    tool_gap_p90_s: float | None = None
    tool_gap_mean_s: float | None = None

    @property
    def context_tokens(self) -> float:
        """Mean context while decoding: the input plus half the output."""
        return self.mean_input_tokens + self.mean_output_tokens / 2


def prefill_ttft_s(rps_per_instance: float, service_s: float) -> float:
    """Mean TTFT of an M/D/1 prefill queue: D + λD² / (2(1 - λD)); infinite when λD >= 1.

    >>> round(prefill_ttft_s(1.0, 0.5), 3)
    0.75
    """
    load = rps_per_instance * service_s
    if load >= 1:
        return math.inf
    return service_s + rps_per_instance * service_s**2 / (2 * (1 - load))


def plan_deployment(
    demand: Demand,
    gpu: GpuProfile,
    *,
    target_rps: float | None = None,
    ttft_ms: float = DEFAULT_TTFT_MS,
    itl_ms: float = DEFAULT_ITL_MS,
) -> dict[str, Any]:
    """Prefill and decode instance counts for `demand` at `target_rps` (default: its own rate).

    Returns a dict: the inputs, `prefill` and `decode` (count, the limits as fractional
    instances, which binds), `aggregated` (the count if prefill and decode share instances),
    `recommendation` (aggregated or disaggregated, with reasons), `kv_retention` and
    `engine_hints`. See the module docstring for the model.
    """
    rps = target_rps if target_rps is not None else demand.rps
    itl_s, ttft_s = itl_ms / 1000.0, ttft_ms / 1000.0
    uncached, output, context = (
        demand.mean_uncached_input_tokens,
        demand.mean_output_tokens,
        demand.context_tokens,
    )
    kv_capacity = gpu.kv_capacity_gb * 1e9

    prefill_rate = gpu.prefill_tokens_per_s * gpu.derate
    prefill_load = rps * uncached
    service_s = uncached / prefill_rate
    prefill_compute = prefill_load / prefill_rate
    n_prefill = max(math.ceil(prefill_compute), 1 if prefill_load > 0 else 0)
    while n_prefill and rps / n_prefill * service_s >= 1:
        n_prefill += 1
    ttft_feasible = service_s <= ttft_s
    if ttft_feasible and n_prefill:
        while prefill_ttft_s(rps / n_prefill, service_s) > ttft_s:
            n_prefill += 1
    prefill = {
        "instances": n_prefill,
        "gpus": n_prefill * gpu.gpus_per_instance,
        "load_tokens_per_s": prefill_load,
        "capacity_tokens_per_s": prefill_rate,
        "compute_instances": prefill_compute,
        "service_ms": service_s * 1000.0,
        "mean_ttft_ms": prefill_ttft_s(rps / n_prefill, service_s) * 1000.0 if n_prefill else None,
        "ttft_feasible": ttft_feasible,
        "binding": "compute" if n_prefill <= max(math.ceil(prefill_compute), 1) else "ttft",
    }
    if not ttft_feasible:
        prefill["note"] = (
            f"one mean uncached prompt alone takes {service_s * 1000:.0f} ms to prefill, over the "
            f"{ttft_ms:.0f} ms TTFT target: more GPUs per instance (tensor parallel) or a smaller model"
        )

    concurrency = rps * output * itl_s
    kv_per_sequence = context * gpu.kv_bytes_per_token
    step_bytes = itl_s * gpu.gpus_per_instance * gpu.hbm_bandwidth_gb_s * 1e9 * gpu.bandwidth_efficiency
    itl_sequences = (step_bytes - gpu.weights_gb * 1e9) / kv_per_sequence if kv_per_sequence else math.inf
    memory_sequences = kv_capacity / kv_per_sequence if kv_per_sequence else math.inf
    limits = {
        "kv_memory": concurrency * kv_per_sequence / kv_capacity,
        "itl": concurrency / itl_sequences if itl_sequences > 0 else math.inf,
        "compute": rps * output / (gpu.decode_tokens_per_s * gpu.derate),
    }
    binding = max(limits, key=lambda k: limits[k])
    n_decode = (
        max(math.ceil(limits[binding] - 1e-9), 1 if concurrency > 0 else 0)
        if math.isfinite(limits[binding])
        else None
    )
    decode = {
        "instances": n_decode,
        "gpus": n_decode * gpu.gpus_per_instance if n_decode is not None else None,
        "concurrent_sequences": concurrency,
        "context_tokens": context,
        "kv_bytes": concurrency * kv_per_sequence,
        "limits_instances": limits,
        "binding": binding,
        "max_sequences_per_instance": math.floor(max(min(itl_sequences, memory_sequences), 0)),
        "itl_feasible": itl_sequences > 0,
    }
    if itl_sequences <= 0:
        decode["note"] = (
            f"reading the weights alone takes longer than the {itl_ms:.0f} ms ITL target on "
            f"{gpu.gpus_per_instance} GPU(s): raise tensor parallelism or relax the target"
        )

    aggregated_fraction = max(prefill_compute + max(limits["itl"], limits["compute"]), limits["kv_memory"])
    aggregated = math.ceil(aggregated_fraction - 1e-9) if math.isfinite(aggregated_fraction) else None
    retention = kv_retention(demand, gpu, rps)
    plan = {
        "gpu_profile": gpu.name,
        "target_rps": rps,
        "ttft_ms": ttft_ms,
        "itl_ms": itl_ms,
        "mean_uncached_input_tokens": uncached,
        "mean_input_tokens": demand.mean_input_tokens,
        "mean_output_tokens": output,
        "prefill": prefill,
        "decode": decode,
        "aggregated": {
            "instances": aggregated,
            "gpus": aggregated * gpu.gpus_per_instance if aggregated is not None else None,
        },
        "kv_retention": retention,
    }
    plan["recommendation"] = recommend(plan, demand)
    plan["engine_hints"] = engine_hints(plan, demand, gpu)
    return plan


def kv_retention(demand: Demand, gpu: GpuProfile, rps: float) -> dict[str, Any]:
    """How long KV must outlive a response to be reused after a tool gap, and how much of it is
    held at once then (Little's law: gaps per second x mean gap x context)."""
    if not demand.tool_gaps_per_request or demand.tool_gap_mean_s is None:
        return {"ttl_s": None, "note": "no tool gaps observed"}
    in_gap = rps * demand.tool_gaps_per_request * demand.tool_gap_mean_s
    tokens = in_gap * demand.context_tokens
    return {
        "ttl_s": demand.tool_gap_p90_s,
        "sessions_in_tool_gaps": in_gap,
        "held_tokens": tokens,
        "held_bytes": tokens * gpu.kv_bytes_per_token,
        "held_instances_of_kv_memory": tokens * gpu.kv_bytes_per_token / (gpu.kv_capacity_gb * 1e9),
    }


def recommend(plan: dict[str, Any], demand: Demand) -> dict[str, Any]:
    """Aggregated or disaggregated prefill/decode, with the reasons for and against."""
    output = demand.mean_output_tokens
    ratio = demand.mean_uncached_input_tokens / output if output else math.inf
    prefill_ms = plan["prefill"]["service_ms"]
    itl_ms = plan["itl_ms"]
    reasons_for, reasons_against = [], []
    if ratio >= LLM_D_ISL_OSL:
        reasons_for.append(
            f"uncached input:output is {ratio:.0f}:1, at or above the {LLM_D_ISL_OSL:.0f}:1 where llm-d "
            "recommends P/D disaggregation"
        )
    else:
        reasons_against.append(
            f"uncached input:output is {ratio:.1f}:1, under llm-d's {LLM_D_ISL_OSL:.0f}:1: decode dominates"
        )
    if prefill_ms > itl_ms:
        reasons_for.append(
            f"a mean uncached prefill takes {prefill_ms:.0f} ms, {prefill_ms / itl_ms:.0f} ITL steps: "
            "colocated, it would stall decoding or need chunking"
        )
    else:
        reasons_against.append(
            f"a mean uncached prefill ({prefill_ms:.0f} ms) fits in one {itl_ms:.0f} ms decode step: "
            "chunked prefill on shared instances suffices"
        )
    if plan["decode"]["binding"] == "kv_memory":
        reasons_for.append(
            "decode is bound by KV memory: decode-only instances hold KV without prefill activations"
        )
    shared = plan["aggregated"]["instances"]
    fits_one = shared is not None and shared <= 1
    if fits_one:
        reasons_against.append(
            "the whole load fits on one shared instance: separate pools would double the GPUs"
        )
    reasons_against.append(
        "disaggregation does not raise throughput (vLLM docs); it isolates TTFT from ITL and tames tail ITL"
    )
    disaggregate = ratio >= LLM_D_ISL_OSL and prefill_ms > itl_ms and not fits_one
    return {
        "mode": "disaggregated" if disaggregate else "aggregated",
        "uncached_input_output_ratio": ratio,
        "prefill_decode_instances": f"{plan['prefill']['instances']}:{plan['decode']['instances']}"
        if disaggregate
        else None,
        "reasons_for_disaggregation": reasons_for,
        "reasons_against": reasons_against,
    }


def engine_hints(plan: dict[str, Any], demand: Demand, gpu: GpuProfile) -> dict[str, Any]:
    """Settings for vLLM, SGLang, Dynamo and llm-d that follow from the plan."""
    tp = gpu.gpus_per_instance
    max_seqs = plan["decode"]["max_sequences_per_instance"]
    disaggregated = plan["recommendation"]["mode"] == "disaggregated"
    prefix = demand.hit_ratio is not None and demand.hit_ratio > 0
    # The uncached prompt a decode worker can prefill within one ITL step: shorter prompts are
    # better kept off the prefill pool (llm-d's pd-profile-handler threshold).
    threshold = int(gpu.prefill_tokens_per_s * gpu.derate * plan["itl_ms"] / 1000.0)
    vllm = [f"--tensor-parallel-size {tp}", "--gpu-memory-utilization 0.9"]
    if prefix:
        vllm.insert(0, "--enable-prefix-caching")
    if max_seqs > 0:
        vllm.append(f"--max-num-seqs {max_seqs}")
    if disaggregated:
        vllm.append('--kv-transfer-config \'{"kv_connector":"NixlConnector","kv_role":"kv_both"}\'')
    retention = plan["kv_retention"]
    offload = None
    if retention.get("held_instances_of_kv_memory") and retention["held_instances_of_kv_memory"] > 0.25:
        blocks = math.ceil(retention["held_tokens"] / 64)
        offload = (
            '--kv-transfer-config \'{"kv_connector":"OffloadingConnector","kv_role":"kv_both",'
            f'"kv_connector_extra_config":{{"block_size":64,"num_cpu_blocks":{blocks}}}}}\''
        )
    sglang = [f"--tp {tp}"]
    if prefix:
        sglang.append("--schedule-policy lpm")
    if max_seqs > 0:
        sglang.append(f"--max-running-requests {max_seqs}")
    hints: dict[str, Any] = {
        "vllm": vllm,
        "sglang": sglang,
        "dynamo_dgdr": {
            "workload": {
                "isl": round(demand.mean_uncached_input_tokens),
                "osl": round(demand.mean_output_tokens),
            },
            "sla": {"ttft": plan["ttft_ms"], "itl": plan["itl_ms"]},
            "note": "isl is the uncached input: Dynamo's profiler assumes no KV reuse",
        },
        "llm_d": {"pd-profile-handler": {"threshold": threshold}},
    }
    if disaggregated:
        hints["sglang_prefill"] = ["--disaggregation-mode prefill", "--disaggregation-transfer-backend nixl"]
        hints["sglang_decode"] = ["--disaggregation-mode decode", "--disaggregation-transfer-backend nixl"]
        hints["sglang_router"] = (
            "python -m sglang_router.launch_router --pd-disaggregation --prefill http://P:30000 --decode http://D:30001"
        )
    if offload:
        hints["vllm_kv_offload"] = offload
    if retention.get("ttl_s"):
        hints["kv_retention_ttl_s"] = math.ceil(retention["ttl_s"])
    return hints


def profile_dict(gpu: GpuProfile) -> dict[str, Any]:
    return asdict(gpu)


# --- the projected workload: what a parallel-calling model would ask of serving ---------------


def dag_savings(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Per workload (from `trace_workloads`): the sums of the `trace_dag` table (the dependency
    DAG analysis's contract). Empty when that analysis has not run.

    `input_tokens_saved` is the input the removed turns re-sent: the table's column of that name
    where the store has it and the row fills it, else `tokens_saved`.
    """
    has_input_column = con.execute(
        "SELECT count(*) FROM information_schema.columns "
        "WHERE table_name = 'trace_dag' AND column_name = 'input_tokens_saved'"
    ).fetchall()[0][0]
    resent = "coalesce(d.input_tokens_saved, d.tokens_saved)" if has_input_column else "d.tokens_saved"
    rows = con.execute(
        f"""
        SELECT w.workload, count(*) AS traces, sum(d.tool_calls) AS tool_calls,
               sum(d.observed_turns) AS observed_turns, sum(d.min_turns) AS min_turns,
               sum(d.turns_saved) AS turns_saved, sum(d.tokens_saved) AS tokens_saved,
               sum({resent}) AS input_tokens_saved,
               sum(d.observed_ms) AS observed_ms, sum(d.parallel_ms) AS parallel_ms
        FROM trace_dag d JOIN trace_workloads w USING (trace_id)
        GROUP BY w.workload
        """
    )
    columns = [c[0] for c in rows.description]
    return {row[0]: dict(zip(columns[1:], row[1:], strict=True)) for row in rows.fetchall()}


def project_demand(demand: Demand, llm_calls: int, savings: dict[str, Any]) -> Demand:
    """The same workload served to a model that issues the DAG's parallel schedule.

    The same sessions arrive at the same rate with `turns_saved` fewer LLM calls;
    `input_tokens_saved` (else `tokens_saved`: the input the removed calls re-sent) comes off the
    input, of which the
    share the cache would have served (`hit_ratio`) comes off the cached part and the rest off
    the uncached part; the same output is spread over fewer calls.
    """
    saved_turns = min(int(savings.get("turns_saved") or 0), max(llm_calls - 1, 0))
    calls = llm_calls - saved_turns
    factor = calls / llm_calls
    total_input = demand.mean_input_tokens * llm_calls
    total_uncached = demand.mean_uncached_input_tokens * llm_calls
    resent = savings.get("input_tokens_saved")
    saved_tokens = min(
        float((resent if resent is not None else savings.get("tokens_saved")) or 0), total_input
    )
    hit = demand.hit_ratio or 0.0
    return Demand(
        rps=demand.rps * factor,
        mean_input_tokens=(total_input - saved_tokens) / calls,
        mean_uncached_input_tokens=max(total_uncached - saved_tokens * (1 - hit), 0.0) / calls,
        mean_output_tokens=demand.mean_output_tokens * llm_calls / calls,
        hit_ratio=demand.hit_ratio,
        tool_gaps_per_request=demand.tool_gaps_per_request,
        tool_gap_p90_s=demand.tool_gap_p90_s,
        tool_gap_mean_s=demand.tool_gap_mean_s,
    )
