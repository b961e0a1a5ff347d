"""Seeded procedural function-calling examples for the supervised format warm-up (DESIGN.md §8).

A tiny model (SmolLM2-135M) first learns the `<tool_call>{json}</tool_call>` reply format on these
examples, before it is evaluated on BFCL. Everything here is generated from an integer seed
(`random.Random(seed)`), from built-in word lists and templates: this module never reads, imports or
copies any BFCL data, so the warm-up cannot leak the target's tasks.

An example offers one or more BFCL-style function schemas, asks for something in a templated
natural-language request, and carries the reference calls. Every value in a reference call is
grounded in the request text: strings appear verbatim (enum values may be worded differently),
numbers appear as digits, or as words / ordinals ("five" -> 5, "sixteenth" -> 16).

Kinds: "simple" (1 function, 1 call), "multiple" (2-4 functions with same-domain distractors,
1 call), "parallel" (1-2 functions, 2-4 calls).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, replace
from typing import Any, Callable

from trace_agents.agent.format import format_call, to_openai_tool
from trace_agents.types import Message

KINDS = ("simple", "multiple", "parallel")
_KIND_WEIGHTS = (0.45, 0.35, 0.20)
P_MENTION_OPTIONAL = 0.5
P_WORDS = 0.2  # share of small integers written as words

# --------------------------------------------------------------------------------------------
# The example
# --------------------------------------------------------------------------------------------


@dataclass
class Example:
    functions: list[dict]
    messages: list[Message]
    calls: list[tuple[str, dict]]
    text: str = ""
    """The target when there are no calls: a closing reply (multi-turn examples, warmup/followup.py)."""

    @property
    def tools(self) -> list[dict]:
        return [to_openai_tool(f) for f in self.functions]

    @property
    def reply(self) -> str:
        """The supervised target text: one `<tool_call>` per reference call, in order (or `text`)."""
        return "\n".join(format_call(n, a) for n, a in self.calls) if self.calls else self.text


# --------------------------------------------------------------------------------------------
# Numbers in words
# --------------------------------------------------------------------------------------------

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_ORDINAL_IRREGULAR = {"one": "first", "two": "second", "three": "third", "five": "fifth",
                      "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}


def number_word(n: int) -> str:
    """0..999 in English words: 16 -> "sixteen", 42 -> "forty-two", 100 -> "one hundred"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("-" + _ONES[ones] if ones else "")
    hundreds, rest = divmod(n, 100)
    return _ONES[hundreds] + " hundred" + (" " + number_word(rest) if rest else "")


def ordinal_word(n: int) -> str:
    """16 -> "sixteenth", 21 -> "twenty-first", 40 -> "fortieth"."""
    words = number_word(n)
    cut = max(words.rfind("-"), words.rfind(" ")) + 1
    last = words[cut:]
    if last in _ORDINAL_IRREGULAR:
        last = _ORDINAL_IRREGULAR[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return words[:cut] + last


def ordinal_suffix(n: int) -> str:
    """16 -> "16th", 22 -> "22nd", 13 -> "13th"."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# --------------------------------------------------------------------------------------------
# Value generators: each returns (value for the call, text for the request)
# --------------------------------------------------------------------------------------------

Gen = Callable[[random.Random], "tuple[Any, str]"]


def _hint(gen: Gen, **schema: Any) -> Gen:
    """Attach schema hints (items, properties, enum) that the parameter schema picks up."""
    gen.schema = schema  # type: ignore[attr-defined]
    return gen


def _and(parts: list[str], rng: random.Random) -> str:
    """"a, b and c" (or "a; b and c" when the parts hold commas, like "Austin, TX")."""
    if len(parts) == 1:
        return parts[0]
    sep = "; " if any("," in p for p in parts) else ", "
    last = sep.strip() if len(parts) > 2 and rng.random() < 0.3 else ""
    return sep.join(parts[:-1]) + last + " and " + parts[-1]


def integer(lo: int, hi: int, words: float = P_WORDS) -> Gen:
    def gen(rng):
        n = rng.randint(lo, hi)
        return n, number_word(n) if 0 <= n <= 100 and rng.random() < words else str(n)
    return gen


def ordinal(lo: int, hi: int) -> Gen:
    def gen(rng):
        n = rng.randint(lo, hi)
        return n, ordinal_word(n) if rng.random() < 0.35 else ordinal_suffix(n)
    return gen


def real(lo: float, hi: float, places: int = 2, whole: float = 0.25) -> Gen:
    """A float written exactly as JSON writes it; whole numbers stay ints (3, not 3.0)."""
    def gen(rng):
        if rng.random() < whole:
            x = rng.randint(math.ceil(lo), math.floor(hi))
        else:
            x = round(rng.uniform(lo, hi), rng.randint(1, places))
            x = int(x) if x == int(x) else x
        return x, str(x)
    return gen


def money(lo: int, hi: int) -> Gen:
    def gen(rng):
        x: float = rng.randint(lo, hi)
        if rng.random() < 0.4:
            x = round(x + rng.choice((25, 49, 75, 99, 45, 15, 35)) / 100, 2)
        return x, f"${x}" if rng.random() < 0.7 else f"{x} dollars"
    return gen


def percent(lo: float, hi: float) -> Gen:
    def gen(rng):
        if rng.random() < 0.5:
            x = rng.randint(math.ceil(lo), math.floor(hi))
            return x, f"{number_word(x)} percent" if rng.random() < P_WORDS else f"{x}%"
        x = round(rng.uniform(lo, hi), 1)
        x = int(x) if x == int(x) else x
        return x, f"{x}%"
    return gen


def pick(*options: Any) -> Gen:
    """A value written as itself."""
    def gen(rng):
        v = rng.choice(options)
        return v, str(v)
    return gen


def quoted(*options: str) -> Gen:
    def gen(rng):
        v = rng.choice(options)
        return v, f"'{v}'" if rng.random() < 0.3 else f'"{v}"'
    return gen


def worded(options: dict[Any, tuple[str, ...]], enum: bool = True) -> Gen:
    """A value named by one of several wordings ("in Fahrenheit" -> "fahrenheit"); an enum unless
    `enum` is False (e.g. "compounded monthly" -> 12)."""
    keys = list(options)

    def gen(rng):
        v = rng.choice(keys)
        return v, rng.choice(options[v])
    return _hint(gen, enum=keys) if enum else gen


def flag(yes: tuple[str, ...], no: tuple[str, ...]) -> Gen:
    """A boolean said as a phrase: True 70% of the time."""
    def gen(rng):
        v = rng.random() < 0.7
        return v, rng.choice(yes if v else no)
    return gen


def with_unit(lo: int, hi: int, *units: str) -> Gen:
    """A string holding digits and a unit, e.g. "250g", "1kg", "12pm"."""
    def gen(rng):
        v = f"{rng.randint(lo, hi)}{rng.choice(units)}"
        return v, v
    return gen


def code(*prefixes: str, digits: int = 5) -> Gen:
    def gen(rng):
        v = f"{rng.choice(prefixes)}{rng.randint(10 ** (digits - 1), 10 ** digits - 1)}"
        return v, v
    return gen


def date(first_year: int = 2023, last_year: int = 2025) -> Gen:
    def gen(rng):
        v = f"{rng.randint(first_year, last_year)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return v, v
    return gen


def clock() -> Gen:
    def gen(rng):
        if rng.random() < 0.25:
            v = f"{rng.randint(7, 21)}:{rng.choice(('00', '15', '30', '45'))}"
        else:
            minutes = rng.choice(("", "", ":30", ":15", ":45"))
            v = f"{rng.randint(1, 12)}{minutes}{rng.choice(('am', 'pm'))}"
        return v, v
    return gen


def dna() -> Gen:
    def gen(rng):
        v = "".join(rng.choice("ACGT") for _ in range(rng.randint(6, 14)))
        return v, v
    return gen


def str_list(pool: tuple[str, ...], lo: int = 2, hi: int = 4) -> Gen:
    def gen(rng):
        v = rng.sample(pool, rng.randint(lo, hi))
        return v, _and(v, rng)
    return _hint(gen, items={"type": "string"})


def num_list(lo: int, hi: int, k_lo: int = 3, k_hi: int = 7, floats: bool = False) -> Gen:
    def gen(rng):
        k = rng.randint(k_lo, k_hi)
        v = [round(rng.uniform(lo, hi), 1) if floats else rng.randint(lo, hi) for _ in range(k)]
        texts = [str(x) for x in v]
        return v, "[" + ", ".join(texts) + "]" if rng.random() < 0.4 else _and(texts, rng)
    return _hint(gen, items={"type": "float" if floats else "integer"})


def matrix(lo: int = -9, hi: int = 9) -> Gen:
    def gen(rng):
        n = rng.choice((2, 2, 3))
        v = [[rng.randint(lo, hi) for _ in range(n)] for _ in range(n)]
        return v, json.dumps(v)
    return _hint(gen, items={"type": "array", "items": {"type": "integer"}})


def point(lo: int = -20, hi: int = 20) -> Gen:
    def gen(rng):
        v = [rng.randint(lo, hi), rng.randint(lo, hi)]
        return v, f"({v[0]}, {v[1]})" if rng.random() < 0.6 else json.dumps(v)
    return _hint(gen, items={"type": "integer"})


def polygon() -> Gen:
    def gen(rng):
        v = [[rng.randint(-10, 10), rng.randint(-10, 10)] for _ in range(rng.randint(3, 5))]
        return v, _and([f"({x}, {y})" for x, y in v], rng)
    return _hint(gen, items={"type": "array", "items": {"type": "integer"}})


def address() -> Gen:
    props = {"street": {"type": "string", "description": "House number and street name."},
             "city": {"type": "string", "description": "City name."},
             "zip_code": {"type": "string", "description": "Five-digit postal code."}}

    def gen(rng):
        v = {"street": f"{rng.randint(1, 999)} {rng.choice(STREETS)}",
             "city": rng.choice(US_CITIES), "zip_code": f"{rng.randint(10000, 99999)}"}
        return v, f"{v['street']}, {v['city']} {v['zip_code']}"
    return _hint(gen, properties=props)


def guests() -> Gen:
    props = {"adults": {"type": "integer", "description": "Number of adults."},
             "children": {"type": "integer", "description": "Number of children."}}

    def gen(rng):
        a, c = rng.randint(1, 4), rng.randint(1, 3)
        text = f"{a} adult{'s' * (a > 1)} and {c} {'child' if c == 1 else 'children'}"
        return {"adults": a, "children": c}, text
    return _hint(gen, properties=props)


def contact() -> Gen:
    props = {"name": {"type": "string", "description": "Full name of the contact."},
             "email": {"type": "string", "description": "Email address of the contact."}}

    def gen(rng):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        v = {"name": f"{first} {last}", "email": f"{first.lower()}.{last.lower()}@{rng.choice(DOMAINS_MAIL)}"}
        text = (f"{v['name']} ({v['email']})" if rng.random() < 0.5
                else f"{v['name']} with the email {v['email']}")
        return v, text
    return _hint(gen, properties=props)


# --------------------------------------------------------------------------------------------
# Word lists
# --------------------------------------------------------------------------------------------

CITIES = ("New York, NY", "San Francisco, CA", "Austin, TX", "Chicago, IL", "Seattle, WA",
          "Boston, MA", "Denver, CO", "Miami, FL", "Paris", "London", "Tokyo", "Berlin", "Rome",
          "Madrid", "Sydney", "Toronto", "Mumbai", "Cairo", "Lisbon", "Seoul", "Mexico City",
          "Nairobi", "Oslo", "Dublin", "Vienna", "Amsterdam", "Singapore", "Lyon, France",
          "Vancouver, Canada", "Kyoto, Japan", "Buenos Aires")
US_CITIES = ("Springfield", "Denver", "Portland", "Austin", "Columbus", "Madison", "Raleigh", "Tucson")
STREETS = ("Main St", "Oak Avenue", "Maple Drive", "Elm Street", "Sunset Blvd", "Pine Road", "Lake Shore Dr")
COUNTRIES = ("France", "Japan", "Brazil", "Canada", "Kenya", "India", "Germany", "Australia",
             "Mexico", "Egypt", "Norway", "Argentina", "Italy", "Spain", "South Korea", "Peru", "Vietnam")
TEAMS = ("Los Angeles Lakers", "Boston Celtics", "Golden State Warriors", "Manchester United",
         "Real Madrid", "FC Barcelona", "New York Yankees", "Chicago Bulls", "Liverpool FC",
         "Bayern Munich", "Dallas Cowboys", "Toronto Raptors")
LEAGUES = ("NBA", "Premier League", "La Liga", "MLB", "NFL", "Bundesliga", "Serie A", "NHL")
PLAYERS = ("LeBron James", "Lionel Messi", "Serena Williams", "Stephen Curry", "Cristiano Ronaldo",
           "Shohei Ohtani", "Kylian Mbappe", "Kevin Durant", "Naomi Osaka", "Tom Brady")
SEASONS = ("2019-20", "2020-21", "2021-22", "2022-23", "2023-24", "2018", "2021", "2022")
ARTISTS = ("Taylor Swift", "The Beatles", "Adele", "Miles Davis", "Beyonce", "Coldplay",
           "Ed Sheeran", "Queen", "Billie Eilish", "Radiohead", "Daft Punk", "Bob Marley")
SONGS = ("Bohemian Rhapsody", "Hey Jude", "Shape of You", "Yellow", "Blinding Lights", "Let It Be",
         "Imagine", "Halo", "Clocks", "Get Lucky", "Bad Guy", "Rolling in the Deep")
NOTES = ("A4", "C4", "E5", "G3", "F#4", "Bb3", "D5", "C#2")
MUSIC_KEYS = ("C major", "G major", "A minor", "D minor", "E flat major", "F major", "B minor")
FORMULAS = ("H2O", "CO2", "C6H12O6", "NaCl", "H2SO4", "CH4", "NH3", "C2H5OH", "CaCO3", "KMnO4")
REACTIONS = ("H2 + O2 -> H2O", "CH4 + O2 -> CO2 + H2O", "Fe + O2 -> Fe2O3", "N2 + H2 -> NH3",
             "C3H8 + O2 -> CO2 + H2O", "Al + HCl -> AlCl3 + H2")
ELEMENTS = ("hydrogen", "carbon", "oxygen", "iron", "gold", "sodium", "helium", "copper", "uranium", "neon")
TICKERS = ("AAPL", "MSFT", "GOOGL", "AMZN", "TSLA", "NVDA", "META", "NFLX", "IBM", "KO")
CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CAD", "AUD", "CHF", "INR", "MXN")
FOODS = ("banana", "brown rice", "chicken breast", "almonds", "avocado", "salmon", "oatmeal",
         "broccoli", "greek yogurt", "apple", "lentils", "peanut butter")
INGREDIENTS = ("chicken", "rice", "garlic", "tomatoes", "spinach", "eggs", "onion", "mushrooms",
               "tofu", "potatoes", "cheese", "basil", "lemon", "beef", "pasta", "chickpeas")
CUISINES = ("Italian", "Mexican", "Thai", "Indian", "Japanese", "French", "Greek", "Chinese")
RECIPES = ("lasagna", "pancakes", "chili con carne", "banana bread", "pad thai", "beef stew",
           "guacamole", "tomato soup", "apple pie")
KITCHEN_UNITS = ("cups", "tablespoons", "teaspoons", "grams", "ounces", "milliliters")
PRODUCTS = ("wireless headphones", "running shoes", "coffee maker", "4K monitor", "yoga mat",
            "mechanical keyboard", "backpack", "air fryer", "desk lamp", "phone case", "USB-C charger")
COUPONS = ("SAVE20", "WELCOME10", "FREESHIP", "SPRING25", "VIP15", "BLACKFRIDAY")
MOVIES = ("Inception", "The Matrix", "Dune", "Oppenheimer", "Frozen", "Interstellar", "Barbie", "Up")
LANGUAGES = ("Spanish", "French", "German", "Japanese", "Italian", "Portuguese", "Korean", "Chinese")
SENTENCES = ("Good morning, how are you?", "Where is the train station?", "I would like a cup of coffee",
             "The meeting starts at 3pm", "Thank you for your help", "See you tomorrow at 10am",
             "The quick brown fox jumps over the lazy dog", "Please close the door")
FIRST_NAMES = ("Alice", "Bob", "Carol", "Dan", "Priya", "Miguel", "Chen", "Fatima", "Olga", "Kwame")
LAST_NAMES = ("Smith", "Patel", "Garcia", "Nguyen", "Kim", "Okafor", "Rossi", "Larsen")
DOMAINS_MAIL = ("example.com", "work.org", "mail.com", "startup.io")
EMAILS = ("alice@example.com", "bob@work.org", "carol.smith@mail.com", "dan@startup.io",
          "priya@school.edu", "miguel.r@example.com")
EVENT_TITLES = ("Team standup", "Dentist appointment", "Project review", "Lunch with Sarah",
                "Yoga class", "Quarterly planning", "Birthday party", "1:1 with manager")
REMINDERS = ("call mom", "take medicine", "submit the report", "water the plants", "pay rent",
             "pick up groceries")
AUTHORS = ("Jane Austen", "George Orwell", "Toni Morrison", "Haruki Murakami", "J.R.R. Tolkien",
           "Agatha Christie", "Gabriel Garcia Marquez", "Octavia Butler")
BOOK_GENRES = ("mystery", "science fiction", "fantasy", "biography", "romance", "history")
PLANETS = ("Mercury", "Venus", "Earth", "Mars", "Jupiter", "Saturn", "Uranus", "Neptune")
HISTORIC_EVENTS = ("the fall of the Berlin Wall", "the first Moon landing", "the signing of the Magna Carta",
                   "the French Revolution", "the sinking of the Titanic", "the invention of the printing press")
ACTIVITIES = ("running", "cycling", "swimming", "walking", "rowing", "hiking", "yoga")
FUNCTIONS = ("3x^2 + 2x - 1", "x^3 - 4x", "2x^2 + 5", "sin(x) + x^2", "5x^4 - 3x^2 + 7",
             "e^x + 2x", "4x - 7", "x^2 * ln(x)")
LENGTH_UNITS = ("km", "miles", "meters", "feet", "inches", "yards")
AIRLINES = ("UA", "BA", "LH", "AF", "DL", "NH", "QF", "AA")

# --------------------------------------------------------------------------------------------
# Function templates
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    description: str
    gen: Gen
    required: bool = True
    say: tuple[str, ...] = ()  # optional params: clause phrasings, "{v}" = the value's text
    default: Any = None

    def schema(self) -> dict:
        s: dict[str, Any] = {"type": self.type, "description": self.description}
        hints = getattr(self.gen, "schema", {})
        if "items" in hints:
            s["items"] = hints["items"]
        if "properties" in hints:
            s["properties"] = hints["properties"]
            s["required"] = list(hints["properties"])
        if "enum" in hints:
            s["enum"] = list(hints["enum"])
        if self.default is not None:
            s["description"] += f" Default is {self.default}."
            s["default"] = self.default
        return s


@dataclass(frozen=True)
class Func:
    name: str
    description: str
    params: tuple[Param, ...]
    asks: tuple[str, ...]  # request phrasings; "{p}" = a required param; ending in "?" = a question
    vary: str | None = None  # a required param that can take a list of values ("Paris, Berlin and Rome")
    domain: str = ""

    def schema(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {
                "type": "dict",
                "properties": {p.name: p.schema() for p in self.params},
                "required": [p.name for p in self.params if p.required],
            },
        }

    @property
    def commands(self) -> tuple[str, ...]:
        return tuple(a for a in self.asks if not a.endswith("?"))


def req(name: str, type_: str, description: str, gen: Gen) -> Param:
    return Param(name, type_, description, gen)


def opt(name: str, type_: str, description: str, gen: Gen, *say: str, default: Any = None) -> Param:
    return Param(name, type_, description, gen, required=False, say=say or ("{v}",), default=default)


def fn(name: str, description: str, params: list[Param], asks: list[str], vary: str | None = None) -> Func:
    return Func(name, description, tuple(params), tuple(asks), vary)


TEMP_UNIT = worded({"celsius": ("in Celsius", "in degrees Celsius", "in metric units"),
                    "fahrenheit": ("in Fahrenheit", "in degrees Fahrenheit", "in imperial units")})


def _math() -> list[Func]:
    return [
        fn("math.greatest_common_divisor", "Compute the greatest common divisor of two integers.",
           [req("a", "integer", "The first integer.", integer(2, 300)),
            req("b", "integer", "The second integer.", integer(2, 300))],
           ["find the greatest common divisor of {a} and {b}", "compute the GCD of {a} and {b}",
            "what is the greatest common divisor of {a} and {b}?", "calculate gcd for the numbers {a} and {b}"]),
        fn("math.least_common_multiple", "Compute the least common multiple of two integers.",
           [req("a", "integer", "The first integer.", integer(2, 60)),
            req("b", "integer", "The second integer.", integer(2, 60))],
           ["find the least common multiple of {a} and {b}", "what is the LCM of {a} and {b}?",
            "compute the lowest common multiple for {a} and {b}"]),
        fn("math.factorial_of", "Calculate the factorial of a non-negative integer.",
           [req("n", "integer", "The non-negative integer whose factorial is computed.", integer(0, 20))],
           ["calculate the factorial of {n}", "what is the factorial of {n}?", "compute {n} factorial"],
           vary="n"),
        fn("math.fibonacci", "Return the n-th number of the Fibonacci sequence (1-indexed).",
           [req("n", "integer", "Position in the Fibonacci sequence, starting at 1.", ordinal(3, 60))],
           ["find the {n} Fibonacci number", "what is the {n} number in the Fibonacci sequence?",
            "get the {n} term of the Fibonacci sequence"], vary="n"),
        fn("math.fibonacci_sequence", "Generate the first terms of the Fibonacci sequence.",
           [req("count", "integer", "How many terms to generate.", integer(3, 40))],
           ["list the first {count} Fibonacci numbers", "generate {count} terms of the Fibonacci sequence",
            "what are the first {count} numbers of the Fibonacci sequence?"]),
        fn("math.prime_factors", "Find the prime factorization of a positive integer.",
           [req("number", "integer", "The integer to factorize.", integer(12, 5000))],
           ["find the prime factors of {number}", "factorize {number} into primes",
            "what are the prime factors of {number}?"], vary="number"),
        fn("math.is_prime", "Check whether an integer is a prime number.",
           [req("number", "integer", "The integer to test.", integer(2, 10000))],
           ["check whether {number} is a prime number", "is {number} prime?", "tell me if {number} is prime"]),
        fn("math.raise_to_power", "Raise a base to an integer exponent, optionally modulo a number.",
           [req("base", "integer", "The base.", integer(2, 12)),
            req("exponent", "integer", "The exponent.", integer(2, 10)),
            opt("modulus", "integer", "If given, return the result modulo this number.", integer(3, 1000),
                "modulo {v}", "reduced mod {v}")],
           ["compute {base} to the power of {exponent}", "raise {base} to the power {exponent}",
            "what is {base} raised to the power of {exponent}?"]),
        fn("math.hypotenuse", "Compute the hypotenuse of a right triangle from its two legs.",
           [req("a", "float", "Length of the first leg.", real(1, 50)),
            req("b", "float", "Length of the second leg.", real(1, 50))],
           ["find the hypotenuse of a right triangle with legs {a} and {b}",
            "a right triangle has legs of {a} and {b}. How long is the hypotenuse?",
            "calculate the hypotenuse when the two other sides are {a} and {b}"]),
        fn("math.log", "Compute the logarithm of a positive number in a given base.",
           [req("value", "float", "The positive number.", real(1, 10000)),
            opt("base", "integer", "The logarithm base.", integer(2, 10, words=0), "in base {v}",
                "using base {v}", default=10)],
           ["calculate the logarithm of {value}", "compute log of {value}", "what is the log of {value}?"],
           vary="value"),
        fn("math.round_number", "Round a number to a given number of decimal places.",
           [req("number", "float", "The number to round.", real(0, 1000, places=2, whole=0)),
            opt("decimals", "integer", "Number of decimal places to keep.", integer(0, 3),
                "to {v} decimal places", default=0)],
           ["round the number {number}", "round {number}", "give me {number} rounded"]),
    ]


def _statistics_algebra() -> list[Func]:
    numbers = num_list(1, 100)
    return [
        fn("statistics.mean", "Calculate the arithmetic mean of a list of numbers.",
           [req("numbers", "array", "The numbers to average.", numbers)],
           ["calculate the average of {numbers}", "what is the mean of {numbers}?",
            "find the arithmetic mean of the numbers {numbers}"]),
        fn("statistics.median", "Find the median of a list of numbers.",
           [req("numbers", "array", "The numbers.", numbers)],
           ["find the median of {numbers}", "what is the median of the values {numbers}?",
            "compute the median for {numbers}"]),
        fn("statistics.standard_deviation", "Compute the standard deviation of a list of numbers.",
           [req("numbers", "array", "The data values.", num_list(1, 50, floats=True)),
            opt("sample", "boolean", "True for the sample standard deviation, False for the population one.",
                flag(("using the sample formula", "treating it as a sample"),
                     ("for the whole population", "using the population formula")), default=False)],
           ["compute the standard deviation of {numbers}", "what is the standard deviation of {numbers}?",
            "find how spread out {numbers} are with the standard deviation"]),
        fn("linear_algebra.determinant", "Compute the determinant of a square matrix.",
           [req("matrix", "array", "The square matrix as a list of rows.", matrix())],
           ["compute the determinant of the matrix {matrix}", "what is the determinant of {matrix}?",
            "find det of the matrix {matrix}"]),
        fn("linear_algebra.matrix_inverse", "Compute the inverse of a square matrix.",
           [req("matrix", "array", "The square matrix as a list of rows.", matrix())],
           ["invert the matrix {matrix}", "find the inverse of {matrix}",
            "what is the inverse of the matrix {matrix}?"]),
        fn("algebra.solve_quadratic", "Find the roots of a quadratic equation ax^2 + bx + c = 0.",
           [req("a", "integer", "Coefficient of x^2.", integer(1, 10)),
            req("b", "integer", "Coefficient of x.", integer(-20, 20)),
            req("c", "integer", "Constant term.", integer(-20, 20)),
            opt("root_type", "string", "Which roots to return.",
                worded({"real": ("returning only real roots", "real roots only"),
                        "all": ("including complex roots", "with complex roots too")}), default="all")],
           ["solve the quadratic equation with coefficients a={a}, b={b} and c={c}",
            "find the roots of a quadratic with a = {a}, b = {b}, c = {c}",
            "what are the roots of the quadratic equation where a is {a}, b is {b} and c is {c}?"]),
        fn("calculus.differentiate", "Compute the derivative of a function of x, optionally at a point.",
           [req("function", "string", "The function of x, e.g. '2x^2 + 1'.", pick(*FUNCTIONS)),
            opt("x_value", "float", "Point at which to evaluate the derivative.", real(-5, 5, places=1),
                "at x = {v}", "evaluated at x = {v}")],
           ["find the derivative of {function}", "differentiate f(x) = {function}",
            "what is the derivative of {function}?"], vary="function"),
        fn("calculus.integral", "Compute the definite integral of a function of x over an interval.",
           [req("function", "string", "The function of x to integrate.", pick(*FUNCTIONS)),
            req("lower", "integer", "Lower bound of the interval.", integer(-5, 2)),
            req("upper", "integer", "Upper bound of the interval.", integer(3, 10)),
            opt("method", "string", "Numerical integration method.",
                worded({"simpson": ("using Simpson's rule", "with the Simpson method"),
                        "trapezoid": ("using the trapezoidal rule", "with the trapezoid method")}),
                default="simpson")],
           ["integrate {function} from {lower} to {upper}",
            "compute the definite integral of {function} between {lower} and {upper}",
            "what is the integral of {function} from x = {lower} to x = {upper}?"]),
    ]


def _geometry() -> list[Func]:
    length = real(0.5, 50)
    units = opt("units", "string", "Unit of length of the inputs.", pick("cm", "m", "inches", "ft"),
                "with lengths in {v}", "measured in {v}", default="cm")
    return [
        fn("geometry.circle_area", "Calculate the area of a circle from its radius.",
           [req("radius", "float", "Radius of the circle.", length), units],
           ["calculate the area of a circle with radius {radius}",
            "what is the area of a circle whose radius is {radius}?",
            "find the area of a circle of radius {radius}"], vary="radius"),
        fn("geometry.circle_circumference", "Calculate the circumference of a circle from its radius.",
           [req("radius", "float", "Radius of the circle.", length), units],
           ["calculate the circumference of a circle with radius {radius}",
            "how long is the perimeter of a circle of radius {radius}?",
            "find the circumference for a circle with a radius of {radius}"], vary="radius"),
        fn("geometry.triangle_area", "Calculate the area of a triangle from its base and height.",
           [req("base", "float", "Length of the base.", length),
            req("height", "float", "Height perpendicular to the base.", length), units],
           ["find the area of a triangle with base {base} and height {height}",
            "a triangle has a base of {base} and a height of {height}. What is its area?",
            "compute the area of a triangle whose height is {height} and base is {base}"]),
        fn("geometry.rectangle_area", "Calculate the area of a rectangle.",
           [req("length", "float", "Length of the rectangle.", length),
            req("width", "float", "Width of the rectangle.", length), units],
           ["calculate the area of a rectangle that is {length} long and {width} wide",
            "what is the area of a rectangle measuring {length} by {width}?",
            "find the area of a rectangle with width {width} and length {length}"]),
        fn("geometry.distance", "Compute the Euclidean distance between two points in the plane.",
           [req("point1", "array", "First point as [x, y].", point()),
            req("point2", "array", "Second point as [x, y].", point())],
           ["calculate the distance between the points {point1} and {point2}",
            "how far apart are {point1} and {point2}?", "find the distance from {point1} to {point2}"]),
        fn("geometry.polygon_area", "Compute the area of a simple polygon from its vertices.",
           [req("vertices", "array", "Vertices as a list of [x, y] points, in order.", polygon())],
           ["compute the area of the polygon with vertices {vertices}",
            "what is the area of a polygon whose corners are {vertices}?",
            "find the area enclosed by the points {vertices}"]),
        fn("geometry.sphere_volume", "Calculate the volume of a sphere.",
           [req("radius", "float", "Radius of the sphere.", length), units],
           ["calculate the volume of a sphere with radius {radius}",
            "what is the volume of a ball of radius {radius}?",
            "find the volume of a sphere whose radius is {radius}"], vary="radius"),
        fn("geometry.cylinder_volume", "Calculate the volume of a cylinder.",
           [req("radius", "float", "Radius of the base.", length),
            req("height", "float", "Height of the cylinder.", length), units],
           ["calculate the volume of a cylinder with radius {radius} and height {height}",
            "what is the volume of a cylinder that is {height} tall with a radius of {radius}?",
            "find the volume of a cylinder of height {height} and radius {radius}"]),
    ]


def _physics_chemistry() -> list[Func]:
    return [
        fn("physics.final_velocity", "Compute the final velocity of an object under constant acceleration.",
           [req("initial_velocity", "float", "Initial velocity in m/s.", real(0, 50)),
            req("acceleration", "float", "Acceleration in m/s^2.", real(0.5, 20)),
            req("time", "float", "Duration in seconds.", real(1, 60))],
           ["find the final velocity of an object starting at {initial_velocity} m/s that accelerates "
            "at {acceleration} m/s^2 for {time} seconds",
            "an object moves at {initial_velocity} m/s and accelerates at {acceleration} m/s^2 for {time} s. "
            "What is its final velocity?",
            "calculate the final speed after {time} seconds with acceleration {acceleration} m/s^2 "
            "and initial velocity {initial_velocity} m/s"]),
        fn("physics.kinetic_energy", "Compute the kinetic energy of a moving object.",
           [req("mass", "float", "Mass in kilograms.", real(0.1, 2000)),
            req("velocity", "float", "Velocity in m/s.", real(0.5, 100))],
           ["calculate the kinetic energy of an object of {mass} kg moving at {velocity} m/s",
            "what is the kinetic energy of a body with mass {mass} kg and speed {velocity} m/s?",
            "find the kinetic energy for mass {mass} kg at {velocity} m/s"]),
        fn("physics.force", "Compute force from mass and acceleration (Newton's second law).",
           [req("mass", "float", "Mass in kilograms.", real(0.1, 2000)),
            req("acceleration", "float", "Acceleration in m/s^2.", real(0.1, 30))],
           ["calculate the force needed to accelerate {mass} kg at {acceleration} m/s^2",
            "what force acts on a mass of {mass} kg accelerating at {acceleration} m/s^2?",
            "find the net force for a mass of {mass} kg and an acceleration of {acceleration} m/s^2"]),
        fn("physics.ohms_law_current", "Compute the current through a resistor from voltage and resistance.",
           [req("voltage", "float", "Voltage in volts.", real(1, 240)),
            req("resistance", "float", "Resistance in ohms.", real(1, 1000))],
           ["calculate the current through a resistor of {resistance} ohms at {voltage} volts",
            "what current flows when {voltage} V is applied across {resistance} ohms?",
            "find the current for a voltage of {voltage} V and a resistance of {resistance} ohms"]),
        fn("physics.projectile_range", "Compute the horizontal range of a projectile launched from the ground.",
           [req("velocity", "float", "Launch speed in m/s.", real(5, 100)),
            req("angle", "integer", "Launch angle in degrees.", integer(10, 80)),
            opt("gravity", "float", "Gravitational acceleration in m/s^2.", pick(9.81, 9.8, 1.62, 3.71),
                "with gravity {v} m/s^2", "assuming g = {v}", default=9.81)],
           ["find the range of a projectile launched at {velocity} m/s at an angle of {angle} degrees",
            "how far does a projectile travel if it is launched at {angle} degrees with speed {velocity} m/s?",
            "compute the projectile range for speed {velocity} m/s and angle {angle} degrees"]),
        fn("physics.wavelength", "Compute the wavelength of a wave from its frequency.",
           [req("frequency", "float", "Frequency in hertz.", real(20, 20000)),
            opt("speed", "float", "Wave speed in m/s.", pick(343, 1480, 299792458), "traveling at {v} m/s",
                "with a wave speed of {v} m/s", default=343)],
           ["calculate the wavelength of a wave with frequency {frequency} Hz",
            "what is the wavelength for {frequency} Hz?", "find the wavelength at a frequency of {frequency} Hz"],
           vary="frequency"),
        fn("physics.density", "Compute density from mass and volume.",
           [req("mass", "float", "Mass in kilograms.", real(0.1, 500)),
            req("volume", "float", "Volume in cubic meters.", real(0.01, 10))],
           ["calculate the density of an object with mass {mass} kg and volume {volume} m^3",
            "what is the density of something weighing {mass} kg that fills {volume} cubic meters?",
            "find the density given a volume of {volume} m^3 and a mass of {mass} kg"]),
        fn("chemistry.molecular_weight", "Calculate the molecular weight of a compound from its formula.",
           [req("formula", "string", "Chemical formula, e.g. 'H2O'.", pick(*FORMULAS)),
            opt("unit", "string", "Unit of the result.",
                worded({"g/mol": ("in g/mol", "in grams per mole"), "kg/mol": ("in kg/mol", "in kilograms per mole")}),
                default="g/mol")],
           ["calculate the molecular weight of {formula}", "what is the molar mass of {formula}?",
            "find the molecular weight of the compound {formula}"], vary="formula"),
        fn("chemistry.element_info", "Look up a property of a chemical element.",
           [req("element", "string", "Name of the element.", pick(*ELEMENTS)),
            req("property", "string", "The property to return.",
                worded({"atomic_number": ("atomic number",), "atomic_mass": ("atomic mass", "atomic weight"),
                        "melting_point": ("melting point",), "electron_configuration": ("electron configuration",)}))],
           ["get the {property} of {element}", "what is the {property} of {element}?",
            "look up the {property} for {element}"], vary="element"),
        fn("chemistry.ph_from_concentration", "Compute the pH of a solution from its hydrogen ion concentration.",
           [req("concentration", "float", "Hydrogen ion concentration in mol/L.",
                pick(0.01, 0.001, 0.0001, 0.005, 0.0025, 0.02, 0.05, 0.0003))],
           ["calculate the pH of a solution with a hydrogen ion concentration of {concentration} M",
            "what is the pH if [H+] = {concentration} mol/L?",
            "find the pH for an H+ concentration of {concentration} mol/L"]),
        fn("chemistry.ideal_gas_pressure", "Compute gas pressure with the ideal gas law.",
           [req("moles", "float", "Amount of gas in moles.", real(0.1, 10)),
            req("temperature", "float", "Temperature in kelvin.", real(200, 600)),
            req("volume", "float", "Volume in liters.", real(0.5, 100))],
           ["calculate the pressure of {moles} mol of gas at {temperature} K in {volume} L",
            "what is the pressure of an ideal gas with {moles} moles, a volume of {volume} liters "
            "and a temperature of {temperature} K?",
            "use the ideal gas law for n = {moles} mol, T = {temperature} K and V = {volume} L"]),
        fn("chemistry.balance_equation", "Balance a chemical equation.",
           [req("equation", "string", "Unbalanced equation, reactants -> products.", pick(*REACTIONS))],
           ["balance the chemical equation {equation}", "what coefficients balance {equation}?",
            "balance {equation}"]),
        fn("genetics.dna_complement", "Return the complementary strand of a DNA sequence.",
           [req("sequence", "string", "DNA sequence made of A, C, G and T.", dna()),
            opt("reverse", "boolean", "Whether to return the reverse complement.",
                flag(("as the reverse complement", "and reverse it"), ("without reversing it",)), default=False)],
           ["find the complement of the DNA sequence {sequence}",
            "what is the complementary strand of {sequence}?", "get the DNA complement of {sequence}"],
           vary="sequence"),
        fn("astronomy.planet_distance", "Compute the average distance between two planets.",
           [req("planet1", "string", "The first planet.", pick(*PLANETS)),
            req("planet2", "string", "The second planet.", pick(*PLANETS)),
            opt("unit", "string", "Unit of the result.",
                worded({"km": ("in km", "in kilometers"), "au": ("in AU", "in astronomical units"),
                        "miles": ("in miles",)}), default="km")],
           ["find the distance between {planet1} and {planet2}",
            "how far is {planet1} from {planet2}?", "calculate the distance from {planet1} to {planet2}"]),
    ]


def _finance() -> list[Func]:
    return [
        fn("finance.compound_interest", "Calculate the final amount of an investment with compound interest.",
           [req("principal", "float", "Initial amount in dollars.", money(500, 50000)),
            req("annual_rate", "float", "Annual interest rate in percent, e.g. 4.5 for 4.5%.", percent(1, 12)),
            req("years", "integer", "Number of years.", integer(1, 30)),
            opt("compounds_per_year", "integer", "How many times interest is compounded per year.",
                worded({12: ("compounded monthly", "compounded 12 times a year"),
                        4: ("compounded quarterly", "compounded 4 times per year"),
                        1: ("compounded annually", "compounded once a year"), 365: ("compounded daily",)},
                       enum=False),
                default=1)],
           ["calculate the compound interest on {principal} at {annual_rate} for {years} years",
            "how much will {principal} grow to in {years} years at an annual rate of {annual_rate}?",
            "compute the final balance for a principal of {principal}, a rate of {annual_rate} "
            "and a term of {years} years"]),
        fn("finance.simple_interest", "Calculate simple interest on a principal.",
           [req("principal", "float", "Initial amount in dollars.", money(100, 20000)),
            req("annual_rate", "float", "Annual interest rate in percent.", percent(1, 12)),
            req("years", "integer", "Number of years.", integer(1, 15))],
           ["calculate the simple interest on {principal} at {annual_rate} for {years} years",
            "how much simple interest does {principal} earn over {years} years at {annual_rate}?",
            "find the simple interest for {years} years on {principal} with a rate of {annual_rate}"]),
        fn("finance.loan_payment", "Compute the monthly payment of a fixed-rate loan.",
           [req("loan_amount", "float", "Amount borrowed in dollars.", money(1000, 500000)),
            req("annual_rate", "float", "Annual interest rate in percent.", percent(2, 9)),
            req("term_years", "integer", "Loan term in years.", integer(1, 30))],
           ["calculate the monthly payment on a {loan_amount} loan at {annual_rate} over {term_years} years",
            "what is my monthly payment if I borrow {loan_amount} for {term_years} years at {annual_rate}?",
            "find the monthly installment for a loan of {loan_amount} over {term_years} years at {annual_rate}"]),
        fn("finance.get_stock_price", "Get the latest price of a stock.",
           [req("ticker", "string", "Stock ticker symbol, e.g. 'AAPL'.", pick(*TICKERS)),
            opt("exchange", "string", "Stock exchange.", pick("NASDAQ", "NYSE"), "on the {v}", "listed on {v}",
                default="NASDAQ")],
           ["get the current stock price of {ticker}", "what is {ticker} trading at right now?",
            "look up the latest share price for {ticker}"], vary="ticker"),
        fn("finance.get_stock_history", "Get historical prices of a stock.",
           [req("ticker", "string", "Stock ticker symbol.", pick(*TICKERS)),
            req("days", "integer", "Number of past days.", integer(5, 90)),
            opt("interval", "string", "Sampling interval of the prices.",
                worded({"daily": ("with daily prices", "at a daily interval"),
                        "weekly": ("with weekly prices", "at a weekly interval")}), default="daily")],
           ["get the stock price history of {ticker} for the last {days} days",
            "show me how {ticker} did over the past {days} days", "fetch {days} days of price history for {ticker}"],
           vary="ticker"),
        fn("finance.convert_currency", "Convert an amount of money between currencies.",
           [req("amount", "float", "Amount to convert.", real(1, 10000)),
            req("from_currency", "string", "Three-letter code of the source currency.", pick(*CURRENCIES)),
            req("to_currency", "string", "Three-letter code of the target currency.", pick(*CURRENCIES))],
           ["convert {amount} {from_currency} to {to_currency}",
            "how much is {amount} {from_currency} in {to_currency}?",
            "change {amount} {from_currency} into {to_currency}"]),
        fn("finance.net_present_value", "Compute the net present value of a series of cash flows.",
           [req("cash_flows", "array", "Yearly cash flows in dollars, first year first.",
                num_list(100, 5000, 3, 6)),
            req("discount_rate", "float", "Discount rate in percent.", percent(2, 15)),
            opt("initial_investment", "float", "Upfront investment in dollars.", money(1000, 20000),
                "with an initial investment of {v}", "after investing {v} upfront", default=0)],
           ["calculate the NPV of the cash flows {cash_flows} at a discount rate of {discount_rate}",
            "what is the net present value of {cash_flows} discounted at {discount_rate}?",
            "find the net present value for cash flows of {cash_flows} with a discount rate of {discount_rate}"]),
        fn("calculate_tip", "Calculate the tip for a restaurant bill.",
           [req("bill_amount", "float", "The bill total in dollars.", money(10, 400)),
            req("tip_percentage", "integer", "Tip as a percentage of the bill.", integer(10, 25)),
            opt("split", "integer", "Number of people sharing the bill.", integer(2, 8),
                "split between {v} people", "shared by {v} people", default=1)],
           ["calculate the tip on a bill of {bill_amount} at {tip_percentage} percent",
            "how much should I tip on {bill_amount} if I want to leave {tip_percentage} percent?",
            "work out a tip of {tip_percentage} percent for a bill of {bill_amount}"]),
    ]


def _health() -> list[Func]:
    return [
        fn("health.body_mass_index", "Calculate the body mass index from weight and height.",
           [req("weight_kg", "float", "Body weight in kilograms.", real(40, 130, places=1)),
            req("height_cm", "integer", "Height in centimeters.", integer(140, 205))],
           ["calculate the BMI of someone who weighs {weight_kg} kg and is {height_cm} cm tall",
            "what is my body mass index if I am {height_cm} cm tall and weigh {weight_kg} kg?",
            "compute the BMI for a weight of {weight_kg} kg and a height of {height_cm} cm"]),
        fn("calculate_calories_burned", "Estimate calories burned during an activity.",
           [req("activity", "string", "The activity, e.g. 'running'.", pick(*ACTIVITIES)),
            req("duration_minutes", "integer", "Duration in minutes.", integer(10, 120)),
            opt("weight_kg", "float", "Body weight in kilograms.", real(45, 120, places=1),
                "for a person weighing {v} kg", "if I weigh {v} kg", default=70)],
           ["estimate the calories burned by {duration_minutes} minutes of {activity}",
            "how many calories do I burn {activity} for {duration_minutes} minutes?",
            "calculate calories burned doing {activity} for {duration_minutes} minutes"]),
        fn("health.daily_water_intake", "Recommend daily water intake from weight and activity level.",
           [req("weight_kg", "float", "Body weight in kilograms.", real(40, 130, places=1)),
            req("activity_level", "string", "How active the person is.",
                worded({"sedentary": ("sedentary", "mostly sitting all day"),
                        "moderate": ("moderately active", "exercising a few times a week"),
                        "active": ("very active", "training every day")}))],
           ["how much water should a person weighing {weight_kg} kg who is {activity_level} drink per day?",
            "recommend a daily water intake for someone weighing {weight_kg} kg and {activity_level}",
            "calculate daily water needs for someone of {weight_kg} kg who is {activity_level}"]),
        fn("health.heart_rate_zones", "Compute heart rate training zones for a person.",
           [req("age", "integer", "Age in years.", integer(18, 80)),
            opt("resting_heart_rate", "integer", "Resting heart rate in beats per minute.", integer(45, 85),
                "with a resting heart rate of {v} bpm", "given a resting pulse of {v}")],
           ["calculate the heart rate zones for someone aged {age}",
            "what are the training heart rate zones for someone who is {age} years old?",
            "compute heart rate zones for age {age}"], vary="age"),
    ]


def _weather() -> list[Func]:
    location = pick(*CITIES)
    unit = opt("unit", "string", "Temperature unit.", TEMP_UNIT, default="celsius")
    return [
        fn("weather.current_conditions", "Get the current weather conditions for a location.",
           [req("location", "string", "City, optionally with state or country, e.g. 'Austin, TX'.", location), unit],
           ["get the current weather in {location}", "what's the weather like in {location} right now?",
            "check the weather for {location}", "tell me the current conditions in {location}"],
           vary="location"),
        fn("get_weather_forecast", "Get the weather forecast for the next days.",
           [req("location", "string", "City, optionally with state or country.", location),
            req("days", "integer", "Number of days to forecast.", integer(2, 14)),
            opt("include_hourly", "boolean", "Whether to include an hourly breakdown.",
                flag(("with hourly details", "including an hourly breakdown"), ("without hourly details",)),
                default=False), unit],
           ["get the weather forecast for {location} for the next {days} days",
            "what will the weather be in {location} over the next {days} days?",
            "give me the {days} day forecast for {location}"], vary="location"),
        fn("get_weather_history", "Get the recorded weather for a location on a past date.",
           [req("location", "string", "City, optionally with state or country.", location),
            req("date", "string", "Date in YYYY-MM-DD format.", date(2015, 2024)), unit],
           ["get the weather history for {location} on {date}", "what was the weather in {location} on {date}?",
            "look up past weather records for {location} on {date}"], vary="location"),
        fn("weather.air_quality_index", "Get the air quality index for a location.",
           [req("location", "string", "City, optionally with state or country.", location),
            opt("pollutant", "string", "Report a single pollutant.",
                worded({"pm2.5": ("for PM2.5", "focusing on fine particles (PM2.5)"),
                        "pm10": ("for PM10",), "ozone": ("for ozone", "looking at ozone levels"),
                        "no2": ("for nitrogen dioxide", "for NO2")}))],
           ["get the air quality in {location}", "how is the air quality in {location} today?",
            "check the AQI for {location}"], vary="location"),
        fn("get_uv_index", "Get the UV index forecast for a location and date.",
           [req("location", "string", "City, optionally with state or country.", location),
            req("date", "string", "Date in YYYY-MM-DD format.", date(2024, 2026))],
           ["get the UV index for {location} on {date}", "how strong will the sun be in {location} on {date}?",
            "check the UV index in {location} for {date}"], vary="location"),
        fn("get_sunrise_sunset", "Get sunrise and sunset times for a location and date.",
           [req("location", "string", "City, optionally with state or country.", location),
            req("date", "string", "Date in YYYY-MM-DD format.", date(2024, 2026))],
           ["get sunrise and sunset times for {location} on {date}",
            "when does the sun rise and set in {location} on {date}?",
            "find the sunrise time in {location} on {date}"], vary="location"),
    ]


def _travel_geography() -> list[Func]:
    city = pick(*CITIES)
    return [
        fn("travel.search_flights", "Search for flights between two cities on a date.",
           [req("origin", "string", "Departure city.", city), req("destination", "string", "Arrival city.", city),
            req("departure_date", "string", "Date in YYYY-MM-DD format.", date(2024, 2026)),
            opt("passengers", "integer", "Number of passengers.", integer(2, 6), "for {v} passengers",
                "for {v} people", default=1),
            opt("cabin_class", "string", "Cabin class.",
                worded({"economy": ("in economy",), "business": ("in business class", "flying business"),
                        "first": ("in first class",)}), default="economy")],
           ["search for flights from {origin} to {destination} on {departure_date}",
            "find me a flight to {destination} from {origin} departing {departure_date}",
            "are there any flights from {origin} to {destination} on {departure_date}?"]),
        fn("travel.flight_status", "Get the status of a flight.",
           [req("flight_number", "string", "Airline code and number, e.g. 'UA2451'.", code(*AIRLINES, digits=3)),
            opt("date", "string", "Date in YYYY-MM-DD format.", date(2024, 2026), "on {v}", "for {v}")],
           ["check the status of flight {flight_number}", "is flight {flight_number} on time?",
            "get the current status for flight {flight_number}"], vary="flight_number"),
        fn("travel.book_hotel", "Book a hotel room.",
           [req("city", "string", "City of the hotel.", city),
            req("check_in", "string", "Check-in date in YYYY-MM-DD format.", date(2024, 2026)),
            req("nights", "integer", "Number of nights.", integer(2, 14)),
            opt("room_type", "string", "Type of room.",
                worded({"single": ("in a single room",), "double": ("in a double room",),
                        "suite": ("in a suite",)}), default="double"),
            opt("guests", "dict", "Who is staying.", guests(), "for {v}")],
           ["book a hotel in {city} for {nights} nights starting {check_in}",
            "reserve a hotel room in {city} from {check_in} for {nights} nights",
            "get me a hotel in {city}, checking in on {check_in} for {nights} nights"]),
        fn("travel.get_distance", "Get the travel distance and time between two places.",
           [req("origin", "string", "Start location.", city), req("destination", "string", "End location.", city),
            opt("mode", "string", "Mode of transport.",
                worded({"driving": ("by car", "when driving"), "walking": ("on foot", "walking"),
                        "transit": ("by public transit", "using public transport")}), default="driving")],
           ["get the distance from {origin} to {destination}", "how far is {destination} from {origin}?",
            "calculate the travel distance between {origin} and {destination}"]),
        fn("travel.find_attractions", "Find tourist attractions in a city.",
           [req("city", "string", "City to search.", city),
            opt("category", "string", "Kind of attraction.",
                worded({"museum": ("focusing on museums", "looking for museums"), "park": ("focusing on parks",),
                        "landmark": ("focusing on famous landmarks",), "nightlife": ("for nightlife",)})),
            opt("limit", "integer", "Maximum number of results.", integer(3, 10), "limited to {v} results",
                "showing at most {v}", default=5)],
           ["find tourist attractions in {city}", "what should I visit in {city}?", "list things to see in {city}"],
           vary="city"),
        fn("travel.rent_car", "Rent a car at a location.",
           [req("location", "string", "Pickup city.", city),
            req("pickup_date", "string", "Pickup date in YYYY-MM-DD format.", date(2024, 2026)),
            req("days", "integer", "Rental length in days.", integer(2, 21)),
            opt("car_type", "string", "Car category.",
                worded({"compact": ("a compact car",), "suv": ("an SUV",), "convertible": ("a convertible",)}),
                "and I want {v}", "choosing {v}")],
           ["rent a car in {location} on {pickup_date} for {days} days",
            "book a rental car in {location} for {days} days from {pickup_date}",
            "get me a car in {location} starting {pickup_date} for {days} days"]),
        fn("geography.get_population", "Get the population of a city.",
           [req("city", "string", "City name.", city),
            opt("year", "integer", "Year of the estimate.", integer(1990, 2023), "as of {v}", "in the year {v}")],
           ["get the population of {city}", "how many people live in {city}?", "find the population of {city}"],
           vary="city"),
        fn("geography.get_capital", "Get the capital city of a country.",
           [req("country", "string", "Country name.", pick(*COUNTRIES))],
           ["find the capital of {country}", "what is the capital city of {country}?",
            "tell me the capital of {country}"],
           vary="country"),
        fn("geography.get_timezone", "Get the time zone of a city.",
           [req("city", "string", "City name.", city)],
           ["get the time zone of {city}", "what time zone is {city} in?", "look up the timezone for {city}"],
           vary="city"),
    ]


def _sports() -> list[Func]:
    team = pick(*TEAMS)
    return [
        fn("sports.get_team_standing", "Get a team's current standing in its league.",
           [req("team", "string", "Team name.", team), req("league", "string", "League name.", pick(*LEAGUES)),
            opt("season", "string", "Season, e.g. '2022-23'.", pick(*SEASONS), "for the {v} season", "in {v}")],
           ["get the standing of {team} in the {league}", "where do {team} rank in the {league}?",
            "show the {league} position of {team}"]),
        fn("sports.get_player_stats", "Get a player's statistics for a season.",
           [req("player_name", "string", "Full name of the player.", pick(*PLAYERS)),
            req("season", "string", "Season, e.g. '2022-23'.", pick(*SEASONS)),
            opt("stat", "string", "A single statistic to return.",
                worded({"points": ("looking only at points",),
                        "assists": ("looking only at assists", "focusing on assists"),
                        "goals": ("focusing on goals",)}))],
           ["get the stats of {player_name} for the {season} season",
            "how did {player_name} perform in {season}?", "show {player_name}'s statistics from the {season} season"],
           vary="player_name"),
        fn("sports.get_match_schedule", "Get a team's upcoming matches.",
           [req("team", "string", "Team name.", team),
            req("num_matches", "integer", "How many matches.", integer(2, 10)),
            opt("venue", "string", "Restrict to home or away matches.",
                worded({"home": ("counting only home games", "playing at home"),
                        "away": ("counting only away games", "playing away")}))],
           ["get the next {num_matches} matches of {team}", "when are the next {num_matches} games for {team}?",
            "show the upcoming {num_matches} fixtures for {team}"], vary="team"),
        fn("sports.get_match_result", "Get the result of a match between two teams on a date.",
           [req("team1", "string", "First team.", team), req("team2", "string", "Second team.", team),
            req("date", "string", "Match date in YYYY-MM-DD format.", date(2018, 2024))],
           ["get the result of {team1} vs {team2} on {date}", "who won the {team1} game against {team2} on {date}?",
            "find the final score between {team1} and {team2} from {date}"]),
    ]


def _music_media() -> list[Func]:
    return [
        fn("music.search_songs_by_artist", "Search songs by an artist.",
           [req("artist", "string", "Artist or band name.", pick(*ARTISTS)),
            opt("limit", "integer", "Maximum number of songs.", integer(3, 20), "limited to {v} songs",
                "top {v} only", default=10),
            opt("year", "integer", "Only songs released in this year.", integer(1965, 2023), "released in {v}",
                "from {v}")],
           ["find songs by {artist}", "search for music by {artist}", "what songs has {artist} released?"],
           vary="artist"),
        fn("music.create_playlist", "Create a playlist with the given songs.",
           [req("name", "string", "Name of the playlist.", quoted("Road Trip", "Focus", "Workout Mix",
                                                                    "Sunday Morning", "Party 2024", "Chill Vibes")),
            req("songs", "array", "Song titles to add.", str_list(SONGS)),
            opt("public", "boolean", "Whether other users can see the playlist.",
                flag(("and make it public", "and make it visible to everyone"), ("and keep it private",)),
                default=False)],
           ["create a playlist called {name} with {songs}", "make a new playlist named {name} containing {songs}",
            "put {songs} in a new playlist {name}"]),
        fn("music.get_lyrics", "Get the lyrics of a song.",
           [req("song_title", "string", "Title of the song.", pick(*SONGS)),
            opt("language", "string", "Translate the lyrics into this language.", pick(*LANGUAGES),
                "translated to {v}", "in {v}")],
           ["get the lyrics of {song_title}", "show me the words to {song_title}",
            "what are the lyrics to {song_title}?"],
           vary="song_title"),
        fn("music.note_frequency", "Get the frequency in hertz of a musical note.",
           [req("note", "string", "Note name with octave, e.g. 'A4'.", pick(*NOTES)),
            opt("tuning", "integer", "Frequency of A4 in hertz.", pick(432, 440, 442), "with A4 tuned to {v} Hz",
                "using {v} Hz tuning", default=440)],
           ["get the frequency of the note {note}", "what is the frequency of {note}?",
            "find how many hertz the note {note} is"], vary="note"),
        fn("music.generate_chord_progression", "Generate a chord progression in a key.",
           [req("key", "string", "Musical key, e.g. 'C major'.", pick(*MUSIC_KEYS)),
            req("length", "integer", "Number of chords.", integer(3, 8)),
            opt("style", "string", "Musical style.",
                worded({"pop": ("in a pop style",), "jazz": ("jazzy", "in a jazz style"), "blues": ("bluesy",)}))],
           ["generate a chord progression in {key} with {length} chords",
            "write a progression of {length} chords in {key}", "give me {length} chords in {key}"]),
        fn("movies.find_showtimes", "Find cinema showtimes for a movie.",
           [req("movie", "string", "Movie title.", pick(*MOVIES)), req("city", "string", "City.", pick(*CITIES)),
            opt("date", "string", "Date in YYYY-MM-DD format.", date(2024, 2026), "on {v}", "for {v}")],
           ["find showtimes for {movie} in {city}", "when is {movie} playing in {city}?",
            "look up cinema times for {movie} near {city}"]),
        fn("library.find_by_author", "Search a library catalog by author.",
           [req("author", "string", "Author name.", pick(*AUTHORS)),
            opt("genre", "string", "Genre filter.", pick(*BOOK_GENRES), "in the {v} genre", "limited to {v}"),
            opt("available_only", "boolean", "Only return books that can be borrowed now.",
                flag(("that are available now", "only available copies"), ("including checked-out ones",)),
                default=False)],
           ["search the library for books by {author}", "find books written by {author}",
            "which books by {author} does the library have?"], vary="author"),
        fn("history.date_of_event", "Get the date of a historical event.",
           [req("event", "string", "Description of the event.", pick(*HISTORIC_EVENTS))],
           ["find the date of {event}", "when did {event} happen?", "look up when {event} took place"], vary="event"),
    ]


def _cooking() -> list[Func]:
    return [
        fn("cooking.find_recipe", "Find recipes that use the given ingredients.",
           [req("ingredients", "array", "Ingredients to use.", str_list(INGREDIENTS)),
            opt("cuisine", "string", "Preferred cuisine.", pick(*CUISINES), "in {v} style", "for {v} food"),
            opt("max_time", "integer", "Maximum total time in minutes.", integer(10, 90),
                "ready in under {v} minutes", "taking at most {v} minutes")],
           ["find a recipe with {ingredients}", "what can I cook with {ingredients}?",
            "suggest a dish that uses {ingredients}"]),
        fn("cooking.convert_units", "Convert a cooking quantity between units.",
           [req("quantity", "float", "Amount to convert.", real(0.25, 500)),
            req("from_unit", "string", "Unit of the amount.", pick(*KITCHEN_UNITS)),
            req("to_unit", "string", "Unit to convert to.", pick(*KITCHEN_UNITS)),
            opt("ingredient", "string", "Ingredient, for conversions that depend on density.", pick(*INGREDIENTS),
                "for {v}", "of {v}")],
           ["convert {quantity} {from_unit} to {to_unit}", "how many {to_unit} are {quantity} {from_unit}?",
            "change {quantity} {from_unit} into {to_unit}"]),
        fn("cooking.scale_recipe", "Scale a recipe to a different number of servings.",
           [req("recipe_name", "string", "Name of the recipe.", pick(*RECIPES)),
            req("original_servings", "integer", "Servings the recipe makes.", integer(2, 6)),
            req("new_servings", "integer", "Servings wanted.", integer(7, 20))],
           ["scale my {recipe_name} recipe from {original_servings} servings to {new_servings}",
            "adjust the {recipe_name} recipe that serves {original_servings} so it serves {new_servings}",
            "take my {recipe_name} recipe for {original_servings} people and make it serve {new_servings}"]),
        fn("cooking.get_nutrition", "Get nutrition facts for an amount of food.",
           [req("food", "string", "The food.", pick(*FOODS)),
            req("amount", "string", "Amount with unit, e.g. '100g'.",
                pick("100g", "250g", "1kg", "2oz", "50g", "500g", "1.5kg", "8oz", "30g", "200g"))],
           ["get the nutrition facts for {amount} of {food}", "how many calories are in {amount} of {food}?",
            "show nutritional information for {food}, {amount}"]),
        fn("cooking.set_timer", "Set a kitchen timer.",
           [req("minutes", "integer", "Timer length in minutes.", integer(1, 90)),
            opt("label", "string", "Name shown on the timer.", quoted("pasta", "eggs", "bread", "tea", "roast"),
                "labeled {v}", "called {v}")],
           ["set a timer for {minutes} minutes", "start a kitchen timer for {minutes} minutes",
            "remind me in {minutes} minutes with a timer"], vary="minutes"),
    ]


def _shopping() -> list[Func]:
    order_id = code("ORD-", digits=6)
    return [
        fn("shopping.search_products", "Search the store catalog.",
           [req("query", "string", "What to search for.", pick(*PRODUCTS)),
            opt("max_price", "float", "Maximum price in dollars.", money(10, 500), "under {v}", "cheaper than {v}"),
            opt("sort_by", "string", "Sort order of the results.",
                worded({"price": ("sorted by price", "cheapest first"),
                        "rating": ("sorted by rating", "best rated first")}),
                default="rating")],
           ["search for {query}", "find {query} in the store", "show me some {query}",
            "do you have any {query}?"], vary="query"),
        fn("shopping.add_to_cart", "Add a product to the shopping cart.",
           [req("product_id", "string", "Product SKU, e.g. 'SKU-48213'.", code("SKU-")),
            req("quantity", "integer", "How many units.", integer(1, 10))],
           ["add {quantity} of {product_id} to my cart", "put {quantity} units of product {product_id} in the cart",
            "place {quantity} of item {product_id} in my basket"]),
        fn("shopping.track_order", "Track the delivery status of an order.",
           [req("order_id", "string", "Order identifier, e.g. 'ORD-572910'.", order_id)],
           ["track my order {order_id}", "where is order {order_id}?", "check the delivery status of {order_id}"],
           vary="order_id"),
        fn("shopping.cancel_order", "Cancel an order that has not shipped yet.",
           [req("order_id", "string", "Order identifier.", order_id),
            opt("reason", "string", "Why the order is cancelled.",
                quoted("ordered by mistake", "found a better price", "arrives too late"), "because {v}",
                "with the reason {v}")],
           ["cancel my order {order_id}", "stop order {order_id} from shipping",
            "cancel the order {order_id}"]),
        fn("shopping.apply_coupon", "Apply a coupon code to an order.",
           [req("order_id", "string", "Order identifier.", order_id),
            req("coupon_code", "string", "The coupon code.", pick(*COUPONS))],
           ["apply the coupon {coupon_code} to order {order_id}", "use code {coupon_code} on my order {order_id}",
            "can I get the {coupon_code} discount on {order_id}?"]),
        fn("shopping.place_order", "Place an order for a product to be shipped to an address.",
           [req("product_id", "string", "Product SKU.", code("SKU-")),
            req("quantity", "integer", "How many units.", integer(1, 5)),
            req("shipping_address", "dict", "Where to ship the order.", address())],
           ["order {quantity} of {product_id} and ship it to {shipping_address}",
            "place an order for {quantity} units of {product_id}, delivered to {shipping_address}",
            "buy {quantity} of {product_id} with shipping to {shipping_address}"]),
    ]


def _calendar_office() -> list[Func]:
    return [
        fn("calendar.create_event", "Create a calendar event.",
           [req("title", "string", "Event title.", pick(*EVENT_TITLES)),
            req("date", "string", "Date in YYYY-MM-DD format.", date(2024, 2026)),
            req("start_time", "string", "Start time, e.g. '12pm' or '14:30'.", clock()),
            opt("duration_minutes", "integer", "Length in minutes.", integer(15, 180), "lasting {v} minutes",
                "for {v} minutes", default=60),
            opt("attendees", "array", "Email addresses to invite.", str_list(EMAILS, 1, 3), "and invite {v}",
                "with {v} invited")],
           ["create an event {title} on {date} at {start_time}",
            "schedule {title} for {date} at {start_time}",
            "add {title} to my calendar on {date} starting {start_time}"]),
        fn("calendar.list_events", "List the events on a given day.",
           [req("date", "string", "Date in YYYY-MM-DD format.", date(2024, 2026)),
            opt("calendar_name", "string", "Which calendar to read.", pick("work", "personal", "family"),
                "from my {v} calendar", "on the {v} calendar", default="personal")],
           ["list my events on {date}", "what do I have scheduled on {date}?", "show my calendar for {date}"],
           vary="date"),
        fn("calendar.set_reminder", "Set a reminder at a time.",
           [req("message", "string", "What to be reminded of.", pick(*REMINDERS)),
            req("time", "string", "Time of the reminder, e.g. '7:30am'.", clock()),
            opt("repeat", "string", "How often the reminder repeats.",
                worded({"daily": ("every day", "daily"), "weekly": ("every week", "weekly"), "none": ("just once",)}),
                default="none")],
           ["remind me to {message} at {time}", "set a reminder at {time} to {message}",
            "create a reminder to {message} for {time}"]),
        fn("calendar.find_free_slot", "Find a free meeting slot shared by several people.",
           [req("participants", "array", "Names of the people who must attend.", str_list(FIRST_NAMES)),
            req("date", "string", "Date in YYYY-MM-DD format.", date(2024, 2026)),
            req("duration_minutes", "integer", "Meeting length in minutes.", integer(15, 120))],
           ["find a slot of {duration_minutes} minutes on {date} for {participants}",
            "when are {participants} all free for {duration_minutes} minutes on {date}?",
            "look for a free meeting time of {duration_minutes} minutes with {participants} on {date}"]),
        fn("calendar.days_between", "Count the days between two dates.",
           [req("start_date", "string", "First date in YYYY-MM-DD format.", date(2020, 2023)),
            req("end_date", "string", "Second date in YYYY-MM-DD format.", date(2024, 2026))],
           ["count the days between {start_date} and {end_date}",
            "how many days are there from {start_date} to {end_date}?",
            "calculate the number of days from {start_date} until {end_date}"]),
        fn("set_alarm", "Set an alarm clock.",
           [req("time", "string", "Alarm time, e.g. '6:45am'.", clock()),
            opt("label", "string", "Alarm label.", quoted("gym", "work", "flight", "meds"),
                "labeled {v}", "named {v}")],
           ["set an alarm for {time}", "wake me up at {time}", "create an alarm at {time}"], vary="time"),
        fn("email.send_email", "Send an email.",
           [req("to", "string", "Recipient email address.", pick(*EMAILS)),
            req("subject", "string", "Subject line.", quoted("Meeting notes", "Invoice #4821", "Lunch on Friday?",
                                                           "Project update", "Welcome aboard")),
            opt("body", "string", "Body text.", quoted(*SENTENCES), "saying {v}", "with the message {v}")],
           ["send an email to {to} with the subject {subject}", "email {to} about {subject}",
            "write to {to} using the subject line {subject}"]),
        fn("contacts.create_contact", "Add a person to the address book.",
           [req("contact", "dict", "The contact to add.", contact())],
           ["add {contact} to my contacts", "create a new contact for {contact}", "save {contact} in my address book"]),
        fn("text.translate", "Translate text into another language.",
           [req("text", "string", "The text to translate.", quoted(*SENTENCES)),
            req("target_language", "string", "Language to translate into.", pick(*LANGUAGES)),
            opt("source_language", "string", "Language of the text.", pick("English", "Dutch"), "from {v}",
                default="English")],
           ["translate {text} into {target_language}", "how do you say {text} in {target_language}?",
            "give me the {target_language} translation of {text}"]),
        fn("text.count_words", "Count the words in a text.",
           [req("text", "string", "The text.", quoted(*SENTENCES))],
           ["count the words in {text}", "how many words are in {text}?", "tell me the word count of {text}"]),
    ]


def _units_realestate() -> list[Func]:
    temp = worded({"celsius": ("Celsius", "degrees Celsius"), "fahrenheit": ("Fahrenheit", "degrees Fahrenheit"),
                   "kelvin": ("Kelvin",)})
    return [
        fn("unit.convert_temperature", "Convert a temperature between scales.",
           [req("value", "float", "The temperature.", real(-40, 120, places=1)),
            req("from_unit", "string", "Scale of the value.", temp),
            req("to_unit", "string", "Scale to convert to.", temp)],
           ["convert {value} {from_unit} to {to_unit}", "what is {value} {from_unit} in {to_unit}?",
            "change {value} {from_unit} into {to_unit}"]),
        fn("unit.convert_length", "Convert a length between units.",
           [req("value", "float", "The length.", real(0.5, 1000)),
            req("from_unit", "string", "Unit of the value.", pick(*LENGTH_UNITS)),
            req("to_unit", "string", "Unit to convert to.", pick(*LENGTH_UNITS))],
           ["convert {value} {from_unit} to {to_unit}", "how many {to_unit} is {value} {from_unit}?",
            "express {value} {from_unit} in {to_unit}"]),
        fn("unit.convert_weight", "Convert a weight given with its unit into another unit.",
           [req("weight", "string", "Weight with unit, e.g. '1kg' or '12lb'.",
                with_unit(1, 200, "kg", "lb", "g", "oz")),
            req("to_unit", "string", "Unit to convert to.", pick("kg", "pounds", "grams", "ounces"))],
           ["convert {weight} to {to_unit}", "how much is {weight} in {to_unit}?", "express {weight} in {to_unit}"]),
        fn("real_estate.estimate_price", "Estimate the market price of a house.",
           [req("location", "string", "City of the property.", pick(*CITIES)),
            req("square_feet", "integer", "Living area in square feet.", integer(500, 5000)),
            req("bedrooms", "integer", "Number of bedrooms.", integer(1, 6)),
            opt("has_garage", "boolean", "Whether the house has a garage.",
                flag(("with a garage",), ("without a garage", "with no garage")))],
           ["estimate the price of a {bedrooms} bedroom, {square_feet} square foot house in {location}",
            "how much is a home of {square_feet} sq ft with {bedrooms} bedrooms in {location} worth?",
            "give me a price estimate for a house in {location} with {bedrooms} bedrooms "
            "and {square_feet} square feet"]),
        fn("real_estate.estimate_rent", "Estimate the monthly rent of an apartment.",
           [req("location", "string", "City of the apartment.", pick(*CITIES)),
            req("bedrooms", "integer", "Number of bedrooms.", integer(1, 4)),
            opt("furnished", "boolean", "Whether the apartment is furnished.",
                flag(("that is furnished", "with furniture included"), ("that is unfurnished",)))],
           ["estimate the rent for a {bedrooms} bedroom apartment in {location}",
            "what would a {bedrooms}-bedroom place in {location} rent for?",
            "how much is monthly rent in {location} for {bedrooms} bedrooms?"], vary="location"),
    ]


DOMAINS: dict[str, list[Func]] = {
    "math": _math(), "statistics": _statistics_algebra(), "geometry": _geometry(), "science": _physics_chemistry(),
    "finance": _finance(), "health": _health(), "weather": _weather(), "travel": _travel_geography(),
    "sports": _sports(), "media": _music_media(), "cooking": _cooking(), "shopping": _shopping(),
    "calendar": _calendar_office(), "units": _units_realestate(),
}
CATALOG: list[Func] = [replace(f, domain=d) for d, fs in DOMAINS.items() for f in fs]

# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------

_COMMAND_WRAPS = ("{C}.", "Please {c}.", "Can you {c}?", "Could you {c}, please?", "I need you to {c}.",
                  "Help me {c}.", "{C}, please.", "Hey, {c}.", "I'd like you to {c}.", "{C}. Thanks!")
_QUESTION_WRAPS = ("{C}", "{C}", "Quick question: {c}", "Hi! {C}", "{C} Thanks.")


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _wrap(core: str, rng: random.Random) -> str:
    wraps = _QUESTION_WRAPS if core.endswith("?") else _COMMAND_WRAPS
    return rng.choice(wraps).format(C=_cap(core), c=core)


def _sample_values(f: Func, rng: random.Random) -> tuple[dict, dict]:
    """Values and texts for the required params and the optional params this request mentions.
    String values in one call are kept distinct (no flight from Paris to Paris)."""
    for _ in range(20):
        values, texts = {}, {}
        for p in f.params:
            if p.required or rng.random() < P_MENTION_OPTIONAL:
                values[p.name], texts[p.name] = p.gen(rng)
        strings = [v for v in values.values() if isinstance(v, str)]
        if len(strings) == len(set(strings)):
            break
    return values, texts


def _render(f: Func, template: str, values: dict, texts: dict, rng: random.Random) -> str:
    """Fill a template with the required params and append clauses for the optional ones."""
    core = template.format(**{p.name: texts[p.name] for p in f.params if p.required})
    clauses = [rng.choice(p.say).format(v=texts[p.name]) for p in f.params if not p.required and p.name in values]
    rng.shuffle(clauses)
    if not clauses:
        return core
    question = core.endswith("?")
    body = core[:-1] if question else core
    tail = clauses[0] if len(clauses) == 1 else ", ".join(clauses[:-1]) + " and " + clauses[-1]
    comma = "," if rng.random() < 0.4 else ""
    return f"{body}{comma} {tail}" + ("?" if question else "")


def _request(f: Func, rng: random.Random, commands_only: bool = False) -> tuple[dict, str]:
    """One call to `f` and the request core (not yet wrapped) that asks for it."""
    values, texts = _sample_values(f, rng)
    template = rng.choice(f.commands if commands_only else f.asks)
    return values, _render(f, template, values, texts, rng)


def _vary_request(f: Func, n: int, rng: random.Random) -> tuple[list[dict], str, list[dict]]:
    """n calls to `f` that differ only in `f.vary`, asked for in one sentence with a list; also each
    call's value texts (so a single item can be asked for again on its own)."""
    param = next(p for p in f.params if p.name == f.vary)
    values, texts = _sample_values(f, rng)
    seen, options = set(), []
    for _ in range(50):
        value, text = param.gen(rng)
        key = json.dumps(value)
        if key not in seen and not any(text in t or t in text for _, t in options):
            seen.add(key)
            options.append((value, text))
        if len(options) == n:
            break
    listed = {**texts, f.vary: _and([t for _, t in options], rng)}
    core = _render(f, rng.choice(f.commands), values, listed, rng)
    return [{**values, f.vary: v} for v, _ in options], core, [{**texts, f.vary: t} for _, t in options]


def _join_commands(cores: list[str], rng: random.Random) -> str:
    """Several commands in one message, in one of a few styles."""
    style = rng.randrange(4)
    if style == 0:
        return "Please " + _and(cores, rng) + "."
    if style == 1:
        out = [_cap(cores[0]) + "."]
        for i, core in enumerate(cores[1:], start=2):
            word = "Finally," if i == len(cores) > 2 else rng.choice(("Also,", "Then", "After that,", "Next,"))
            out.append(f"{word} {core}.")
        return " ".join(out)
    if style == 2:
        return "I need a few things: " + "; ".join(cores) + "."
    return "Do the following:\n" + "\n".join(f"{i}. {_cap(c)}" for i, c in enumerate(cores, start=1))


# --------------------------------------------------------------------------------------------
# Kinds
# --------------------------------------------------------------------------------------------


def _prefix(name: str) -> str:
    """"math.gcd" -> "math", "get_weather_forecast" -> "get_weather"."""
    return name.split(".")[0] if "." in name else "_".join(name.split("_")[:2])


def _distractors(f: Func, k: int, rng: random.Random) -> list[Func]:
    """k other functions; most from f's domain (similar names), the rest from anywhere."""
    prefix = _prefix(f.name)
    same = [g for g in CATALOG if g.domain == f.domain and g is not f]
    other = [g for g in CATALOG if g.domain != f.domain]
    rng.shuffle(same)
    same.sort(key=lambda g: _prefix(g.name) == prefix)  # stable: same prefix last, popped first
    chosen: list[Func] = []
    while len(chosen) < k:
        pool = same if same and rng.random() < 0.75 else other
        g = pool.pop(rng.randrange(len(pool))) if pool is other else pool.pop()
        chosen.append(g)
    return chosen


def _simple(rng: random.Random) -> tuple[list[Func], list[tuple[str, dict]], str]:
    f = rng.choice(CATALOG)
    args, core = _request(f, rng)
    return [f], [(f.name, args)], _wrap(core, rng)


def _multiple(rng: random.Random) -> tuple[list[Func], list[tuple[str, dict]], str]:
    f = rng.choice(CATALOG)
    offered = [f, *_distractors(f, rng.randint(1, 3), rng)]
    rng.shuffle(offered)
    args, core = _request(f, rng)
    return offered, [(f.name, args)], _wrap(core, rng)


def _parallel(rng: random.Random) -> tuple[list[Func], list[tuple[str, dict]], str]:
    f = rng.choice(CATALOG)
    n = rng.randint(2, 4)
    if rng.random() < 0.6:  # one function
        if f.vary and rng.random() < 0.65:
            arg_list, core, _ = _vary_request(f, n, rng)
            return [f], [(f.name, a) for a in arg_list], _wrap(core, rng)
        targets = [f] * n
        offered = [f]
    else:  # two functions, each called at least once
        g = _distractors(f, 1, rng)[0]
        targets = [f, g] + [rng.choice((f, g)) for _ in range(n - 2)]
        rng.shuffle(targets)
        offered = [f, g]
        rng.shuffle(offered)
    calls: list[tuple[str, dict]] = []
    cores: list[str] = []
    for target in targets:
        for _ in range(20):  # no two identical calls
            args, core = _request(target, rng, commands_only=True)
            if (target.name, args) not in calls:
                break
        calls.append((target.name, args))
        cores.append(core)
    return offered, calls, _join_commands(cores, rng)


_BUILDERS = {"simple": _simple, "multiple": _multiple, "parallel": _parallel}


def make_example(seed: int, kind: str | None = None) -> Example:
    """One deterministic example for `seed`; `kind` None picks one by seed (45/35/20%)."""
    rng = random.Random(seed)
    if kind is None:
        kind = rng.choices(KINDS, weights=_KIND_WEIGHTS)[0]
    if kind not in _BUILDERS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
    funcs, calls, request = _BUILDERS[kind](rng)
    return Example(functions=[f.schema() for f in funcs],
                   messages=[Message(role="user", content=request)], calls=calls)


def make_examples(start_seed: int, n: int) -> list[Example]:
    """Examples for seeds start_seed, start_seed + 1, ..., start_seed + n - 1."""
    return [make_example(start_seed + i) for i in range(n)]
