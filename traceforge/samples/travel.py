"""The travel-booking support agent: weather, flights, hotels, reservations (an OpenAI-style agent).

Four scripts, chosen by the run's index so every file holds each kind: weather for several cities
then a booking (the cities looked up one per LLM call, or in parallel), a date change whose first
search fails on a badly formatted date and is retried, a flight-and-hotel bundle searched and booked
with parallel calls, and a refund whose card is declined twice before the agent hands over.
"""

from __future__ import annotations

import random
from datetime import date, timedelta

from traceforge.samples.scenario import Builder, Scenario, ToolSpec, random_id

WORKLOAD = "travel-support"
MODEL = "gpt-4.1-mini"

SYSTEM = """You are Skyway Travel's customer support agent. You help travellers check the weather at \
their destination, search and book flights and hotels, change or cancel reservations, and get refunds.

Policies:
- Confirm the traveller's identity with get_customer (by email) before booking or cancelling anything.
- Quote prices in USD with cents, and always mention the fare's refund rules before booking.
- Flights and hotels are booked only after the traveller explicitly agrees to an option.
- Dates are YYYY-MM-DD in every tool call. Airports are IATA codes.
- Basic Economy fares are not refundable; refunds of other fares go to the original payment method.
- If a payment fails twice, or the traveller asks for a person, call transfer_to_human with a summary.
- Never invent availability, prices or confirmation codes: use only what the tools return.
Be brief and friendly. Use the traveller's first name."""

TOOLS = [
    ToolSpec(
        "get_weather",
        "Weather for a city on one date: the forecast up to 14 days ahead, climate averages beyond.",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Lisbon"},
                "date": {"type": "string", "description": "YYYY-MM-DD"},
            },
            "required": ["city", "date"],
        },
        (0.2, 0.9),
    ),
    ToolSpec(
        "search_flights",
        "Search one-way flights between two airports on a date. Returns at most 3 options.",
        {
            "type": "object",
            "properties": {
                "origin": {"type": "string", "description": "IATA airport code"},
                "destination": {"type": "string", "description": "IATA airport code"},
                "date": {"type": "string", "description": "YYYY-MM-DD"},
                "cabin": {"type": "string", "enum": ["basic", "economy", "premium", "business"]},
            },
            "required": ["origin", "destination", "date"],
        },
        (0.8, 2.6),
    ),
    ToolSpec(
        "search_hotels",
        "Search hotels in a city for a stay. Returns at most 3 options sorted by rating.",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "check_in": {"type": "string", "description": "YYYY-MM-DD"},
                "check_out": {"type": "string", "description": "YYYY-MM-DD"},
                "max_nightly_usd": {"type": "number"},
            },
            "required": ["city", "check_in", "check_out"],
        },
        (0.7, 2.2),
    ),
    ToolSpec(
        "get_customer",
        "Look up a customer by email: id, name, loyalty tier and saved payment methods.",
        {
            "type": "object",
            "properties": {"email": {"type": "string"}},
            "required": ["email"],
        },
        (0.1, 0.4),
    ),
    ToolSpec(
        "get_reservation",
        "Fetch a reservation by its 6-character confirmation code.",
        {
            "type": "object",
            "properties": {"confirmation_code": {"type": "string"}},
            "required": ["confirmation_code"],
        },
        (0.1, 0.5),
    ),
    ToolSpec(
        "book_flight",
        "Book a flight returned by search_flights for a customer, charging a saved payment method.",
        {
            "type": "object",
            "properties": {
                "flight_id": {"type": "string"},
                "customer_id": {"type": "string"},
                "payment_method_id": {"type": "string"},
            },
            "required": ["flight_id", "customer_id", "payment_method_id"],
        },
        (0.9, 3.0),
    ),
    ToolSpec(
        "book_hotel",
        "Book a hotel returned by search_hotels for a customer.",
        {
            "type": "object",
            "properties": {
                "hotel_id": {"type": "string"},
                "customer_id": {"type": "string"},
                "payment_method_id": {"type": "string"},
                "check_in": {"type": "string"},
                "check_out": {"type": "string"},
            },
            "required": ["hotel_id", "customer_id", "payment_method_id", "check_in", "check_out"],
        },
        (0.9, 2.8),
    ),
    ToolSpec(
        "cancel_reservation",
        "Cancel a reservation. refund_to is 'original_payment' or 'travel_credit'.",
        {
            "type": "object",
            "properties": {
                "confirmation_code": {"type": "string"},
                "refund_to": {"type": "string", "enum": ["original_payment", "travel_credit"]},
                "payment_method_id": {"type": "string"},
            },
            "required": ["confirmation_code", "refund_to"],
        },
        (0.6, 2.0),
    ),
    ToolSpec(
        "transfer_to_human",
        "Hand the conversation to a human agent with a summary of the issue.",
        {
            "type": "object",
            "properties": {"summary": {"type": "string"}},
            "required": ["summary"],
        },
        (0.1, 0.3),
    ),
]

CITIES = [
    ("Lisbon", "LIS"),
    ("Porto", "OPO"),
    ("Seville", "SVQ"),
    ("Barcelona", "BCN"),
    ("Rome", "FCO"),
    ("Athens", "ATH"),
    ("Denver", "DEN"),
    ("Austin", "AUS"),
    ("Seattle", "SEA"),
    ("Montreal", "YUL"),
]
HOMES = [("Boston", "BOS"), ("Chicago", "ORD"), ("Toronto", "YYZ"), ("New York", "JFK"), ("Miami", "MIA")]
BIG_CITIES = [("New York", "JFK", "Midtown"), ("London", "LHR", "Soho"), ("Paris", "CDG", "the Marais")]
PEOPLE = [
    "Maya Chen",
    "Daniel Okafor",
    "Sofia Rossi",
    "Liam Novak",
    "Aisha Rahman",
    "Jonas Berg",
    "Elena Petrova",
    "Marco Silva",
    "Hana Sato",
    "Omar Haddad",
    "Grace Kim",
    "Tomás Ruiz",
]
CARRIERS = ["UA", "DL", "AA", "B6", "TP", "IB", "AC"]
SKIES = ["sunny", "partly cloudy", "cloudy", "light rain", "showers"]
HOTEL_NAMES = ["The Linden", "Harbor House", "Hotel Marlowe", "The Foundry", "Casa Alma", "Northline Suites"]


def scenario(rng: random.Random, index: int, parallel: bool) -> Scenario:
    """The `index`-th travel-support run; `parallel` says whether the client allows several tool
    calls per assistant message (the legacy `function_call` form does not)."""
    script = (weather_then_booking, date_change, trip_bundle, declined_refund)[index % 4]
    return script(rng, index, parallel)


def _builder(rng: random.Random) -> Builder:
    return Builder(rng, WORKLOAD, True, MODEL, SYSTEM, TOOLS)


def _customer(rng: random.Random) -> tuple[str, str, dict]:
    name = rng.choice(PEOPLE)
    email = name.lower().replace(" ", ".").replace("á", "a") + "@" + rng.choice(["gmail.com", "proton.me"])
    cards = [
        {
            "id": "pm_" + random_id(rng, 14),
            "type": "card",
            "brand": brand,
            "last4": f"{rng.randrange(10000):04d}",
        }
        for brand in rng.sample(["visa", "mastercard", "amex"], 2)
    ]
    record = {
        "customer_id": "cus_" + random_id(rng, 10),
        "name": name,
        "tier": rng.choice(["member", "silver", "gold"]),
        "payment_methods": cards,
    }
    return name, email, record


def _flights(rng: random.Random, origin: str, destination: str, day: date, n: int = 3) -> list[dict]:
    options = []
    for hour in sorted(rng.sample(range(6, 21), n)):
        carrier = rng.choice(CARRIERS)
        minutes = rng.randrange(0, 60, 5)
        duration = rng.randrange(95, 480, 5)
        depart = f"{day.isoformat()}T{hour:02d}:{minutes:02d}"
        options.append(
            {
                "flight_id": f"{carrier}{rng.randrange(100, 2999)}-{day:%Y%m%d}-{random_id(rng, 4).upper()}",
                "origin": origin,
                "destination": destination,
                "depart": depart,
                "duration_min": duration,
                "fare": rng.choice(["basic", "economy", "economy"]),
                "price_usd": round(rng.uniform(120, 690), 2),
                "seats_left": rng.randrange(1, 9),
            }
        )
    return options


def _trip_day(rng: random.Random) -> date:
    return date(2026, 3, 20) + timedelta(days=rng.randrange(0, 60))


def _when(day: date) -> str:
    return f"{day:%B} {day.day}"


def _first(name: str) -> str:
    return name.split()[0]


def weather_then_booking(rng: random.Random, index: int, parallel: bool) -> Scenario:
    b = _builder(rng)
    name, email, customer = _customer(rng)
    home_city, home = rng.choice(HOMES)
    picks = rng.sample(CITIES, 3)
    day = _trip_day(rng)
    b.user(
        f"Hi! I'm planning a long weekend around {_when(day)} and can't decide between "
        f"{picks[0][0]}, {picks[1][0]} and {picks[2][0]}. What's the weather looking like in each?"
    )
    forecasts = []
    for city, _ in picks:
        high = rng.randrange(8, 29)
        forecasts.append(
            {
                "city": city,
                "date": day.isoformat(),
                "sky": rng.choice(SKIES),
                "high_c": high,
                "low_c": high - rng.randrange(4, 11),
                "precipitation_pct": rng.randrange(0, 80, 5),
            }
        )
    calls = [
        b.tool("get_weather", {"city": city, "date": day.isoformat()}, forecast)
        for (city, _), forecast in zip(picks, forecasts, strict=True)
    ]
    one_per_turn = not parallel or (index // 4) % 2 == 0
    if one_per_turn:
        for call in calls:
            b.llm(call)
        b.serial(*calls)
    else:
        b.llm(*calls)
    best = max(range(3), key=lambda i: forecasts[i]["high_c"] - forecasts[i]["precipitation_pct"] / 10)
    lines = "; ".join(f"{f['city']}: {f['sky']}, {f['low_c']}–{f['high_c']} °C" for f in forecasts)
    b.llm(text=f"Here's the forecast for {_when(day)}: {lines}. {forecasts[best]['city']} looks best.")

    city, code = picks[best]
    b.user(f"{city} it is. Can you find me a flight from {home_city} that day?")
    options = _flights(rng, home, code, day)
    search = b.tool("search_flights", {"origin": home, "destination": code, "date": day.isoformat()}, options)
    b.llm(search)
    listing = "\n".join(
        f"{i + 1}. {o['depart'][11:]} ({o['fare']}) ${o['price_usd']:.2f}" for i, o in enumerate(options)
    )
    b.llm(text=f"I found {len(options)} flights {home} → {code} on {_when(day)}:\n{listing}\nWhich one?")

    choice = min(range(len(options)), key=lambda i: options[i]["price_usd"])
    b.user(f"Book the cheapest one please. I'm {name}, {email}.")
    lookup = b.tool("get_customer", {"email": email}, customer)
    b.llm(lookup)
    flight, card = options[choice], customer["payment_methods"][0]
    code6 = random_id(rng, 6).upper()
    booking = b.tool(
        "book_flight",
        {
            "flight_id": flight["flight_id"],
            "customer_id": customer["customer_id"],
            "payment_method_id": card["id"],
        },
        {"confirmation_code": code6, "status": "ticketed", "total_usd": flight["price_usd"]},
        uses=[(search, flight["flight_id"]), (lookup, customer["customer_id"]), (lookup, card["id"])],
    )
    b.llm(booking)
    b.llm(
        text=f"Done, {_first(name)}! You're booked on the {flight['depart'][11:]} flight to {city}, "
        f"confirmation {code6}, ${flight['price_usd']:.2f} on your {card['brand']} ending {card['last4']}."
    )
    return b.build()


def date_change(rng: random.Random, index: int, parallel: bool) -> Scenario:
    b = _builder(rng)
    name, email, customer = _customer(rng)
    (_, home), (city, code) = rng.choice(HOMES), rng.choice(CITIES)
    old_day = _trip_day(rng)
    new_day = old_day + timedelta(days=rng.choice([-3, -2, 2, 4, 7]))
    old_code = random_id(rng, 6).upper()
    card = customer["payment_methods"][1]
    reservation = {
        "confirmation_code": old_code,
        "customer_id": customer["customer_id"],
        "passenger": name,
        "flight": _flights(rng, home, code, old_day, 1)[0] | {"fare": "economy"},
        "payment_method_id": card["id"],
        "status": "ticketed",
    }
    b.user(f"Hi, I need to move my flight to {city} (booking {old_code}) to {_when(new_day)}. Email {email}.")
    lookup = b.tool("get_customer", {"email": email}, customer)
    fetch = b.tool("get_reservation", {"confirmation_code": old_code}, reservation)
    if parallel:
        b.llm(lookup, fetch)
    else:
        b.llm(lookup)
        b.llm(fetch)
    sloppy = f"{new_day:%m/%d/%Y}"
    failed = b.tool(
        "search_flights",
        {"origin": home, "destination": code, "date": sloppy},
        {"error": f"invalid date '{sloppy}': expected YYYY-MM-DD"},
        error=True,
    )
    b.llm(failed)
    options = _flights(rng, home, code, new_day)
    search = b.tool(
        "search_flights",
        {"origin": home, "destination": code, "date": new_day.isoformat()},
        options,
        retry_of=failed,
    )
    b.llm(search)
    listing = "; ".join(f"{o['depart'][11:]} for ${o['price_usd']:.2f}" for o in options)
    b.llm(text=f"{_first(name)}, on {_when(new_day)} I have: {listing}. Shall I switch you to one of them?")
    b.user(rng.choice(["The first one works.", "Let's do the earliest.", "First option please."]))
    flight = options[0]
    booking = b.tool(
        "book_flight",
        {
            "flight_id": flight["flight_id"],
            "customer_id": customer["customer_id"],
            "payment_method_id": card["id"],
        },
        {
            "confirmation_code": random_id(rng, 6).upper(),
            "status": "ticketed",
            "total_usd": flight["price_usd"],
        },
        uses=[(search, flight["flight_id"]), (lookup, card["id"])],
    )
    b.llm(booking)
    new_code = booking.result["confirmation_code"]
    refund = reservation["flight"]["price_usd"]
    cancel = b.tool(
        "cancel_reservation",
        {"confirmation_code": old_code, "refund_to": "original_payment", "payment_method_id": card["id"]},
        {"status": "cancelled", "refund_usd": refund, "refund_eta_days": 7},
    )
    b.llm(cancel)
    b.llm(
        text=f"All set: your new booking is {new_code} on {_when(new_day)}, and {old_code} is cancelled "
        f"with ${refund:.2f} refunded to your card within 7 days."
    )
    return b.build()


def trip_bundle(rng: random.Random, index: int, parallel: bool) -> Scenario:
    b = _builder(rng)
    name, email, customer = _customer(rng)
    home_city, home = rng.choice(HOMES)
    city, code, area = rng.choice(BIG_CITIES)
    out_day = _trip_day(rng)
    back_day = out_day + timedelta(days=rng.randrange(2, 6))
    budget = rng.choice([250, 300, 350])
    b.user(
        f"I need to be in {city} from {_when(out_day)} to {_when(back_day)}: flights from {home_city} "
        f"both ways, and a hotel near {area} under ${budget} a night."
    )
    outbound, inbound = _flights(rng, home, code, out_day), _flights(rng, code, home, back_day)
    hotels = [
        {
            "hotel_id": "htl_" + random_id(rng, 8),
            "name": hotel,
            "area": area,
            "rating": round(rng.uniform(3.9, 4.8), 1),
            "nightly_usd": round(rng.uniform(budget * 0.6, budget * 0.98), 2),
        }
        for hotel in rng.sample(HOTEL_NAMES, 3)
    ]
    searches = [
        b.tool(
            "search_flights", {"origin": home, "destination": code, "date": out_day.isoformat()}, outbound
        ),
        b.tool(
            "search_flights", {"origin": code, "destination": home, "date": back_day.isoformat()}, inbound
        ),
        b.tool(
            "search_hotels",
            {
                "city": city,
                "check_in": out_day.isoformat(),
                "check_out": back_day.isoformat(),
                "max_nightly_usd": budget,
            },
            hotels,
        ),
    ]
    if parallel:
        b.llm(*searches)
    else:
        for search in searches:
            b.llm(search)
        b.serial(*searches)
    b.llm(
        text=f"Outbound earliest: {outbound[0]['depart'][11:]} (${outbound[0]['price_usd']:.2f}); return "
        f"earliest: {inbound[0]['depart'][11:]} (${inbound[0]['price_usd']:.2f}). Hotels: "
        + ", ".join(f"{h['name']} (${h['nightly_usd']:.2f}, {h['rating']}★)" for h in hotels)
        + ". Which would you like?"
    )
    hotel = hotels[0]
    b.user(f"The earliest flights both ways and {hotel['name']}. Account email is {email}.")
    lookup = b.tool("get_customer", {"email": email}, customer)
    b.llm(lookup)
    card = customer["payment_methods"][0]
    who = {"customer_id": customer["customer_id"], "payment_method_id": card["id"]}
    paid_with = [(lookup, customer["customer_id"]), (lookup, card["id"])]
    bookings = []
    for search, flight in ((searches[0], outbound[0]), (searches[1], inbound[0])):
        bookings.append(
            b.tool(
                "book_flight",
                {"flight_id": flight["flight_id"], **who},
                {"confirmation_code": random_id(rng, 6).upper(), "status": "ticketed"},
                uses=[(search, flight["flight_id"]), *paid_with],
            )
        )
    bookings.append(
        b.tool(
            "book_hotel",
            {
                "hotel_id": hotel["hotel_id"],
                **who,
                "check_in": out_day.isoformat(),
                "check_out": back_day.isoformat(),
            },
            {"confirmation_code": "H" + random_id(rng, 7).upper(), "status": "confirmed"},
            uses=[(searches[2], hotel["hotel_id"]), *paid_with],
        )
    )
    if parallel:
        b.llm(*bookings)
    else:
        for booking in bookings:
            b.llm(booking)
        b.serial(*bookings)
    codes = ", ".join(booking.result["confirmation_code"] for booking in bookings)
    b.llm(text=f"Booked! Confirmations: {codes}. Have a great trip to {city}, {_first(name)}.")
    return b.build()


def declined_refund(rng: random.Random, index: int, parallel: bool) -> Scenario:
    b = _builder(rng)
    name, email, customer = _customer(rng)
    (_, home), (city, code) = rng.choice(HOMES), rng.choice(CITIES)
    day = _trip_day(rng)
    booking_code = random_id(rng, 6).upper()
    first_card, second_card = customer["payment_methods"]
    reservation = {
        "confirmation_code": booking_code,
        "customer_id": customer["customer_id"],
        "flight": _flights(rng, home, code, day, 1)[0] | {"fare": "economy"},
        "payment_method_id": first_card["id"],
        "status": "ticketed",
    }
    b.user(f"I can't make my trip to {city} anymore. Please cancel {booking_code} and refund me. {email}")
    lookup = b.tool("get_customer", {"email": email}, customer)
    b.llm(lookup)
    fetch = b.tool("get_reservation", {"confirmation_code": booking_code}, reservation)
    b.llm(fetch)
    price = reservation["flight"]["price_usd"]
    b.llm(text=f"{_first(name)}, your economy fare is refundable: ${price:.2f} back to your card. Go ahead?")
    b.user("Yes please.")
    declined = {"error": "card_declined: the issuing bank rejected the refund to this card (closed account)"}
    first = b.tool(
        "cancel_reservation",
        {
            "confirmation_code": booking_code,
            "refund_to": "original_payment",
            "payment_method_id": first_card["id"],
        },
        declined,
        error=True,
        uses=[(lookup, first_card["id"])],
    )
    b.llm(first)
    second = b.tool(
        "cancel_reservation",
        {
            "confirmation_code": booking_code,
            "refund_to": "original_payment",
            "payment_method_id": second_card["id"],
        },
        {"error": "card_declined: refunds must go to the card used for the purchase"},
        error=True,
        retry_of=first,
        uses=[(lookup, second_card["id"])],
    )
    b.llm(second)
    handover = b.tool(
        "transfer_to_human",
        {
            "summary": f"Refund for {booking_code} declined twice (original card closed). "
            "Customer wants a refund by other means."
        },
        {"status": "queued", "position": rng.randrange(2, 9), "expected_wait_min": rng.randrange(5, 25)},
    )
    b.llm(handover)
    b.llm(
        text="I'm sorry, the refund couldn't go through to either card, so I've passed this to a colleague "
        "who can refund you another way. They'll pick it up shortly."
    )
    return b.build(reward=0.0)
