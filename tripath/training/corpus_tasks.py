"""Generators for the three templated tasks of the tiny-model corpus: dialogue, math, summarization.

Each generator takes a numpy Generator and an `Entities` split and returns one `Sample`
(prompt, reference). The tasks differ on purpose in how predictable the continuation is,
because speculative-decoding acceptance is later measured per task on these models:
- dialogue: the assistant echoes entities from the user turn in fixed phrasings (high acceptance);
- summarization: the summary copies salient sentences of the document verbatim (copying);
- math: the intermediate results are arithmetic a tiny draft gets wrong (low acceptance).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sample:
    """One document split where a serving request would split it: prompt in, reference out."""

    task: str
    prompt: str
    reference: str

    @property
    def text(self) -> str:
        return self.prompt + self.reference


@dataclass(frozen=True)
class Entities:
    """Named-entity vocabularies; training and held-out evaluation draw from disjoint ones."""

    cities: tuple[str, ...]
    people: tuple[str, ...]
    companies: tuple[str, ...]
    restaurants: tuple[str, ...]
    products: tuple[str, ...]
    devices: tuple[str, ...]

    def all_names(self) -> tuple[str, ...]:
        return self.cities + self.people + self.companies + self.restaurants + self.products + self.devices


# Names are made up from syllables, thousands per kind, so that a name is rarely seen twice in
# training: a model cannot memorise them and has to copy them from its context (induction), which
# is what makes summaries and dialogue replies predictable for copying and prompt lookup.
_SYLLABLES = (
    "ka", "lo", "mir", "ten", "vos", "ar", "bel", "dun", "esk", "fa", "gor", "hal", "is", "jor", "ke",
    "lu", "mar", "nor", "os", "pel", "ri", "ros", "sa", "tor", "ul", "va", "wen", "dra", "zan", "bri",
    "cal", "dor", "el", "fen", "gil", "ha", "ith", "kor", "lin", "mo", "nes", "or", "pra", "quen", "ral",
    "sil", "tam", "und", "ves", "yor",
)
_SECTOR_WORDS = (
    "Robotics", "Foods", "Energy", "Textiles", "Logistics", "Bank", "Motors", "Pharma", "Mining", "Media",
    "Airlines", "Software", "Steel", "Shipping", "Telecom", "Insurance", "Cement", "Chemicals", "Health",
    "Utilities", "Optics", "Paper", "Glass", "Farms", "Turbines",
)
_EATERIES = ("Kitchen", "Grill", "Table", "Inn", "Tavern", "Bistro")
_PRODUCTS = (
    "rain jacket", "hiking boots", "wool sweater", "denim jeans", "linen shirt", "leather belt",
    "running shoes", "winter coat", "cotton hoodie", "canvas backpack",
    # held out
    "suede loafers", "fleece vest", "silk scarf",
)
_DEVICES = (
    "laptop", "printer", "router", "tablet", "smart speaker", "monitor", "keyboard", "phone",
    # held out
    "projector", "smartwatch", "scanner",
)
_HELD_OUT_NOUNS = {"products": 3, "devices": 3}


def is_heldout_key(key: str, modulus: int = 8) -> bool:
    """Stable (process-independent, unlike hash()) assignment of a key to the held-out split."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % modulus == 0


def _made_up_names(rng: np.random.Generator, count: int, syllables: tuple[int, int]) -> list[str]:
    """`count` distinct capitalised names of syllables[0]..syllables[1] syllables."""
    names: dict[str, None] = {}
    while len(names) < count:
        parts = rng.integers(len(_SYLLABLES), size=int(rng.integers(syllables[0], syllables[1] + 1)))
        names["".join(_SYLLABLES[int(i)] for i in parts).capitalize()] = None
    return list(names)


@functools.cache
def entity_split(heldout: bool) -> Entities:
    """The training entities, or the disjoint held-out ones used only for evaluation prompts.

    Made-up names go to the held-out side when a hash of the full name says so (about 1 in 8);
    the name pools do not depend on the corpus seed.
    """
    rng = np.random.default_rng(20240611)
    # One pool, sliced, so no made-up word serves two kinds of entity (a city is never a surname).
    words = _made_up_names(rng, 8300, (2, 3))
    cities, firsts, lasts = words[:3000], words[3000:3400], words[3400:3800]
    people = [f"{firsts[int(i)]} {lasts[int(j)]}" for i, j in rng.integers(400, size=(4000, 2))]
    companies = [f"{w} {_SECTOR_WORDS[int(rng.integers(len(_SECTOR_WORDS)))]}" for w in words[3800:6800]]
    restaurants = [f"the {w} {_EATERIES[int(rng.integers(len(_EATERIES)))]}" for w in words[6800:]]

    def side(names: list[str]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for n in names if is_heldout_key(n) == heldout))

    def nouns(pool: tuple[str, ...], held: int) -> tuple[str, ...]:
        return pool[-held:] if heldout else pool[:-held]

    return Entities(
        cities=side(cities),
        people=side(people),
        companies=side(companies),
        restaurants=side(restaurants),
        products=nouns(_PRODUCTS, _HELD_OUT_NOUNS["products"]),
        devices=nouns(_DEVICES, _HELD_OUT_NOUNS["devices"]),
    )


_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_TIMES = ("7:15", "8:30", "9:45", "11:00", "12:30", "14:15", "16:40", "18:00", "19:30", "21:10")
_WEATHER = ("sunny", "cloudy", "rainy", "windy", "foggy", "snowy")
_COLORS = ("black", "navy", "grey", "green", "red", "white")
_PROBLEMS = ("turn on", "connect to the network", "charge", "update")
_ACCOUNTS = ("checking", "savings", "business")


def _pick(rng: np.random.Generator, items: tuple[str, ...]) -> str:
    return items[int(rng.integers(len(items)))]


def _code(rng: np.random.Generator) -> str:
    letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
    prefix = "".join(letters[int(i)] for i in rng.integers(len(letters), size=3))
    return prefix + str(int(rng.integers(100, 1000)))


def _dialogue_turns(rng: np.random.Generator, ent: Entities) -> list[tuple[str, str]]:
    """(user, assistant) exchanges of one conversation; every flow names a split entity in its first turn."""
    day, time, n = _pick(rng, _DAYS), _pick(rng, _TIMES), int(rng.integers(2, 9))
    topic = int(rng.integers(6))
    if topic == 0:
        a, b = rng.choice(len(ent.cities), size=2, replace=False)
        src, dst = ent.cities[int(a)], ent.cities[int(b)]
        return [
            (f"I need a flight from {src} to {dst} on {day}.",
             f"Sure. I found a flight from {src} to {dst} on {day} at {time}. Shall I book it?"),
            (f"Yes, please book it for {n} people.",
             f"Done. Your flight from {src} to {dst} on {day} at {time} is booked for {n} people. "
             f"Your confirmation code is {_code(rng)}."),
        ]
    if topic == 1:
        place = _pick(rng, ent.restaurants)
        return [
            (f"Can you reserve a table for {n} at {place} on {day}?",
             f"Of course. A table for {n} at {place} on {day} at {time} is available. "
             "Would you like me to reserve it?"),
            ("Yes, please.",
             f"Your table for {n} at {place} on {day} at {time} is reserved. Enjoy your meal!"),
        ]
    if topic == 2:
        city, weather, temp = _pick(rng, ent.cities), _pick(rng, _WEATHER), int(rng.integers(-5, 36))
        later = _pick(rng, _DAYS)
        return [
            (f"What is the weather in {city} on {day}?",
             f"The forecast for {city} on {day} is {weather} with a high of {temp} degrees."),
            (f"And on {later}?",
             f"On {later} the forecast for {city} is {_pick(rng, _WEATHER)} with a high of "
             f"{temp + int(rng.integers(-4, 5))} degrees."),
        ]
    if topic == 3:
        device, problem = _pick(rng, ent.devices), _pick(rng, _PROBLEMS)
        return [
            (f"My {device} will not {problem}.",
             f"I am sorry to hear that your {device} will not {problem}. Please restart the {device} "
             "and tell me if that helps."),
            (f"I restarted it but it still will not {problem}.",
             f"Thank you for trying. I have opened ticket {_code(rng)} for your {device}. "
             f"A technician will contact you on {day}."),
        ]
    if topic == 4:
        person, account = _pick(rng, ent.people), _pick(rng, _ACCOUNTS)
        balance, amount = int(rng.integers(200, 9000)), int(rng.integers(10, 200))
        return [
            (f"This is {person}. What is the balance of my {account} account?",
             f"Hello {person}. The balance of your {account} account is {balance} dollars."),
            (f"Please transfer {amount} dollars to {_pick(rng, ent.people)}.",
             f"I have transferred {amount} dollars from your {account} account. "
             f"Your new balance is {balance - amount} dollars."),
        ]
    product, color, size = _pick(rng, ent.products), _pick(rng, _COLORS), int(rng.integers(36, 47))
    price = int(rng.integers(20, 250))
    return [
        (f"Do you have the {color} {product} in size {size}?",
         f"Yes, the {color} {product} is available in size {size} for {price} dollars. "
         "Shall I add it to your cart?"),
        ("Yes, add it please.",
         f"The {color} {product} in size {size} is in your cart. Your total is {price} dollars."),
    ]


def dialogue_sample(rng: np.random.Generator, ent: Entities) -> Sample:
    """A conversation; the prompt ends at the last 'Assistant:' and the reference is that reply."""
    turns = _dialogue_turns(rng, ent)
    if rng.random() < 0.5:
        turns = [("Hello!", "Hi there, how can I help you today?")] + turns
    lines = []
    for user, assistant in turns[:-1]:
        lines += [f"User: {user}", f"Assistant: {assistant}"]
    lines.append(f"User: {turns[-1][0]}")
    return Sample("dialogue", "\n".join(lines) + "\nAssistant:", f" {turns[-1][1]}\n")


def math_sample(rng: np.random.Generator) -> Sample:
    """Multi-step integer arithmetic with worked steps, evaluated left to right.

    The expression is parenthesised so that left-to-right evaluation agrees with operator
    precedence: a '*' after an additive step wraps everything before it in parentheses.
    """
    value = int(rng.integers(2, 100))
    expr, additive, steps = str(value), False, []
    for _ in range(int(rng.integers(2, 5))):
        op = "*" if rng.random() < 0.3 else ("+" if rng.random() < 0.5 else "-")
        if op == "*":
            operand = int(rng.integers(2, 10))
        elif op == "+":
            operand = int(rng.integers(2, 100))
        else:  # keep results non-negative so every step reads like schoolbook arithmetic
            operand = int(rng.integers(1, max(2, value)))
        if op == "*" and additive:
            expr, additive = f"({expr})", False
        result = value * operand if op == "*" else value + operand if op == "+" else value - operand
        steps.append(f"{value} {op} {operand} = {result}.")
        expr, value = f"{expr} {op} {operand}", result
        additive = additive or op != "*"
    return Sample("math", f"Q: {expr} = ?\nA:", " " + " ".join(steps) + f" Answer: {value}\n")


_SECTORS = ("energy", "retail", "transport", "software", "banking", "farming", "steel", "media")
_EVENTS = ("harvest fair", "music festival", "marathon", "book market", "boat parade")
_PROJECTS = ("bridge", "tram line", "library", "water plant", "ring road")


def summarization_sample(rng: np.random.Generator, ent: Entities) -> Sample:
    """A report on one company; the salient sentences are the ones that start with its name,
    and the summary copies them verbatim and in order (so copying and prompt lookup pay off)."""
    subject = _pick(rng, ent.companies)

    def another() -> str:  # a company other than the subject
        while (name := _pick(rng, ent.companies)) == subject:
            pass
        return name

    other, city, city2, person = another(), _pick(rng, ent.cities), _pick(rng, ent.cities), \
        _pick(rng, ent.people)
    year = int(rng.integers(1950, 2015))
    facts = [
        f"{subject} was founded in {year} in {city}.",
        f"{subject} employs {int(rng.integers(40, 9000))} people across {int(rng.integers(2, 40))} offices.",
        f"{subject} reported revenue of {int(rng.integers(5, 900))} million dollars "
        f"in {int(rng.integers(2016, 2024))}.",
        f"{subject} appointed {person} as chief executive in {int(rng.integers(2015, 2024))}.",
        f"{subject} plans to open a new plant in {city2} by {int(rng.integers(2025, 2031))}.",
        f"{subject} sells its {_pick(rng, ent.products)}s to customers "
        f"in {int(rng.integers(3, 60))} countries.",
        f"{subject} signed a contract with {other} worth {int(rng.integers(2, 400))} million dollars.",
    ]
    fillers = [
        f"The weather in {_pick(rng, ent.cities)} was {_pick(rng, _WEATHER)} for most of the month.",
        f"Local officials in {_pick(rng, ent.cities)} discussed plans for a new {_pick(rng, _PROJECTS)}.",
        f"{another()} also reported steady results this quarter.",
        f"Analysts said the {_pick(rng, _SECTORS)} market remained calm.",
        f"A spokesperson for {another()} declined to comment.",
        f"Traffic in {_pick(rng, ent.cities)} was heavier than usual on {_pick(rng, _DAYS)}.",
        f"Many residents of {_pick(rng, ent.cities)} attended the annual {_pick(rng, _EVENTS)}.",
        f"Shares of {another()} rose slightly in early trading.",
        f"The {_pick(rng, _SECTORS)} sector hired more workers than a year ago.",
    ]
    picked = sorted(rng.choice(len(facts), size=int(rng.integers(3, 6)), replace=False))
    salient = [facts[int(i)] for i in picked]
    chosen = [fillers[int(i)] for i in rng.choice(len(fillers), size=int(rng.integers(5, 9)), replace=False)]
    # Interleave: salient sentences keep their order, fillers go between them at random.
    order = rng.permutation(len(salient) + len(chosen))
    salient_slots = set(int(i) for i in order[: len(salient)])
    body, s_iter, f_iter = [], iter(salient), iter(chosen)
    for slot in range(len(salient) + len(chosen)):
        body.append(next(s_iter) if slot in salient_slots else next(f_iter))
    document = f"Report: {subject}\n" + " ".join(body) + "\nSummary:"
    return Sample("summarization", document, " " + " ".join(salient) + "\n")
