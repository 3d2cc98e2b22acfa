"""The data-analyst agent: answers business questions with SQL over a warehouse and draws charts.

Its sources never name the workload, so the ingest groups its runs by their fingerprint (system
prompt and tool set). Two scripts, chosen by the run's index: revenue growth by region (tables
described in parallel or one per call, a query that fails on a wrong column and is retried with
the column the description gave, a chart of the query's result, a follow-up question), and churn
by plan (a query, then a chart asked for in a later user turn).
"""

from __future__ import annotations

import random

from traceforge.samples.scenario import Builder, Scenario, ToolSpec, random_id

WORKLOAD = "data-analyst"
MODEL = "gpt-4.1"

SYSTEM = """You are an analytics assistant for the finance and growth teams. You answer questions by \
querying the company's DuckDB warehouse.

- Look at the available tables and their columns before writing SQL; never guess column names.
- Write one query per question when possible; aggregate in SQL, not in your head.
- Money columns are USD; timestamps are UTC. Quarters are calendar quarters.
- When a chart would help, draw it with make_chart from the query_id that run_sql returned.
- State the numbers you report with their units, and mention any filter you applied."""

TOOLS = [
    ToolSpec(
        "list_tables",
        "List the warehouse tables with their row counts.",
        {"type": "object", "properties": {}},
        (0.1, 0.3),
    ),
    ToolSpec(
        "describe_table",
        "Columns and types of one table.",
        {"type": "object", "properties": {"table": {"type": "string"}}, "required": ["table"]},
        (0.1, 0.4),
    ),
    ToolSpec(
        "run_sql",
        "Run a read-only SQL query (DuckDB dialect). Returns a query_id, the columns and up to 50 rows.",
        {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]},
        (0.6, 3.0),
    ),
    ToolSpec(
        "make_chart",
        "Draw a chart of a query result and return its URL.",
        {
            "type": "object",
            "properties": {
                "query_id": {"type": "string"},
                "kind": {"type": "string", "enum": ["bar", "line", "scatter"]},
                "x": {"type": "string"},
                "y": {"type": "string"},
                "title": {"type": "string"},
            },
            "required": ["query_id", "kind", "x", "y"],
        },
        (0.4, 1.5),
    ),
]

TABLES = {
    "orders": 1_843_201,
    "order_items": 5_402_877,
    "customers": 211_940,
    "regions": 6,
    "subscriptions": 48_312,
    "plans": 4,
}
ORDERS = [
    ("order_id", "BIGINT"),
    ("customer_id", "BIGINT"),
    ("region_id", "INTEGER"),
    ("ordered_at", "TIMESTAMP"),
    ("net_amount_usd", "DECIMAL(12,2)"),
    ("status", "VARCHAR"),
]
REGIONS = [("region_id", "INTEGER"), ("region_name", "VARCHAR"), ("sales_area", "VARCHAR")]
SUBSCRIPTIONS = [
    ("subscription_id", "BIGINT"),
    ("customer_id", "BIGINT"),
    ("plan_code", "VARCHAR"),
    ("started_at", "TIMESTAMP"),
    ("cancelled_at", "TIMESTAMP"),
]
REGION_NAMES = ["EMEA", "North America", "LATAM", "APAC", "ANZ", "India"]


def scenario(rng: random.Random, index: int, parallel: bool) -> Scenario:
    """The `index`-th data-analyst run."""
    script = (region_growth, churn_by_plan)[index % 2]
    return script(rng, index, parallel)


def _builder(rng: random.Random) -> Builder:
    return Builder(rng, WORKLOAD, False, MODEL, SYSTEM, TOOLS)


def _describe(table: str, columns: list[tuple[str, str]]) -> dict:
    return {"table": table, "columns": [{"name": name, "type": kind} for name, kind in columns]}


def _tables() -> dict:
    return {"tables": [{"name": name, "rows": rows} for name, rows in TABLES.items()]}


def _query_result(rng: random.Random, columns: list[str], rows: list[list]) -> dict:
    return {
        "query_id": "q_" + random_id(rng, 12),
        "columns": columns,
        "rows": rows,
        "row_count": len(rows),
        "elapsed_ms": rng.randrange(40, 2400),
    }


def _months(quarter_start: str) -> list[str]:
    """'2025-10-01' -> ['2025-10', '2025-11', '2025-12']"""
    year, month = int(quarter_start[:4]), int(quarter_start[5:7])
    return [f"{year}-{month + k:02d}" for k in range(3)]


def region_growth(rng: random.Random, index: int, parallel: bool) -> Scenario:
    b = _builder(rng)
    later, earlier = rng.choice([("2026-01-01", "2025-10-01"), ("2026-04-01", "2026-01-01")])
    name = {"2026-01-01": "Q1 2026", "2025-10-01": "Q4 2025", "2026-04-01": "Q2 2026"}
    b.user(f"Which regions grew revenue the most in {name[later]} compared to {name[earlier]}?")
    tables = b.tool("list_tables", {}, _tables())
    b.llm(tables)
    describes = [
        b.tool("describe_table", {"table": "orders"}, _describe("orders", ORDERS), uses=[(tables, "orders")]),
        b.tool("describe_table", {"table": "regions"}, _describe("regions", REGIONS)),
    ]
    if parallel:
        b.llm(*describes)
    else:
        b.llm(describes[0])
        b.llm(describes[1])
        b.serial(*describes)
    query = (
        "SELECT r.region_name,\n"
        "       sum({m}) FILTER (WHERE o.ordered_at >= DATE '{e}'\n"
        "                           AND o.ordered_at < DATE '{l}') AS before_usd,\n"
        "       sum({m}) FILTER (WHERE o.ordered_at >= DATE '{l}'\n"
        "                           AND o.ordered_at < DATE '{l}' + INTERVAL 3 MONTH) AS after_usd,\n"
        "       round(100 * (after_usd / before_usd - 1), 1) AS growth_pct\n"
        "FROM orders o JOIN regions r USING (region_id)\n"
        "WHERE o.status = 'completed'\nGROUP BY ALL ORDER BY growth_pct DESC"
    )
    wrong = b.tool(
        "run_sql",
        {"sql": query.format(m="o.amount", e=earlier, l=later)},
        {
            "error": 'Binder Error: Referenced column "amount" not found in FROM clause! '
            'Candidate bindings: "o.net_amount_usd", "o.ordered_at"'
        },
        error=True,
    )
    b.llm(wrong)
    rows = []
    for region in REGION_NAMES:
        before = round(rng.uniform(0.4, 9.0) * 1e6, 2)
        growth = rng.uniform(-0.08, 0.31)
        rows.append([region, before, round(before * (1 + growth), 2), round(100 * growth, 1)])
    rows.sort(key=lambda row: -row[3])
    result = _query_result(rng, ["region_name", "before_usd", "after_usd", "growth_pct"], rows)
    fixed = b.tool(
        "run_sql",
        {"sql": query.format(m="o.net_amount_usd", e=earlier, l=later)},
        result,
        retry_of=wrong,
        uses=[(describes[0], "net_amount_usd")],
    )
    b.llm(fixed)
    chart = b.tool(
        "make_chart",
        {
            "query_id": result["query_id"],
            "kind": "bar",
            "x": "region_name",
            "y": "growth_pct",
            "title": f"Revenue growth by region, {name[later]} vs {name[earlier]}",
        },
        {
            "chart_id": "ch_" + random_id(rng, 10),
            "url": f"https://charts.internal/c/{random_id(rng, 16)}.png",
        },
        uses=[(fixed, result["query_id"])],
    )
    b.llm(chart)
    top = rows[0]
    b.llm(
        text=f"{top[0]} grew fastest: {top[3]:+.1f}% (${top[1] / 1e6:.2f}M → ${top[2] / 1e6:.2f}M), "
        f"followed by "
        f"{rows[1][0]} ({rows[1][3]:+.1f}%) and {rows[2][0]} ({rows[2][3]:+.1f}%). {rows[-1][0]} was weakest "
        f"({rows[-1][3]:+.1f}%). Chart: {chart.result['url']} (completed orders only)."
    )
    region = rng.choice(REGION_NAMES[:3])
    b.user(f"Break {region} down by month for the same two quarters.")
    months = [[month, round(rng.uniform(0.2, 3.0) * 1e6, 2)] for month in _months(earlier) + _months(later)]
    monthly = b.tool(
        "run_sql",
        {
            "sql": "SELECT strftime(o.ordered_at, '%Y-%m') AS month, sum(o.net_amount_usd) AS revenue_usd\n"
            "FROM orders o JOIN regions r USING (region_id)\n"
            f"WHERE r.region_name = '{region}' AND o.status = 'completed'\n"
            f"  AND o.ordered_at >= DATE '{earlier}' AND o.ordered_at < DATE '{later}' + INTERVAL 3 MONTH\n"
            "GROUP BY ALL ORDER BY month"
        },
        _query_result(rng, ["month", "revenue_usd"], months),
    )
    b.llm(monthly)
    b.llm(text=f"{region} by month: " + ", ".join(f"{m}: ${v / 1e6:.2f}M" for m, v in months) + ".")
    return b.build()


def churn_by_plan(rng: random.Random, index: int, parallel: bool) -> Scenario:
    b = _builder(rng)
    b.user("What was monthly churn by plan over the last six months (through March 2026)?")
    tables = b.tool("list_tables", {}, _tables())
    b.llm(tables)
    describe = b.tool(
        "describe_table",
        {"table": "subscriptions"},
        _describe("subscriptions", SUBSCRIPTIONS),
        uses=[(tables, "subscriptions")],
    )
    b.llm(describe)
    plans = ["starter", "team", "business", "enterprise"]
    months = ["2025-10", "2025-11", "2025-12", "2026-01", "2026-02", "2026-03"]
    rows = [[m, p, round(rng.uniform(0.3, 6.5), 2)] for m in months for p in plans]
    result = _query_result(rng, ["month", "plan_code", "churn_pct"], rows)
    query = b.tool(
        "run_sql",
        {
            "sql": "WITH months AS (SELECT unnest(generate_series(DATE '2025-10-01', DATE '2026-03-01', "
            "INTERVAL 1 MONTH)) AS m)\n"
            "SELECT strftime(m, '%Y-%m') AS month, s.plan_code,\n"
            "       round(100.0 * count(*) FILTER (WHERE s.cancelled_at >= m AND s.cancelled_at < m + "
            "INTERVAL 1 MONTH)\n             / count(*), 2) AS churn_pct\n"
            "FROM months JOIN subscriptions s ON s.started_at < m AND (s.cancelled_at IS NULL OR "
            "s.cancelled_at >= m)\nGROUP BY ALL ORDER BY month, s.plan_code"
        },
        result,
        uses=[(describe, "cancelled_at")],
    )
    b.llm(query)
    averages = {p: sum(r[2] for r in rows if r[1] == p) / len(months) for p in plans}
    b.llm(
        text="Average monthly churn, Oct 2025–Mar 2026: "
        + ", ".join(f"{p} {averages[p]:.2f}%" for p in plans)
        + f". Highest single month: {max(rows, key=lambda r: r[2])[1]} in {max(rows, key=lambda r: r[2])[0]}."
    )
    b.user("Plot that as a line chart, one line per plan.")
    chart = b.tool(
        "make_chart",
        {
            "query_id": result["query_id"],
            "kind": "line",
            "x": "month",
            "y": "churn_pct",
            "title": "Monthly churn by plan",
        },
        {
            "chart_id": "ch_" + random_id(rng, 10),
            "url": f"https://charts.internal/c/{random_id(rng, 16)}.png",
        },
        uses=[(query, result["query_id"])],
    )
    b.llm(chart)
    b.llm(text=f"Here it is: {chart.result['url']}")
    return b.build()
