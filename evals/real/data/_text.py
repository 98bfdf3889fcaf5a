"""Synthetic English-like text for the real suite's data scripts (deterministic, no downloads).

The repositories train character- or word-level language models on text they would download
(tiny shakespeare, Penn Treebank); these stand-ins have the same shape: lines of lower-case words,
and for the play-like form speaker names, capitals and punctuation.
"""

from __future__ import annotations

import random

_VOCABULARY = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her one all we can their there been if more when will would who so no "
    "out up into do any time my than only other new some could these two may first then after well "
    "our way even good made over such like years me long down day great where much through man back "
    "must old before here how both little under most too upon king lord love heart night death blood "
    "crown sword friend father mother son daughter brother honour grace peace war fire field house "
    "hand eye eyes face tongue soul heaven earth sea sun moon star light dark fair sweet gentle noble "
    "true false hope fear shame joy grief tears speak hear see know think come go stay fly fall rise "
    "give take keep break make call tell bear hold live die sleep dream wake swear pray weep laugh"
)
WORDS = tuple(_VOCABULARY.split())

SPEAKERS = ("FIRST CITIZEN", "MENENIUS", "CORIOLANUS", "VOLUMNIA", "ROMEO", "JULIET", "NURSE",
            "KING HENRY", "GLOUCESTER", "QUEEN", "DUKE", "ISABELLA", "PROSPERO", "MIRANDA")


def words(n: int, seed: int) -> list[str]:
    """``n`` words drawn from a skewed (Zipf-like) distribution over ``WORDS``."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    return rng.choices(WORDS, weights=weights, k=n)


def plain_lines(n_lines: int, seed: int, min_words: int = 4, max_words: int = 20) -> str:
    """Penn Treebank-like text: one sentence of lower-case words a line, no punctuation."""
    rng = random.Random(seed)
    out = []
    for i in range(n_lines):
        out.append(" " + " ".join(words(rng.randint(min_words, max_words), seed * 100003 + i)) + " ")
    return "\n".join(out) + "\n"


def play(n_chars: int, seed: int) -> str:
    """Tiny-shakespeare-like text of about ``n_chars`` characters: speeches of a few lines each."""
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    i = 0
    while size < n_chars:
        lines = []
        for _ in range(rng.randint(1, 4)):
            line = " ".join(words(rng.randint(5, 11), seed * 7919 + i))
            i += 1
            lines.append(line[0].upper() + line[1:] + rng.choice((",", ".", ";", "!", "?", ":")))
        speech = f"{rng.choice(SPEAKERS)}:\n" + "\n".join(lines) + "\n\n"
        parts.append(speech)
        size += len(speech)
    return "".join(parts)
