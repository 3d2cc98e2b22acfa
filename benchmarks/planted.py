"""Traces with planted dependency structures: the ground truth traceforge's inference is scored on.

A small simulated shop-and-travel world: every value a call uses comes from somewhere definite (the
user's message, or a named earlier result), so the true dependencies are known by construction.
Each trace has one to three user turns; each user turn holds a few independent *blocks*:

  chain          get_user -> get_order -> get_product [-> get_warehouse]      (ids flow down)
  fan            search_products -> get_product x k -> calculate(sum of prices) (fan-out, fan-in)
  diamond        get_user -> get_order x 2 -> compare_totals(both totals)     (diamond)
  independent    get_weather / get_exchange_rate for what the user named      (no edges)
  coincidence    the user names an order that an earlier result also lists    (no edge: user said it)
  write_read     update_address(order) -> get_order(same order)               (state)
  read_write     get_order(order) -> cancel_order(same order)                 (state, read before write)
  keyless        add_to_cart(product) -> list_cart()                          (state, no shared value)
  retry          get_product(typo) fails -> get_product(right id)             (control)
  correction     search_products(...) empty -> search_products(shorter) -> get_product (control, data)
  fallback       reserve_table(first choice) fails -> reserve_table(second choice) (control, no shared value)
  barrier        sync_inventory(): an opaque tool everything around it waits for
  report         send_email summing up the user turn: depends on every call before it
  airport        search_flights(to=FCO) for "Rome": a code the model knows, which an earlier
                 weather result happens to contain (the one case inference cannot resolve)
  paraphrase     create_ticket(description in the model's words, after results it does not use)

Calls are then put in a random order the true DAG allows and grouped into assistant turns, with
independent neighbours sometimes sharing a turn (already-parallel turns). The output is OpenAI chat
transcripts (JSON Lines, one conversation per line) that `traceforge ingest` reads, and the truth:
per trace, the calls in emission order with their user turn and block, and the planted edges.

>>> transcripts, truth = generate(3, seed=7)
>>> len(transcripts), sorted(truth) == sorted(t["id"] for t in transcripts)
(3, True)
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BLOCKS = (
    "chain",
    "fan",
    "diamond",
    "independent",
    "coincidence",
    "write_read",
    "read_write",
    "keyless",
    "retry",
    "correction",
    "barrier",
    "fallback",
)
# Blocks that fool the inference by design, planted rarely: they show its known blind spots.
RARE_BLOCKS = ("airport", "paraphrase")
RARE_RATE = 0.03
REPORT_RATE = 0.35
MERGE_RATE = 0.3
NEUTRAL = json.dumps({"status": "ok"})

CITIES = ["Paris", "Lisbon", "Oslo", "Vienna", "Madrid", "Prague", "Dublin", "Helsinki", "Zurich", "Athens"]
CURRENCIES = ["EUR", "GBP", "JPY", "CHF", "SEK", "NOK", "AUD", "CAD"]
PRODUCT_WORDS = ["lamp", "desk", "chair", "kettle", "backpack", "monitor", "speaker", "blender", "jacket"]
ADJECTIVES = ["blue", "ergonomic", "compact", "wireless", "oak", "foldable", "quiet", "steel"]
STREETS = ["Elm Street", "Harbor Road", "Mill Lane", "Station Avenue", "Castle Hill"]
RESTAURANTS = ["Chez Lou", "Blue Fig", "Osteria Nove", "The Copper Pot", "Sakura House", "Casa Verde"]
WEATHER = ["sunny", "cloudy", "light rain", "windy", "overcast"]

TOOLS = [
    ("get_user", "Get a customer's profile: name, email, address and order ids.", {"user_id": "string"}),
    ("get_order", "Get an order: its items, total and status.", {"order_id": "string"}),
    ("get_product", "Get a product: name, price, stock and warehouse.", {"product_id": "string"}),
    ("get_warehouse", "Get a warehouse's location and opening hours.", {"warehouse_id": "string"}),
    ("search_products", "Search the catalogue by keywords.", {"query": "string"}),
    ("get_weather", "Get today's weather in a city.", {"city": "string"}),
    ("get_exchange_rate", "Get the exchange rate from USD to a currency.", {"currency": "string"}),
    ("calculate", "Evaluate an arithmetic expression.", {"expression": "string"}),
    ("compare_totals", "Compare two amounts.", {"first_total": "number", "second_total": "number"}),
    ("send_email", "Send an email to a customer.", {"to": "string", "subject": "string", "body": "string"}),
    (
        "update_address",
        "Change the shipping address of an order.",
        {"order_id": "string", "address": "string"},
    ),
    ("cancel_order", "Cancel an order that has not shipped.", {"order_id": "string", "reason": "string"}),
    ("add_to_cart", "Add a product to the shopping cart.", {"product_id": "string"}),
    ("list_cart", "List the products in the shopping cart.", {}),
    ("sync_inventory", "Synchronise stock levels with the warehouse system.", {}),
    ("search_flights", "Search flights to an airport.", {"to": "string", "date": "string"}),
    ("create_ticket", "Open a support ticket.", {"title": "string", "description": "string"}),
    ("reserve_table", "Reserve a table at a restaurant.", {"restaurant": "string", "time": "string"}),
]


def tool_definitions() -> list[dict[str, Any]]:
    """The tools of the world in OpenAI's `tools` format."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": {p: {"type": t} for p, t in params.items()},
                    "required": list(params),
                },
            },
        }
        for name, description, params in TOOLS
    ]


@dataclass
class Planted:
    """One tool call of the plan: what it is called with, what it returns, what it truly needs."""

    key: str
    name: str
    arguments: dict[str, Any]
    result: str
    needs: list[tuple[str, str]] = field(default_factory=list)  # (key of an earlier call, kind)
    thought: str | None = None
    barrier: bool = False  # everything in the user turn before it precedes it, everything after follows


class World:
    """Fresh values that cannot collide by accident (coincidences are planted on purpose)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()
        self.counter = 0

    def fresh(self, make) -> str:
        while True:
            value = make()
            if value not in self.used:
                self.used.add(value)
                return value

    def user_id(self) -> str:
        return self.fresh(lambda: "u_" + "".join(self.rng.choices("0123456789abcdef", k=6)))

    def order_id(self) -> str:
        return self.fresh(lambda: "W" + "".join(self.rng.choices(string.digits, k=7)))

    def product_id(self) -> str:
        return self.fresh(lambda: f"P-{self.rng.randint(10000, 99999)}")

    def warehouse_id(self) -> str:
        return self.fresh(
            lambda: (
                "WH-" + "".join(self.rng.choices(string.ascii_uppercase, k=3)) + str(self.rng.randint(10, 99))
            )
        )

    def price(self) -> float:
        return float(self.fresh(lambda: f"{self.rng.randint(20, 900)}.{self.rng.randint(10, 99)}"))

    def email(self) -> str:
        return self.fresh(lambda: "".join(self.rng.choices(string.ascii_lowercase, k=7)) + "@example.com")

    def key(self) -> str:
        self.counter += 1
        return f"k{self.counter}"


def _product(world: World, product_id: str, warehouse: str | None = None) -> dict[str, Any]:
    rng = world.rng
    return {
        "product_id": product_id,
        "name": f"{rng.choice(ADJECTIVES)} {rng.choice(PRODUCT_WORDS)}",
        "price": world.price(),
        "stock": rng.randint(0, 9),
        "warehouse_id": warehouse or world.warehouse_id(),
    }


def _order(world: World, order_id: str, products: list[str]) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "items": products,
        "total": world.price(),
        "status": world.rng.choice(["pending", "shipped", "delivered"]),
    }


def _call(world: World, name: str, arguments: dict[str, Any], result: Any, **more: Any) -> Planted:
    text = result if isinstance(result, str) else json.dumps(result)
    return Planted(world.key(), name, arguments, text, **more)


# --- blocks: each returns (what the user asks, the calls) -----------------------------------------


def block_chain(world: World) -> tuple[str, list[Planted]]:
    user = world.user_id()
    order, product, warehouse = world.order_id(), world.product_id(), world.warehouse_id()
    a = _call(
        world,
        "get_user",
        {"user_id": user},
        {"user_id": user, "name": "Dana Reyes", "email": world.email(), "orders": [order]},
    )
    b = _call(
        world, "get_order", {"order_id": order}, _order(world, order, [product]), needs=[(a.key, "data")]
    )
    c = _call(
        world,
        "get_product",
        {"product_id": product},
        _product(world, product, warehouse),
        needs=[(b.key, "data")],
        thought=f"Order {order} holds {product}.",
    )
    calls = [a, b, c]
    if world.rng.random() < 0.5:
        calls.append(
            _call(
                world,
                "get_warehouse",
                {"warehouse_id": warehouse},
                {"warehouse_id": warehouse, "city": world.rng.choice(CITIES), "opens": "08:00"},
                needs=[(c.key, "data")],
            )
        )
    return f"Where is the product of the order of customer {user} stored?", calls


def block_fan(world: World) -> tuple[str, list[Planted]]:
    rng = world.rng
    query = f"{rng.choice(ADJECTIVES)} {rng.choice(PRODUCT_WORDS)}"
    ids = [world.product_id() for _ in range(rng.randint(2, 4))]
    search = _call(world, "search_products", {"query": query}, [{"product_id": i} for i in ids])
    details = [
        _call(world, "get_product", {"product_id": i}, _product(world, i), needs=[(search.key, "data")])
        for i in ids
    ]
    prices = [json.loads(d.result)["price"] for d in details]
    total = _call(
        world,
        "calculate",
        {"expression": " + ".join(f"{p}" for p in prices)},
        json.dumps({"value": round(sum(prices), 2)}),
        needs=[(d.key, "data") for d in details],
    )
    return f"What do all the {query} products cost together?", [search, *details, total]


def block_diamond(world: World) -> tuple[str, list[Planted]]:
    user = world.user_id()
    orders = [world.order_id(), world.order_id()]
    email = world.email()
    a = _call(
        world,
        "get_user",
        {"user_id": user},
        {"user_id": user, "name": "Sam Okafor", "email": email, "orders": orders},
    )
    b = _call(
        world,
        "get_order",
        {"order_id": orders[0]},
        _order(world, orders[0], [world.product_id()]),
        needs=[(a.key, "data")],
    )
    c = _call(
        world,
        "get_order",
        {"order_id": orders[1]},
        _order(world, orders[1], [world.product_id()]),
        needs=[(a.key, "data")],
    )
    first, second = json.loads(b.result), json.loads(c.result)
    d = _call(
        world,
        "compare_totals",
        {"first_total": first["total"], "second_total": second["total"]},
        json.dumps({"difference": round(first["total"] - second["total"], 2)}),
        needs=[(b.key, "data"), (c.key, "data")],
    )
    return f"Compare the totals of the orders of customer {user}.", [a, b, c, d]


def block_independent(world: World) -> tuple[str, list[Planted]]:
    rng = world.rng
    cities = rng.sample(CITIES, rng.randint(1, 3))
    currencies = rng.sample(CURRENCIES, rng.randint(0, 2))
    calls = [
        _call(
            world,
            "get_weather",
            {"city": city},
            {"city": city, "temp_c": rng.randint(-5, 35), "sky": rng.choice(WEATHER)},
        )
        for city in cities
    ]
    calls += [
        _call(
            world,
            "get_exchange_rate",
            {"currency": cur},
            {"currency": cur, "rate": round(rng.uniform(0.5, 160), 4)},
        )
        for cur in currencies
    ]
    asked = ", ".join(cities + currencies)
    return f"Weather and rates for: {asked}.", calls


def block_coincidence(world: World) -> tuple[str, list[Planted]]:
    user = world.user_id()
    order = world.order_id()
    other = world.order_id()
    a = _call(
        world,
        "get_user",
        {"user_id": user},
        {"user_id": user, "name": "Lee Park", "email": world.email(), "orders": [order, other]},
    )
    b = _call(world, "get_order", {"order_id": order}, _order(world, order, [world.product_id()]))
    # stock counts and quantities reappear by coincidence too (trivial numbers)
    return f"Show the profile of {user} and the order {order}.", [a, b]


def block_write_read(world: World) -> tuple[str, list[Planted]]:
    order = world.order_id()
    address = f"{world.rng.randint(2, 98)} {world.rng.choice(STREETS)}"
    a = _call(world, "update_address", {"order_id": order, "address": address}, NEUTRAL)
    result = _order(world, order, [world.product_id()])
    result["address"] = address
    b = _call(world, "get_order", {"order_id": order}, result, needs=[(a.key, "state")])
    return f"Ship order {order} to {address} instead and show me the order.", [a, b]


def block_read_write(world: World) -> tuple[str, list[Planted]]:
    order = world.order_id()
    a = _call(world, "get_order", {"order_id": order}, _order(world, order, [world.product_id()]))
    b = _call(
        world,
        "cancel_order",
        {"order_id": order, "reason": "customer request"},
        NEUTRAL,
        needs=[(a.key, "state")],
    )
    return f"Check order {order} and cancel it.", [a, b]


def block_keyless(world: World) -> tuple[str, list[Planted]]:
    product = world.product_id()
    a = _call(world, "add_to_cart", {"product_id": product}, NEUTRAL)
    b = _call(world, "list_cart", {}, [{"product_id": product, "quantity": 1}], needs=[(a.key, "state")])
    return f"Add {product} to my cart and show the cart.", [a, b]


def block_retry(world: World) -> tuple[str, list[Planted]]:
    product = world.product_id()
    typo = world.fresh(
        lambda: product[:-1] + world.rng.choice([d for d in string.digits if d != product[-1]])
    )
    a = _call(world, "get_product", {"product_id": typo}, f"Error: product {typo} not found")
    b = _call(
        world, "get_product", {"product_id": product}, _product(world, product), needs=[(a.key, "control")]
    )
    return f"Tell me about product {product}.", [a, b]


def block_correction(world: World) -> tuple[str, list[Planted]]:
    rng = world.rng
    noun = rng.choice(PRODUCT_WORDS)
    adjective, extra = rng.sample(ADJECTIVES, 2)
    product = world.product_id()
    a = _call(world, "search_products", {"query": f"{adjective} {extra} {noun} deluxe"}, "[]")
    b = _call(
        world,
        "search_products",
        {"query": f"{adjective} {noun}"},
        [{"product_id": product}],
        needs=[(a.key, "control")],
    )
    c = _call(
        world, "get_product", {"product_id": product}, _product(world, product), needs=[(b.key, "data")]
    )
    return f"Find me a {adjective} {extra} {noun}, deluxe if there is one.", [a, b, c]


def block_fallback(world: World) -> tuple[str, list[Planted]]:
    first, second = world.rng.sample(RESTAURANTS, 2)
    a = _call(
        world, "reserve_table", {"restaurant": first, "time": "19:30"}, f"Error: {first} is fully booked"
    )
    b = _call(
        world, "reserve_table", {"restaurant": second, "time": "19:30"}, NEUTRAL, needs=[(a.key, "control")]
    )
    return f"Book a table at {first} at 19:30, or at {second} if {first} is full.", [a, b]


def block_barrier(world: World) -> tuple[str, list[Planted]]:
    return "Sync the inventory.", [_call(world, "sync_inventory", {}, NEUTRAL, barrier=True)]


def block_airport(world: World) -> tuple[str, list[Planted]]:
    a = _call(world, "get_weather", {"city": "Rome"}, {"city": "Rome", "temp_c": 24, "airport": "FCO"})
    b = _call(world, "search_flights", {"to": "FCO", "date": "2025-06-01"}, [{"flight": "AZ611"}])
    return "Weather in Rome, and flights to Rome on 2025-06-01.", [a, b]


def block_paraphrase(world: World) -> tuple[str, list[Planted]]:
    city = world.rng.choice(CITIES)
    a = _call(world, "get_weather", {"city": city}, {"city": city, "temp_c": 11, "sky": "hail storm"})
    b = _call(
        world,
        "create_ticket",
        {
            "title": "Late delivery",
            "description": "Customer reports that the parcel has not arrived and would like a refund soon.",
        },
        json.dumps({"ticket": "opened"}),
    )
    return (
        f"Weather in {city}? Also my parcel never came, please open a ticket asking for my money back.",
        [a, b],
    )


BLOCK_MAKERS = {name: globals()[f"block_{name}"] for name in BLOCKS + RARE_BLOCKS}


def report_call(world: World, earlier: list[Planted], email: str) -> Planted:
    """An email summing up the user turn: quotes every earlier result, so it needs all of them."""
    facts = []
    for call in earlier:
        try:
            value = json.loads(call.result)
        except json.JSONDecodeError:
            value = call.result
        facts.append(f"{call.name}: {json.dumps(value)[:60]}")
    body = "Summary of what I did:\n" + "\n".join(facts)
    return _call(
        world,
        "send_email",
        {"to": email, "subject": "Summary", "body": body},
        NEUTRAL,
        needs=[(c.key, "derived") for c in earlier],
    )


# --- traces --------------------------------------------------------------------------------------


def _order_calls(rng: random.Random, calls: list[Planted]) -> list[list[Planted]]:
    """A random order the true DAG allows, grouped into turns (independent neighbours sometimes
    share one)."""
    needs = {c.key: {k for k, _ in c.needs} for c in calls}
    for position, barrier in enumerate(calls):
        if barrier.barrier:
            needs[barrier.key] |= {c.key for c in calls[:position]}
            for later in calls[position + 1 :]:
                needs[later.key].add(barrier.key)
    waiting = {key: len(keys) for key, keys in needs.items()}
    unlocks: dict[str, list[Planted]] = {}
    for call in calls:
        for key in needs[call.key]:
            unlocks.setdefault(key, []).append(call)
    ready = [c for c in calls if not waiting[c.key]]
    turns: list[list[Planted]] = []
    while ready:
        chosen = ready.pop(rng.randrange(len(ready)))
        current = turns[-1] if turns else None
        can_merge = (
            current is not None
            and not chosen.barrier
            and not any(c.barrier for c in current)
            and not needs[chosen.key] & {c.key for c in current}
            and rng.random() < MERGE_RATE
        )
        if can_merge:
            current.append(chosen)
        else:
            turns.append([chosen])
        for later in unlocks.get(chosen.key, ()):
            waiting[later.key] -= 1
            if not waiting[later.key]:
                ready.append(later)
    return turns


def generate_trace(
    rng: random.Random, trace_id: str, *, user_turns: int | None = None, calls_per_turn: int = 0
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One transcript and its truth: one to three user turns of one to three blocks each, or
    `user_turns` user turns of blocks adding up to at least `calls_per_turn` calls each."""
    world = World(rng)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are the assistant of an online shop. Use the tools."}
    ]
    truth_calls: list[str] = []
    segments: list[int] = []
    blocks: list[str] = []
    block_of: dict[str, str] = {}
    edges: list[list[str]] = []
    structures: list[str] = []
    ids: dict[str, str] = {}
    for segment in range(user_turns or rng.choice((1, 1, 2, 2, 3))):
        kinds = rng.sample(BLOCKS, rng.randint(1, 3))
        kinds += [k for k in RARE_BLOCKS if rng.random() < RARE_RATE]
        asks, calls = [], []
        while kinds:
            kind = kinds.pop()
            ask, block = BLOCK_MAKERS[kind](world)
            block_of.update((c.key, kind) for c in block)
            asks.append(ask)
            calls.extend(block)
            structures.append(kind)
            if not kinds and len(calls) < calls_per_turn:
                kinds.append(rng.choice(BLOCKS))
        email = world.email()
        turns = _order_calls(rng, calls)
        if rng.random() < REPORT_RATE:
            ordered = [c for turn in turns for c in turn]
            report = report_call(world, ordered, email)
            block_of[report.key] = "report"
            turns.append([report])
            asks.append(f"Then email a summary to {email}.")
            structures.append("report")
        messages.append({"role": "user", "content": " ".join(asks)})
        barrier_keys = [c.key for turn in turns for c in turn if c.barrier]
        ordered = [c for turn in turns for c in turn]
        for turn in turns:
            thought = next((c.thought for c in turn if c.thought), None)
            tool_calls = []
            for call in turn:
                ids[call.key] = f"{trace_id}-c{len(ids) + 1}"
                tool_calls.append(
                    {
                        "id": ids[call.key],
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                    }
                )
            messages.append({"role": "assistant", "content": thought, "tool_calls": tool_calls})
            for call in turn:
                messages.append({"role": "tool", "tool_call_id": ids[call.key], "content": call.result})
        for position, call in enumerate(ordered):
            truth_calls.append(ids[call.key])
            segments.append(segment)
            blocks.append(block_of[call.key])
            for key, kind in call.needs:
                edges.append([ids[key], ids[call.key], kind])
            if call.key in barrier_keys:
                edges += [[ids[c.key], ids[call.key], "state"] for c in ordered[:position]]
                edges += [[ids[call.key], ids[c.key], "state"] for c in ordered[position + 1 :]]
        messages.append({"role": "assistant", "content": "Done: here is what I found."})
    transcript = {"id": trace_id, "workload": "planted", "messages": messages, "tools": tool_definitions()}
    return transcript, {
        "calls": truth_calls,
        "segments": segments,
        "blocks": blocks,
        "edges": edges,
        "structures": structures,
    }


def generate(n_traces: int, seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """`n_traces` transcripts with planted structures, and the truth keyed by trace id."""
    rng = random.Random(seed)
    transcripts, truth = [], {}
    for number in range(n_traces):
        trace_id = f"planted-{seed}-{number:05d}"
        transcript, planted = generate_trace(rng, trace_id)
        transcripts.append(transcript)
        truth[trace_id] = planted
    return transcripts, truth


def write(folder: Path, transcripts: list[dict[str, Any]], truth: dict[str, Any]) -> Path:
    """Write `planted.jsonl` (the traces) and `truth.json` into `folder`; returns the traces' path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "planted.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in transcripts), encoding="utf-8")
    (folder / "truth.json").write_text(json.dumps(truth, indent=1), encoding="utf-8")
    return path
