"""A deterministic corpus of the tutorial's sentences: 一只 / 蓝色 / 怪兽 / 走进 / 森林.

Pure Python (no torch, no jieba): every sentence is produced already cut into words,
so the word list is the ground truth the tokenizer is checked against.

The grammar
-----------
One sentence is two clauses::

    SENTENCE  := CLAUSE1 。 CLAUSE2 。
    CLAUSE1   := QM COLOUR NOUN VERB PLACE              一只 蓝色 怪兽 走进 森林
    QM        := QUANTITY MEASURE  (one word)           一只 · 两条 · 三头 …
    CLAUSE2   := REF 在 PLACE POST ACTIVITY             它 在 森林 里 睡觉
               | REF 很 FEELING                         这只 怪兽 很 开心
    REF       := PRONOUN                                它 · 他 · 她 · 它们 · 他们 · 她们
               | 这 MEASURE NOUN  (singular; 这只 is one word)   这只 怪兽
               | 这些 NOUN        (plural)                         这些 怪兽

and every word that is not free depends on a word before it:

========================  ==============================  ===================================
word                      depends on                      rule
========================  ==============================  ===================================
MEASURE (in QM)           NOUN, 2 words later             each noun takes exactly one measure
                                                          word: 一只猫 · 一条鱼 · 一头牛 · 一匹马 ·
                                                          一位公主 · 一个机器人
VERB                      NOUN                            the noun's ways of moving (land: 走进 …,
                                                          water: 游进 …, air: 飞进 …)
PLACE                     VERB and NOUN                   the verb's kind (走进 森林 · 游进 大海 ·
                                                          飞上 天空) and the noun's zones (老虎 goes
                                                          to wild places: 森林; 猫 to town: 花园)
PRONOUN                   NOUN (3–4 words back),          它 (animals, things) / 他 / 她; +们 when
                          QUANTITY (6 words back)         the quantity is 两 or 三
这 MEASURE                NOUN and QUANTITY               这只 after 一只…怪兽; 这些 after 两只…
NOUN in REF               NOUN of clause 1                the same creature, repeated
PLACE in CLAUSE2          PLACE of clause 1               the same place, repeated
POST                      PLACE                           里 / 上 / 中 (森林里 · 山顶上 · 天空中)
========================  ==============================  ===================================

COLOUR, ACTIVITY and FEELING are free (uniform), and so is the choice between the
two CLAUSE2 forms and the two REF forms.

Splits
------
Each noun has two (colour, noun) pairs held out: one only in validation, one only in
test. The training split never contains a held-out pair, so a test sentence such as
一条紫色鱼… combines a colour and a noun the model has never seen together; choosing
the measure word right there needs the noun → measure-word dependency itself, not
a memorised phrase. `make_corpus(seed=…)` is fully deterministic.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .. import checks

__all__ = [
    "Creature",
    "Sentence",
    "Corpus",
    "COLOURS",
    "CREATURES",
    "MEASURES",
    "QUANTITIES",
    "MOVES",
    "PLACES",
    "places_for",
    "ACTIVITIES",
    "FEELINGS",
    "make_corpus",
    "make_sentence",
    "distinct_sentences",
    "log_prob",
    "all_words",
    "grammar",
    "scenes",
    "with_measure",
]


@dataclass(frozen=True)
class Creature:
    """A noun of the grammar: its measure word, its pronoun, the ways it moves, where it goes.

    moves  "land", "water", "air": which verbs it takes
    zones  "wild", "town": which places it goes to (森林 is wild, 花园 is town)
    """

    noun: str
    measure: str
    pronoun: str
    moves: tuple[str, ...]
    zones: tuple[str, ...]


QUANTITIES: dict[str, bool] = {"一": False, "两": True, "三": True}
"""Quantity word → whether it makes the subject plural (它 → 它们, 这只 → 这些)."""

QUANTITY_WEIGHTS = (2, 1, 1)
"""How often 一 / 两 / 三 are drawn: singular half of the time."""

MEASURES = ("只", "条", "头", "匹", "位", "个")

COLOURS = ("蓝色", "红色", "绿色", "黄色", "白色", "黑色", "紫色", "金色", "灰色", "粉色")

CREATURES: tuple[Creature, ...] = (
    Creature("猫", "只", "它", ("land",), ("town",)),
    Creature("兔子", "只", "它", ("land",), ("town", "wild")),
    Creature("怪兽", "只", "它", ("land",), ("wild",)),
    Creature("老虎", "只", "它", ("land",), ("wild",)),
    Creature("猴子", "只", "它", ("land",), ("wild",)),
    Creature("狐狸", "只", "它", ("land",), ("wild",)),
    Creature("鸭子", "只", "它", ("land", "water"), ("town",)),
    Creature("小鸟", "只", "它", ("air",), ("town", "wild")),
    Creature("蝴蝶", "只", "它", ("air",), ("town",)),
    Creature("鱼", "条", "它", ("water",), ("town", "wild")),
    Creature("金鱼", "条", "它", ("water",), ("town",)),
    Creature("蛇", "条", "它", ("land", "water"), ("wild",)),
    Creature("龙", "条", "它", ("air", "water"), ("wild",)),
    Creature("牛", "头", "它", ("land",), ("town",)),
    Creature("大象", "头", "它", ("land", "water"), ("wild",)),
    Creature("猪", "头", "它", ("land",), ("town",)),
    Creature("鲸鱼", "头", "它", ("water",), ("wild",)),
    Creature("马", "匹", "它", ("land",), ("town",)),
    Creature("斑马", "匹", "它", ("land",), ("wild",)),
    Creature("骆驼", "匹", "它", ("land",), ("wild",)),
    Creature("狼", "匹", "它", ("land",), ("wild",)),
    Creature("公主", "位", "她", ("land",), ("town",)),
    Creature("仙女", "位", "她", ("land", "air"), ("town", "wild")),
    Creature("国王", "位", "他", ("land",), ("town",)),
    Creature("骑士", "位", "他", ("land",), ("town", "wild")),
    Creature("机器人", "个", "它", ("land",), ("town",)),
    Creature("雪人", "个", "它", ("land",), ("town", "wild")),
    Creature("巨人", "个", "他", ("land", "water"), ("wild",)),
)

MOVES: dict[str, tuple[str, ...]] = {
    "land": ("走进", "跑进", "溜进", "冲进"),
    "water": ("游进", "游过", "潜入"),
    "air": ("飞进", "飞过", "飞上"),
}
"""Way of moving → the verbs that express it."""

PLACES: dict[str, dict[str, tuple[str, str]]] = {
    "land": {
        "森林": ("里", "wild"),
        "山洞": ("里", "wild"),
        "草原": ("上", "wild"),
        "城堡": ("里", "town"),
        "村庄": ("里", "town"),
        "花园": ("里", "town"),
    },
    "water": {"大海": ("里", "wild"), "湖泊": ("里", "wild"), "小河": ("里", "town"), "池塘": ("里", "town")},
    "air": {"天空": ("中", "wild"), "云层": ("里", "wild"), "彩虹": ("上", "town"), "屋顶": ("上", "town")},
}
"""Way of moving → place → (its postposition in clause 2, its zone): 森林里, 草原上, 天空中."""

ACTIVITIES = ("睡觉", "休息", "玩耍", "唱歌", "跳舞")
FEELINGS = ("开心", "害怕", "饥饿", "疲惫", "兴奋")


@dataclass(frozen=True)
class Sentence:
    """One corpus sentence, already cut into words.

    words  the words, in order (一只, 蓝色, 怪兽, 走进, 森林, 。, …)
    roles  one role per word: "qm", "colour", "noun", "verb", "place", "punct", "ref",
           "ref_measure", "ref_noun", "zai", "place2", "post", "activity", "hen", "feeling"
    """

    words: tuple[str, ...]
    roles: tuple[str, ...]
    quantity: str
    creature: Creature
    colour: str
    verb: str
    place: str

    @property
    def text(self) -> str:
        """The sentence as plain text: 一只蓝色怪兽走进森林。它在森林里睡觉。"""
        return "".join(self.words)

    def index(self, role: str) -> int:
        """Position of the first word with this role (ValueError if none)."""
        try:
            return self.roles.index(role)
        except ValueError:
            raise ValueError(f"sentence {self.text!r} has no word with role {role!r}; roles: {self.roles}") from None


@dataclass(frozen=True)
class Corpus:
    """Train / validation / test sentences and the (colour, noun) pairs held out of training."""

    train: tuple[Sentence, ...]
    val: tuple[Sentence, ...]
    test: tuple[Sentence, ...]
    val_pairs: frozenset[tuple[str, str]]
    test_pairs: frozenset[tuple[str, str]]
    seed: int


def places_for(creature: Creature, kind: str) -> list[str]:
    """The places of this way of moving that lie in one of the creature's zones, sorted."""
    return sorted(p for p, (_, zone) in PLACES[kind].items() if zone in creature.zones)


def make_sentence(rng: random.Random, creature: Creature, colour: str) -> Sentence:
    """Draw one sentence about `creature` in `colour`; everything else comes from `rng`."""
    quantity = rng.choices(list(QUANTITIES), weights=QUANTITY_WEIGHTS)[0]
    plural = QUANTITIES[quantity]
    kind = rng.choice(creature.moves)
    verb = rng.choice(MOVES[kind])
    place = rng.choice(places_for(creature, kind))
    words = [quantity + creature.measure, colour, creature.noun, verb, place, "。"]
    roles = ["qm", "colour", "noun", "verb", "place", "punct"]
    if rng.random() < 0.5:
        words.append(creature.pronoun + ("们" if plural else ""))
        roles.append("ref")
    elif plural:
        words += ["这些", creature.noun]
        roles += ["ref_measure", "ref_noun"]
    else:
        words += ["这" + creature.measure, creature.noun]
        roles += ["ref_measure", "ref_noun"]
    if rng.random() < 0.5:
        words += ["在", place, PLACES[kind][place][0], rng.choice(ACTIVITIES)]
        roles += ["zai", "place2", "post", "activity"]
    else:
        words += ["很", rng.choice(FEELINGS)]
        roles += ["hen", "feeling"]
    words.append("。")
    roles.append("punct")
    return Sentence(tuple(words), tuple(roles), quantity, creature, colour, verb, place)


def _held_out_pairs(rng: random.Random) -> tuple[frozenset, frozenset]:
    """For each noun, one colour for validation and another for test."""
    val, test = set(), set()
    for creature in CREATURES:
        v, t = rng.sample(COLOURS, 2)
        val.add((v, creature.noun))
        test.add((t, creature.noun))
    return frozenset(val), frozenset(test)


def distinct_sentences(creature: Creature) -> int:
    """How many different sentences the grammar makes about one (colour, creature) pair."""
    clause1 = sum(len(MOVES[k]) * len(places_for(creature, k)) for k in creature.moves)
    return len(QUANTITIES) * clause1 * 2 * (len(ACTIVITIES) + len(FEELINGS))


def _draw(
    rng: random.Random, pairs: list[tuple[str, Creature]], n: int, seen: set[str], split: str
) -> tuple[Sentence, ...]:
    """n sentences not in `seen` (which is updated), each over a pair drawn from `pairs`."""
    room = sum(distinct_sentences(c) for _, c in pairs)
    if n > room // 2:
        raise ValueError(
            f"the {split} split asks for {n} distinct sentences, but its {len(pairs)} (colour, noun) "
            f"pairs make only {room}; ask for at most {room // 2}"
        )
    out: list[Sentence] = []
    while len(out) < n:  # at most half the space is drawn, so a fresh sentence takes < 2 draws on average
        colour, creature = rng.choice(pairs)
        s = make_sentence(rng, creature, colour)
        if s.text not in seen:
            seen.add(s.text)
            out.append(s)
    return tuple(out)


def make_corpus(n_train: int = 20000, n_val: int = 1000, n_test: int = 1000, seed: int = 0) -> Corpus:
    """Distinct sentences, split so that validation and test use only held-out pairs.

    n_train, n_val, n_test   sentences in each split (ints >= 0)
    seed                     everything (held-out pairs, sentences, order) follows from it
    """
    for name, n in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test), ("seed", seed)):
        checks.integer(name, n, low=0)
    rng = random.Random(seed)
    val_pairs, test_pairs = _held_out_pairs(rng)
    all_pairs = [(c, k) for k in CREATURES for c in COLOURS]
    train_pool = [p for p in all_pairs if (p[0], p[1].noun) not in val_pairs | test_pairs]
    val_pool = [p for p in all_pairs if (p[0], p[1].noun) in val_pairs]
    test_pool = [p for p in all_pairs if (p[0], p[1].noun) in test_pairs]
    seen: set[str] = set()
    train = _draw(rng, train_pool, n_train, seen, "train")
    val = _draw(rng, val_pool, n_val, seen, "validation")
    test = _draw(rng, test_pool, n_test, seen, "test")
    return Corpus(train, val, test, val_pairs, test_pairs, seed)


def with_measure(sentence: Sentence, measure: str) -> tuple[str, ...]:
    """The sentence's words with the measure word of clause 1 replaced: 一只… → 一条…"""
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {MEASURES}, got {measure!r}")
    i = sentence.index("qm")
    return sentence.words[:i] + (sentence.quantity + measure,) + sentence.words[i + 1 :]


def log_prob(sentence: Sentence) -> float:
    """Natural log of the sentence's probability under the grammar, every (colour, noun) pair allowed.

    This is what a model that learned the grammar perfectly, and did not learn which pairs
    the training split happens to lack, would assign: -log_prob / (words + 1 for <eos>) is the
    floor of the per-token cross-entropy.
    """
    c = sentence.creature
    kind = next(k for k, verbs in MOVES.items() if sentence.verb in verbs)
    weight = QUANTITY_WEIGHTS[list(QUANTITIES).index(sentence.quantity)] / sum(QUANTITY_WEIGHTS)
    p = weight / (len(COLOURS) * len(CREATURES))
    p /= len(c.moves) * len(MOVES[kind]) * len(places_for(c, kind))
    p /= 2 * 2 * (len(ACTIVITIES) if "activity" in sentence.roles else len(FEELINGS))
    return math.log(p)


def all_words() -> list[str]:
    """Every word the grammar can produce, sorted: the tokenizer's user dictionary."""
    words = {q + m for q in QUANTITIES for m in MEASURES}
    words |= {"这" + m for m in MEASURES} | {"这些", "在", "很", "。"}
    words |= set(COLOURS) | set(ACTIVITIES) | set(FEELINGS)
    for c in CREATURES:
        words |= {c.noun, c.pronoun, c.pronoun + "们"}
    for kind, verbs in MOVES.items():
        words |= set(verbs) | set(PLACES[kind]) | {post for post, _ in PLACES[kind].values()}
    return sorted(words)


def grammar() -> dict[str, str]:
    """{word: role}: the grammar's words by the role they play in its sentences ("qm" 一只, "colour" 蓝色, "noun"
    怪兽, "verb" 走进, "place" 森林, "ref" 它 / 它们, "ref_measure" 这只 / 这些, "punct" 。): the data the explainer's
    tutorial relations read (`explainer.analysis.relations.links`)."""
    out = {q + m: "qm" for q in QUANTITIES for m in MEASURES}
    out |= dict.fromkeys(COLOURS, "colour")
    out |= {c.noun: "noun" for c in CREATURES}
    out |= {v: "verb" for verbs in MOVES.values() for v in verbs}
    out |= {p: "place" for places in PLACES.values() for p in places}
    out |= {c.pronoun + s: "ref" for c in CREATURES for s in ("", "们")}
    out |= {"这" + m: "ref_measure" for m in MEASURES} | {"这些": "ref_measure", "。": "punct"}
    return out


def scenes() -> tuple[dict[str, tuple[str, ...]], ...]:
    """One scene per creature, {role: words}: its measure word, a colour, the verbs of its first way of moving and the
    places of that way in its zones (一只 蓝色 猫 走进 城堡, 两只 红色 兔子 …): the words the explainer's contrast
    sentences put in place of a text's words of each role (`explainer.analysis.word_relations.contrasts`)."""
    out = []
    for i, c in enumerate(CREATURES):
        kind = c.moves[0]
        out.append(
            {
                "qm": ("一两三"[i % 3] + c.measure,),
                "colour": (COLOURS[i % len(COLOURS)],),
                "noun": (c.noun,),
                "verb": MOVES[kind],
                "place": tuple(places_for(c, kind)),
            }
        )
    return tuple(out)
