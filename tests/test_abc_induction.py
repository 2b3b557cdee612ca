"""The shipped model copies a repeated phrase whatever surrounds it: induction, not a template.

A held-out evaluation with its own generator: the shapes (the sentences around a phrase), the words and
the gap lengths below are this file's, not the corpus's (`tracer.run.corpus` is never imported for them;
a test checks that no case's first sentence is in the corpus). A case is a prompt in which a phrase is
said, then said again and cut off: the answer is the phrase's next token, and the case counts as copied
when the model's top-1 next token is that token. The bar: at least 80% copied over all
shapes, no shape below 60%. The other lessons still hold (G after A-F, counting, weekdays, months from
any start, the logit lens's G appearing late: tests/test_shipped_model.py), and knocking out the heads
training.json names as induction heads breaks copying on these shapes, while as many other heads do not.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

import tracer

ROOT = Path(__file__).resolve().parent.parent
TRAINING = json.loads((ROOT / "tracer" / "models" / "abc" / "training.json").read_text(encoding="utf-8"))

# This file's own words: everyday nouns, adjectives and verbs; some are two or three GPT-2 tokens
# (" walrus" is " wal" + "rus"), and those are in no word list of the corpus.
NOUNS = """lizard kettle violin pebble lantern walrus carpet tunnel saddle pillow blanket ladder bucket hammer
needle wagon barrel candle marble feather helmet parrot rabbit turtle donkey monkey spider beetle tomato potato
onion pepper cherry peach melon noodle pocket jacket ribbon button sponge broom shovel trumpet piano compass
anchor harbor meadow valley canyon cottage castle palace temple puppet goose penguin giraffe zebra camel badger
squirrel oyster lobster cabbage garlic""".split()
ADJECTIVES = """purple crimson silver wooden rusty dusty shiny fuzzy sleepy hungry clever noisy gentle tiny giant
ancient frozen golden muddy curly striped spotted empty heavy secret hidden broken lonely velvet bitter""".split()
VERBS = "eat sing dance jump swim climb sleep laugh whistle shout wave hide wait crawl bark knock smile sneeze giggle snore".split()
# Words between the two sayings, in sentences of their own.
FILLER = """it was raining all day and nobody wanted to go outside so we stayed in the kitchen and talked
about the summer when my uncle drove us to the coast in his old car with the windows down while the radio
played songs we still remember""".split()
OPENERS = ["yesterday", "one morning", "after school", "last winter", "on the way home"]


def _distinct(rng: random.Random, pools: list[list[str]]) -> list[str]:
    """One word from each pool, no word twice."""
    out: list[str] = []
    for pool in pools:
        w = rng.choice(pool)
        while w in out:
            w = rng.choice(pool)
        out.append(w)
    return out


def _any_word(rng: random.Random, n: int) -> list[str]:
    return _distinct(rng, [NOUNS + ADJECTIVES] * n)


def three_words_between(rng):
    """'the A B C and the D E F. the A B' with three words after the second 'the' (the recall recipe's
    template has at most three words there, and its model copied almost none of these)."""
    a, b, c, d, e, f = _any_word(rng, 6)
    return f"the {a} {b} {c} and the {d} {e} {f}. the {a} {b}", f" {c}"


def no_article(rng):
    """'A B C, D E. A B': no article anywhere."""
    a, b, c, d, e = _any_word(rng, 5)
    return f"{a} {b} {c}, {d} {e}. {a} {b}", f" {c}"


def inside_a_sentence(rng):
    """'i saw a A B C near the D. then i saw a A B': the phrase inside a sentence said twice."""
    a, b, c, d = _any_word(rng, 4)
    return f"i saw a {a} {b} {c} near the {d}. then i saw a {a} {b}", f" {c}"


def after_we_said(rng):
    """'we said the A B C D and then we went home. later we said the A B': after 'we said'."""
    a, b, c, d = _any_word(rng, 4)
    return f"we said the {a} {b} {c} {d} and then we went home. later we said the {a} {b}", f" {c}"


def what_it_did(rng):
    """'we saw a purple lizard eat. then a purple lizard' → ' eat': an adjective, a noun, then a verb."""
    adj, noun = _distinct(rng, [ADJECTIVES, NOUNS])
    verb = rng.choice(VERBS)
    opener = rng.choice(OPENERS)
    return f"{opener} we saw a {adj} {noun} {verb}. then a {adj} {noun}", f" {verb}"


def at_the_start(rng):
    """The phrase opens the prompt: 'A B C D is what the note said. nobody knew why. A B C'."""
    words = _any_word(rng, rng.randint(3, 5))
    cut = rng.randint(2, len(words) - 1)
    return (f"{' '.join(words)} is what the note said. nobody knew why. {' '.join(words[:cut])}",
            f" {words[cut]}")


def long_gap(rng):
    """A phrase of 3-5 words, 17-26 words of other sentences (longer than any gap of the corpus), the phrase again."""
    words = _any_word(rng, rng.randint(3, 5))
    gap = rng.randint(17, 26)
    start = rng.randrange(len(FILLER) - gap)
    cut = rng.randint(1, len(words) - 1)
    return (f"my {' '.join(words)} was in the box. {' '.join(FILLER[start:start + gap])}. my {' '.join(words[:cut])}",
            f" {words[cut]}")


def six_words(rng):
    """A phrase of six words, cut after three to five of them."""
    words = _any_word(rng, 6)
    cut = rng.randint(3, 5)
    opener = rng.choice(OPENERS)
    return (f"{opener} she wrote down {' '.join(words)} on a card. then she read out {' '.join(words[:cut])}",
            f" {words[cut]}")


def two_words(rng):
    """A phrase of two words in a longer sentence: 'on monday the A B came late and the C stayed. on tuesday the A'."""
    a, b, c = _any_word(rng, 3)
    return f"on monday the {a} {b} came late and the {c} stayed. on tuesday the {a}", f" {b}"


def random_tokens(rng, vocab: list[int]):
    """Olsson et al.'s test: 6-10 random GPT-2 tokens, then the same tokens again, cut off (token ids, not text)."""
    n = rng.randint(6, 10)
    seq = rng.sample(vocab, n)
    cut = rng.randint(2, n - 1)
    return seq + seq[:cut], seq[cut]


SHAPES = [three_words_between, no_article, inside_a_sentence, after_we_said, what_it_did, at_the_start, long_gap,
          six_words, two_words]
CASES = 40  # per shape


def random_vocab(tokenizer) -> list[int]:
    """Token ids 1,000-20,000 of GPT-2's vocabulary that are a space and 3-10 ASCII letters, either case: a
    rule of this file's (the corpus's words are lower-case; these include ' Smith', ' Paris', ' Mr')."""
    import re

    return [i for i in range(1000, 20000) if re.fullmatch(r" [A-Za-z]{3,10}", tokenizer.token_str(i))]


def cases(tokenizer, seed: int = 40) -> dict[str, list[tuple[list[int], int]]]:
    """Per shape, CASES (prompt ids, answer id) pairs. Each answer is the token after the prompt's last
    token's one earlier occurrence: the copy (a draw whose last token occurs more than once is drawn again)."""
    out = {}
    for k, shape in enumerate(SHAPES):
        rng = random.Random(seed * 100 + k)
        out[shape.__name__] = []
        while len(out[shape.__name__]) < CASES:
            prompt, answer = shape(rng)
            ids = tokenizer.encode(prompt)
            whole = tokenizer.encode(prompt + answer)
            assert whole[:len(ids)] == ids, (prompt, answer)
            if ids.count(ids[-1]) == 2:  # not when the last token is also elsewhere (" melon" ends in "on", as "on monday" starts)
                out[shape.__name__].append((ids, whole[len(ids)]))
    vocab = random_vocab(tokenizer)
    rng = random.Random(seed * 100 + len(SHAPES))
    out["random_tokens"] = [random_tokens(rng, vocab) for _ in range(CASES)]
    return out


def copied(model, shape_cases, hooks=None) -> int:
    """How many cases the model's top-1 next token answers."""
    got = 0
    for ids, answer in shape_cases:
        logits = model.run(ids, names=["logits"], hooks=hooks)["logits"][-1]  # [d_vocab]
        got += int(np.argmax(logits)) == answer
    return got


@pytest.fixture(scope="module")
def abc():
    return tracer.load("abc")


@pytest.fixture(scope="module")
def held_out(abc):
    return cases(abc.tokenizer)


def test_each_case_is_a_copy_from_the_prompt(held_out):
    """The answer follows the last token's one earlier occurrence, and every prompt fits abc's context."""
    assert len(held_out) == len(SHAPES) + 1
    for shape, these in held_out.items():
        assert len(these) == CASES and len({tuple(ids) for ids, _ in these}) > CASES // 2, shape
        for ids, answer in these:
            last = ids[-1]
            earlier = [i for i in range(len(ids) - 1) if ids[i] == last]
            assert len(earlier) == 1 and ids[earlier[0] + 1] == answer, (shape, ids)
            assert len(ids) < 64


def test_the_shapes_are_not_the_corpus_s():
    """No case's first sentence (up to its first full stop, from the first three words on) is in the corpus
    the shipped model learned from, nor in the `induction` recipe's."""
    from tracer.run.corpus import corpus

    text = "".join(corpus(recipe=r) for r in sorted({TRAINING.get("corpus_recipe", "recall"), "induction"}))
    for k, shape in enumerate(SHAPES):
        rng = random.Random(40 * 100 + k)
        for _ in range(CASES):
            prompt, _ = shape(rng)
            first = prompt.split(". ")[0]
            assert first not in text and " ".join(first.split()[:3]) + " " not in text, (shape.__name__, first)


# The abc trained on the `recall` recipe copies 3 of these 400 (a template, not induction); one trained on the
# `induction` recipe (tools/make_model.py) must pass. Strict: a recall model that passed would be news.
NOT_YET = pytest.mark.xfail(TRAINING.get("corpus_recipe", "recall") != "induction", strict=True,
                            reason="the shipped abc was trained on the recall recipe; tools/make_model.py retrains it")


@NOT_YET
def test_it_copies_phrases_of_every_held_out_shape(abc, held_out):
    """At least 80% copied over all shapes, no shape below 60%."""
    rates = {shape: copied(abc, these) / CASES for shape, these in held_out.items()}
    overall = float(np.mean(list(rates.values())))
    assert overall >= 0.8 and min(rates.values()) >= 0.6, (overall, rates)


@NOT_YET
def test_knocking_out_the_induction_heads_breaks_copying_on_these_shapes(abc, held_out):
    """The heads training.json names as induction heads (score ≥ ROLE_AT_LEAST) do the copying: of 10 cases a
    shape, at least 80% copied; without them (zeroed) at most half as many; without as many heads that are
    neither induction nor previous-token heads, at least three quarters as many."""
    from .test_shipped_model import knockout

    sample = [c for these in held_out.values() for c in these[:10]]
    clean, without, control = knockout(lambda hooks: copied(abc, sample, hooks))
    assert clean >= 0.8 * len(sample) and without <= clean / 2 and control >= 0.75 * clean, (clean, without, control)
