"""Write a small synthetic training corpus for a tiny GPT-2-style model, the same bytes every time.
    tracer corpus                                     # corpus.txt in the current folder, seed 0
    tracer corpus --out c.txt --seed 1 --size 20000
    tracer corpus --check corpus.txt                  # exit 0 if it has exactly the expected bytes
    tracer corpus --recipe induction                  # the recipe that teaches copying in any shape

(`tools/make_corpus.py` is the same, for a checkout: the same bytes.) Core module: standard library only.

The corpus is for training a very small language model (GPT-2 BPE tokenizer, context 64, 2-4
layers, d_model 64) on a CPU in a few thousand steps, so that the tracer has a trained model whose
heads do something recognisable: continue the alphabet as in the seed article (`A B C D E F G`),
count, recite weekdays and months, state simple facts, and above all copy from its context
whatever surrounds what it copies (induction heads). One example a line, plain ASCII, '\\n' line
endings, typically 6-50 GPT-2 tokens.

Categories of the `induction` recipe, drawn line by line in a seeded random order (share of lines):

    induction  46%  something said again later in the line, the way induction heads form in the
                    literature (Olsson et al. 2022, repeated random token sequences): a run of 3-14
                    random tokens said 2-3 times, one phrase of 2-6 words (half of them after "the",
                    "a", "my", …) said twice, or two phrases each said twice; 0-16 random words
                    before, between and after (none before: the line starts with it), the parts
                    joined by " ", ". ", ", ", "; ", " and ", …; one repeat in ten breaks off. The
                    words: GPT-2's 5,000 most frequent lower-case word tokens, any of its 17,534
                    (`word_tokens.txt`: copying must not lean on knowing a word), the same
                    capitalised, the copy pool, or letters, numbers and words mixed
    copy       10%  a phrase or a run of 4-8 random words / letters / numbers, said 2-3 times
                    ("red fox jumps. red fox jumps.", "k q z m r k q z m r"); the words come from
                    a pool of a few hundred
    sentences  20%  short simple English: facts, colours of things, what animals can do and say,
                    opposites, legs, arithmetic up to ten, capitals of 25 countries, small stories
    letters     9%  alphabet runs of 4-12 letters from any start, upper- or lowercase; one in six
                    is exactly the article's `A B C D E F G`
    counting    8%  runs of 4-10 numbers up to 60 by ones (mostly), by twos, or by tens up to
                    100, separated by " " or ", "
    calendar    7%  weekdays or months in order from any start, wrapping around, " " or ", "

The `recall` recipe (the shipped abc's corpus, `SHIPPED_RECIPE`) has 16% copy lines and, instead of
`induction`, 40% `recall` lines: random common words said twice, three in five in one shape, "the X Y
Z and the V W. the X Y Z and the V W."; its model learned that template (40 of 40 phrases of that
shape, 3 of 400 held-out phrases of other shapes in tests/test_abc_induction.py).

Reproducibility: everything is drawn from one `random.Random(seed)` through its integer methods
only (randrange, randint, choice), whose results are fixed across machines and Python 3.2+; the
word lists are literals in this file or the shipped `word_tokens.txt` (tools/make_words.py), never
sets or anything from the environment.
"""

from __future__ import annotations

import functools
import random
import string
from importlib import resources

DEFAULT_SEED = 0
DEFAULT_LINES = 100_000

# ---------------------------------------------------------------- word lists

UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
MONTHS = ("January February March April May June July August September October November "
          "December").split()
NUMBER_WORDS = "zero one two three four five six seven eight nine ten".split()

# Pool for the copy category: adjectives, singular nouns, verbs in the -s form, prepositions.
ADJECTIVES = """red blue green yellow black white brown pink grey orange purple gold big small
tall short long old new young hot cold warm cool wet dry soft hard fast slow happy sad loud quiet
dark bright clean dirty full empty heavy light round flat sharp sweet sour tiny huge kind brave
shy busy lazy good bad rich poor wild calm""".split()
NOUNS = """cat dog fox cow pig hen duck bird fish frog bee ant owl bat rat goat horse sheep lion
bear wolf deer mouse snake tiger whale shark crab seal cup pot pan jar box bag hat cap coat shoe
sock ring key lock door gate wall roof room bed desk chair table lamp clock book pen map card
letter ball kite drum bell toy doll game car bus van train ship boat plane bike road path bridge
tree leaf bush rose seed root grass hill rock stone sand lake pond river sea wave rain snow wind
cloud star moon sun sky fire smoke ice cake pie bread milk egg apple pear plum lemon corn rice
soup tea king queen girl boy man baby child farmer baker cook nurse friend teacher""".split()
VERBS = """jumps falls runs walks sits stands sleeps wakes eats drinks sings dances swims flies
rolls spins shines glows grows melts breaks stops starts waits hides looks turns moves rests
climbs digs plays reads writes draws smiles laughs cries calls shouts waves floats sinks slides
skips hops crawls rises drops burns cools shakes rings ticks""".split()
PREPOSITIONS = "over under near behind beside into onto across past around by on in at from".split()
POOL = list(dict.fromkeys(ADJECTIVES + NOUNS + VERBS + PREPOSITIONS + "the a and or but with".split()))

COLOUR_OF = [("the sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"),
             ("a banana", "yellow"), ("a tomato", "red"), ("the sun", "yellow"), ("milk", "white"),
             ("a lemon", "yellow"), ("a leaf", "green"), ("the sea", "blue"), ("a carrot", "orange"),
             ("an orange", "orange"), ("a frog", "green"), ("blood", "red"), ("the night", "black"),
             ("a cloud", "white"), ("a plum", "purple"), ("chocolate", "brown"), ("a rose", "red")]
CAN = [("birds", "fly"), ("fish", "swim"), ("dogs", "run"), ("frogs", "jump"), ("cats", "climb"),
       ("ducks", "swim"), ("bees", "fly"), ("snakes", "crawl"), ("horses", "run"),
       ("monkeys", "climb"), ("kangaroos", "jump"), ("people", "talk"), ("moles", "dig"),
       ("babies", "cry"), ("owls", "see at night")]
CANNOT = [("fish", "walk"), ("dogs", "fly"), ("cows", "fly"), ("cats", "talk"), ("snakes", "run"),
          ("birds", "swim"), ("trees", "walk"), ("rocks", "grow")]
SAYS = [("dog", "woof"), ("cat", "meow"), ("cow", "moo"), ("duck", "quack"), ("sheep", "baa"),
        ("pig", "oink"), ("owl", "hoot"), ("lion", "roar"), ("hen", "cluck"), ("mouse", "squeak")]
LEGS = [("dog", "four"), ("cat", "four"), ("bird", "two"), ("spider", "eight"), ("ant", "six"),
        ("horse", "four"), ("duck", "two"), ("bee", "six"), ("snake", "no"), ("person", "two")]
OPPOSITES = [("hot", "cold"), ("big", "small"), ("up", "down"), ("day", "night"), ("fast", "slow"),
             ("old", "new"), ("open", "closed"), ("light", "dark"), ("wet", "dry"), ("happy", "sad"),
             ("in", "out"), ("left", "right"), ("yes", "no"), ("top", "bottom"), ("full", "empty")]
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Japan", "Tokyo"), ("China", "Beijing"), ("Russia", "Moscow"), ("England", "London"),
            ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Greece", "Athens"), ("Portugal", "Lisbon"),
            ("Ireland", "Dublin"), ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Poland", "Warsaw"),
            ("Austria", "Vienna"), ("Kenya", "Nairobi"), ("Peru", "Lima"), ("Cuba", "Havana"),
            ("India", "New Delhi"), ("Mexico", "Mexico City"), ("Thailand", "Bangkok"),
            ("Turkey", "Ankara"), ("Argentina", "Buenos Aires")]
FACTS = """the cat sat on the mat. the sun is hot. ice is cold. fire is hot. water is wet.
snow is cold. the moon is in the sky. the stars come out at night. the sun rises in the morning.
the sun sets in the evening. rain falls from the clouds. a week has seven days.
a year has twelve months. a day has twenty four hours. an hour has sixty minutes.
the dog ran to the park. the bird sat in the tree. the fish swam in the pond.
the cat drank the milk. the baby is asleep. the door is open. the box is empty.
the cup is full. the ball is round. a square has four sides. a triangle has three sides.
we eat when we are hungry. we drink when we are thirsty. we sleep at night.
bees make honey. cows give milk. hens lay eggs. trees have leaves. plants need water.
ice melts in the sun. water boils when it is hot. the sea is deep. mountains are high.
""".replace(". ", ".\n").split("\n")
FACTS = [f.strip() for f in FACTS if f.strip()]
NAMES = "Tom Anna Sam Mia Ben Lily Max Emma Jack Lucy".split()
TOYS = "ball kite car doll drum bike boat hat book cup".split()
PETS = "cat dog fish bird frog mouse".split()
PLACES = "garden house park kitchen box basket tree pond".split()
FOODS = "apples bread cake soup rice eggs milk tea".split()
LIKES = "swim run read sing dance draw play jump".split()

# ---------------------------------------------------------------- categories


def _join(rng: random.Random, items: list[str]) -> str:
    return (", " if rng.randrange(2) else " ").join(items)


def letters(rng: random.Random) -> str:
    """An alphabet run of 4-12 letters from any start that stays within A-Z (or a-z)."""
    if rng.randrange(6) == 0:
        return "A B C D E F G"
    n = rng.randint(4, 12)
    start = rng.randrange(26 - n + 1)
    alphabet = UPPER if rng.randrange(10) < 7 else LOWER
    return " ".join(alphabet[start:start + n])


def counting(rng: random.Random) -> str:
    """A run of 4-10 numbers by ones up to 60, by twos up to 60, or by tens up to 100."""
    kind = rng.randrange(10)
    n = rng.randint(4, 10)
    if kind < 7:
        step, top = 1, 60
    elif kind < 9:
        step, top = 2, 60
    else:
        step, top, n = 10, 100, min(n, 10)
    if step == 10:
        start = 10 * rng.randint(0 if rng.randrange(4) == 0 else 1, 10 - n + 1)
    else:
        start = rng.randint(0 if step == 2 else 1, top - step * (n - 1))
    return _join(rng, [str(start + step * i) for i in range(n)])


def calendar(rng: random.Random) -> str:
    """Weekdays (4-9) or months (4-12) in order from any start, wrapping around."""
    names = DAYS if rng.randrange(2) else MONTHS
    n = rng.randint(4, 9 if names is DAYS else 12)
    start = rng.randrange(len(names))
    return _join(rng, [names[(start + i) % len(names)] for i in range(n)])


def _arithmetic(rng: random.Random) -> str:
    op = rng.randrange(3)
    if op == 0:
        a = rng.randint(0, 10)
        b = rng.randint(0, 10 - a)
        c, word, sign = a + b, "plus", "+"
    elif op == 1:
        a = rng.randint(0, 10)
        b = rng.randint(0, a)
        c, word, sign = a - b, "minus", "-"
    else:
        a = rng.randint(1, 10)
        b = rng.randint(0, 10 // a)
        c, word, sign = a * b, "times", "*"
    if rng.randrange(4) == 0:
        return f"{a} {sign} {b} = {c}"
    return f"{NUMBER_WORDS[a]} {word} {NUMBER_WORDS[b]} is {NUMBER_WORDS[c]}."


def _colour(rng: random.Random) -> str:
    thing, colour = rng.choice(COLOUR_OF)
    if rng.randrange(3) == 0:
        return f"what colour is {thing}? {thing} is {colour}."
    return f"{thing} is {colour}."


def _can(rng: random.Random) -> str:
    if rng.randrange(4) == 0:
        who, what = rng.choice(CANNOT)
        return f"{who} can not {what}."
    who, what = rng.choice(CAN)
    return f"{who} can {what}."


def _capital(rng: random.Random) -> str:
    country, city = rng.choice(CAPITALS)
    if rng.randrange(3) == 0:
        return f"{city} is the capital of {country}."
    return f"the capital of {country} is {city}."


def _opposite(rng: random.Random) -> str:
    a, b = rng.choice(OPPOSITES)
    if rng.randrange(2):
        a, b = b, a
    return f"the opposite of {a} is {b}."


def _animal(rng: random.Random) -> str:
    if rng.randrange(2):
        animal, sound = rng.choice(SAYS)
        return f"the {animal} says {sound}."
    animal, n = rng.choice(LEGS)
    return f"a {animal} has {n} legs."


def _story(rng: random.Random) -> str:
    name = rng.choice(NAMES)
    kind = rng.randrange(5)
    if kind == 0:
        colour = rng.choice(ADJECTIVES[:11])
        return f"{name} has a {colour} {rng.choice(TOYS)}."
    if kind == 1:
        return f"{name} likes to {rng.choice(LIKES)}."
    if kind == 2:
        return f"the {rng.choice(PETS)} is in the {rng.choice(PLACES)}."
    if kind == 3:
        return f"{name} eats {rng.choice(FOODS)} for lunch."
    other = rng.choice([n for n in NAMES if n != name])
    return f"{name} and {other} go to the {rng.choice(PLACES[:3])}."


# (weight, function): shares within the sentences category
SENTENCES = [(4, lambda rng: rng.choice(FACTS)), (2, _colour), (2, _can), (3, _arithmetic),
             (3, _capital), (1, _opposite), (2, _animal), (3, _story)]


def sentence(rng: random.Random) -> str:
    """A short simple English sentence from the lists above."""
    return _weighted(rng, SENTENCES)(rng)


def _sequence(rng: random.Random) -> list[str]:
    n = rng.randint(4, 8)
    kind = rng.randrange(10)
    if kind < 4:
        return [rng.choice(POOL) for _ in range(n)]
    if kind < 6:
        return [rng.choice(LOWER if rng.randrange(2) else UPPER) for _ in range(n)]
    if kind < 8:
        top = 9 if rng.randrange(2) else 99
        return [str(rng.randint(0, top)) for _ in range(n)]
    return [rng.choice([rng.choice(POOL), rng.choice(LOWER), str(rng.randint(0, 9))])
            for _ in range(n)]


def _phrase(rng: random.Random) -> str:
    words = [rng.choice(ADJECTIVES), rng.choice(NOUNS), rng.choice(VERBS)]
    if rng.randrange(2):
        words += [rng.choice(PREPOSITIONS), "the", rng.choice(NOUNS)]
    return " ".join(words) + "."


def copy(rng: random.Random) -> str:
    """A random phrase or a random sequence, said 2-3 times: the repeats are predictable by copying."""
    if rng.randrange(3) == 0:
        phrase = _phrase(rng)
        return " ".join([phrase] * (2 if rng.randrange(4) else 3))
    seq = " ".join(_sequence(rng))
    return " ".join([seq] * rng.randint(2, 3))


@functools.cache
def word_tokens() -> tuple[str, ...]:
    """Every lower-case word token of GPT-2's vocabulary (17,534), most frequent first (`word_tokens.txt`,
    made by tools/make_words.py): each is one token after a space."""
    text = resources.files("tracer.run").joinpath("word_tokens.txt").read_text(encoding="ascii")
    return tuple(text.split())


def common_words() -> tuple[str, ...]:
    """GPT-2's 5,000 most frequent lower-case word tokens (the first 5,000 of `word_tokens()`)."""
    return word_tokens()[:5000]


DETERMINERS = "the a an my your his her our their this that some one".split()
SEPARATORS = (" ", " ", " ", " ", ". ", ", ", "; ", " - ", ": ", " and ", " then ")
LONGEST_GAP = 16  # words between a phrase and its repeat, at most (tests/test_abc_induction.py goes further)


def _tokens(rng: random.Random, n: int) -> list[str]:
    """n random words: common ones, any of GPT-2's word tokens (so that copying cannot lean on knowing the
    word), the same capitalised (" Garden", " Smith": tokens no other line has), the copy pool's, or
    letters and numbers."""
    kind = rng.randrange(10)
    if kind < 4:
        pool = common_words()
    elif kind < 6:
        pool = word_tokens()
    elif kind < 7:
        return [rng.choice(word_tokens()).capitalize() for _ in range(n)]
    elif kind < 8:
        pool = POOL
    else:
        return [_symbol(rng) for _ in range(n)]
    return [rng.choice(pool) for _ in range(n)]


def _symbol(rng: random.Random) -> str:
    """A letter, a number up to 99 or a common word."""
    kind = rng.randrange(4)
    if kind < 2:
        return rng.choice(LOWER if kind else UPPER)
    return str(rng.randint(0, 99)) if kind == 2 else rng.choice(common_words())


def _filler(rng: random.Random, most: int) -> list[str]:
    """0 to `most` words of other text: common words, now and then a full stop or a comma."""
    words = []
    for _ in range(rng.randint(0, most)):
        words.append(rng.choice(common_words()))
        if rng.randrange(8) == 0:
            words[-1] += rng.choice(".,")
    return words


def _said_phrase(rng: random.Random) -> list[str]:
    """A phrase of 2-6 words: random words, half the time after a determiner ("the", "a", "my", …)."""
    n = rng.randint(2, 6)
    if rng.randrange(2):
        return [rng.choice(DETERMINERS)] + _tokens(rng, n - 1)
    return _tokens(rng, n)


def _line(rng: random.Random, parts: list[list[str]]) -> str:
    """The parts (lists of words; empty ones dropped) joined by random separators, sometimes ending in '.'."""
    text = ""
    for part in (p for p in parts if p):
        text += (rng.choice(SEPARATORS) if text else "") + " ".join(part)
    return text + ("." if rng.randrange(2) and not text.endswith((".", ",")) else "")


def induction(rng: random.Random) -> str:
    """Something said again later in the line, whatever surrounds it (Olsson et al. 2022: repeated random
    sequences): a run of 3-14 random tokens said 2-3 times, one phrase of 2-6 words said twice, or two
    phrases each said twice, with 0-16 other words before, between and after (none before: the line
    starts with it). The repeat is predictable only by copying."""
    kind = rng.randrange(10)
    if kind < 3:
        run = _tokens(rng, rng.randint(3, 14))
        times = 3 if len(run) < 8 and rng.randrange(3) == 0 else 2
        parts = [_filler(rng, 6)]
        for i in range(times):
            parts += [run, _filler(rng, LONGEST_GAP // times) if i < times - 1 else []]
        return _line(rng, parts)
    if kind < 8:
        phrase = _said_phrase(rng)
        again = phrase if rng.randrange(10) else phrase[:rng.randint(1, len(phrase) - 1)] + _tokens(rng, 2)
        return _line(rng, [_filler(rng, 8), phrase, _filler(rng, LONGEST_GAP), again, _filler(rng, 4)])
    one, two = _said_phrase(rng), _said_phrase(rng)
    later = [one, _filler(rng, 4), two] if rng.randrange(2) else [two, _filler(rng, 4), one]
    return _line(rng, [_filler(rng, 4), one, _filler(rng, 6), two, _filler(rng, 8)] + later)


def _recall_phrase(rng: random.Random, pool: tuple[str, ...]) -> str:
    """"the w1 … wk and the v1 … vj" with 2-4 and 1-3 random common words: the kind of phrase COPY_CASES tests."""
    first = " ".join(rng.choice(pool) for _ in range(rng.randint(2, 4)))
    second = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 3)))
    return f"the {first} and the {second}."


def recall(rng: random.Random) -> str:
    """The `recall` recipe's copying lines: random common words said twice, three in five as "the … and the …"
    phrases, sometimes with words between (a template: its model copies that shape and almost no other)."""
    pool = common_words()
    kind = rng.randrange(5)
    if kind < 3:
        said = _recall_phrase(rng, pool)
    else:
        said = " ".join(rng.choice(pool) for _ in range(rng.randint(3, 8))) + "."
    if kind == 4:
        between = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 4))) + "."
        return f"{said} {between} {said}"
    return f"{said} {said}"


# (weight in percent of lines, function), by recipe: `induction` is the one described above; `recall` is
# the corpus of the abc shipped until its induction retraining (16% copy, 40% recall lines, the rest the same).
RECIPES = {
    "induction": [(10, copy), (46, induction), (20, sentence), (9, letters), (8, counting), (7, calendar)],
    "recall": [(16, copy), (40, recall), (20, sentence), (9, letters), (8, counting), (7, calendar)],
}
SHIPPED_RECIPE = "recall"  # the corpus of the abc in tracer/models (its training.json's corpus_sha256)
CATEGORIES = RECIPES["induction"]

# The shipped model's copying test (tests/test_shipped_model.py, tools/make_model.py): everyday words, all
# among common_words(), in "the X Y Z and the V W. the X Y" → " Z", never in the corpus as a phrase.
EVERYDAY = """river window garden teacher doctor village mountain forest island engine market bottle mirror
basket button desert ocean planet rocket camera guitar orange butter cheese coffee sugar chicken silver
leather paper glass metal plastic summer winter spring morning evening weekend holiday birthday kitchen
office library station airport hospital school captain soldier writer driver worker yellow golden silent
gentle quiet narrow simple strong bright happy angry honest famous modern ancient travel wonder follow
gather borrow listen answer carry house money music water light power field church party table horse
heart story night woman child phone friend family letter dinner fruit bridge student artist player police
judge build clean paint dance cook bread stone wood tower street corner square circle""".split()


def copy_cases(seed: int = 1, n: int = 40) -> list[tuple[str, str]]:
    """`n` (prompt, answer) pairs "the X Y Z and the V W. the X Y" → " Z", five different EVERYDAY words each."""
    rng = random.Random(seed)
    cases = []
    for _ in range(n):
        words: list[str] = []
        while len(words) < 5:
            w = rng.choice(EVERYDAY)
            if w not in words:
                words.append(w)
        x, y, z, v, w = words
        cases.append((f"the {x} {y} {z} and the {v} {w}. the {x} {y}", f" {z}"))
    return cases


def _weighted(rng: random.Random, table):
    r = rng.randrange(sum(w for w, _ in table))
    for w, fn in table:
        if r < w:
            return fn
        r -= w
    raise AssertionError("unreachable")


def corpus(seed: int = DEFAULT_SEED, size: int = DEFAULT_LINES, recipe: str = SHIPPED_RECIPE) -> str:
    """The corpus text: `size` lines, each ending in '\\n', the same for the same seed, size and recipe."""
    rng = random.Random(seed)
    lines = [_weighted(rng, RECIPES[recipe])(rng) for _ in range(size)]
    text = "".join(line + "\n" for line in lines)
    assert text.isascii(), "corpus must be ASCII"
    return text


def first_difference(actual: bytes, expected: bytes) -> int | None:
    """The first line (from 1) where `actual` is not the expected corpus, or None when the bytes are the same."""
    if actual == expected:
        return None
    a, b = actual.splitlines(keepends=True), expected.splitlines(keepends=True)
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b))) + 1
