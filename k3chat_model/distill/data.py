"""Distillation text: ChatML-rendered chat corpora and teacher-generated assistant replies.

Sources (research/default-model.md §2), read straight from their wheels, never committed:
- chitchat-dataset (MIT): 7,168 human conversations; shuffled with a fixed seed, the last
  `HELDOUT_CONVS` are held out (half for the gate's chat set, half for layer ranking);
- chatterbot-corpus (BSD-3): English questions, used as prompts for teacher replies;
- templated instructions over topic lists, also prompts for teacher replies.

Every sequence carries a mask that is 1 on tokens worth predicting: everything except the
fixed default system prompt (it would inflate agreement), or only the assistant reply.
"""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path

import torch

from ..errors import CheckpointError

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
HELDOUT_CONVS = 300
SEED = 0

TOPICS = [
    "photosynthesis",
    "the water cycle",
    "volcanoes",
    "the moon",
    "black holes",
    "gravity",
    "electricity",
    "the internet",
    "computers",
    "the human heart",
    "the immune system",
    "vaccines",
    "dinosaurs",
    "bees",
    "rainforests",
    "deserts",
    "oceans",
    "climate change",
    "recycling",
    "solar power",
    "wind energy",
    "the Roman Empire",
    "ancient Egypt",
    "the printing press",
    "the Industrial Revolution",
    "democracy",
    "money",
    "inflation",
    "banks",
    "trade",
    "cooking pasta",
    "baking bread",
    "healthy eating",
    "exercise",
    "sleep",
    "stress",
    "friendship",
    "learning a language",
    "music",
    "painting",
    "poetry",
    "chess",
    "football",
    "the Olympic Games",
    "mountains",
    "rivers",
    "cats",
    "dogs",
    "birds",
    "trees",
    "coffee",
    "tea",
    "chocolate",
    "the weather",
    "seasons",
    "time zones",
    "maps",
    "trains",
    "airplanes",
    "bicycles",
    "cars",
    "rockets",
    "satellites",
    "the solar system",
    "Mars",
    "stars",
    "atoms",
    "DNA",
    "cells",
    "bacteria",
    "viruses",
    "antibiotics",
    "the brain",
    "memory",
    "happiness",
    "kindness",
    "writing an email",
    "job interviews",
    "saving money",
    "gardening",
    "camping",
    "libraries",
    "museums",
    "the alphabet",
    "numbers",
    "fractions",
    "triangles",
    "programming",
    "Python",
    "databases",
    "passwords",
    "robots",
    "artificial intelligence",
    "smartphones",
    "social media",
    "newspapers",
    "photography",
    "movies",
]
# A second topic list, used only once TOPICS is spent: runs with a smaller reply budget get
# exactly the prompts they always did. Disjoint from TOPICS and the gate's held-out topics.
MORE_TOPICS = [
    "snow",
    "hurricanes",
    "tornadoes",
    "fog",
    "soil",
    "sand",
    "fossils",
    "caves",
    "islands",
    "lakes",
    "waterfalls",
    "forests",
    "grasslands",
    "wetlands",
    "the Arctic",
    "Antarctica",
    "the Sahara",
    "the Amazon River",
    "sharks",
    "octopuses",
    "jellyfish",
    "frogs",
    "snakes",
    "turtles",
    "elephants",
    "lions",
    "horses",
    "cows",
    "wolves",
    "bears",
    "monkeys",
    "ants",
    "butterflies",
    "bats",
    "eagles",
    "parrots",
    "flowers",
    "roses",
    "seeds",
    "oxygen",
    "water",
    "iron",
    "gold",
    "plastic",
    "glass",
    "light",
    "sound",
    "heat",
    "energy",
    "friction",
    "nuclear power",
    "the speed of light",
    "the periodic table",
    "chemical reactions",
    "evolution",
    "genetics",
    "the skeleton",
    "muscles",
    "the lungs",
    "blood",
    "teeth",
    "the eyes",
    "vitamins",
    "email",
    "the World Wide Web",
    "search engines",
    "cloud computing",
    "video calls",
    "3D printing",
    "drones",
    "GPS",
    "cameras",
    "television",
    "radio",
    "the light bulb",
    "the steam engine",
    "the wheel",
    "clocks",
    "calculators",
    "keyboards",
    "spreadsheets",
    "encryption",
    "open source software",
    "Linux",
    "JavaScript",
    "algorithms",
    "machine learning",
    "virtual reality",
    "ancient Greece",
    "the Vikings",
    "the Middle Ages",
    "the Silk Road",
    "the French Revolution",
    "the United Nations",
    "elections",
    "taxes",
    "laws",
    "cities",
    "villages",
    "farming",
    "fishing",
    "markets",
    "restaurants",
    "hospitals",
    "schools",
    "universities",
    "teachers",
    "doctors",
    "firefighters",
    "jazz",
    "the piano",
    "the guitar",
    "opera",
    "ballet",
    "theatre",
    "novels",
    "comic books",
    "fairy tales",
    "sculpture",
    "architecture",
    "fashion",
    "basketball",
    "tennis",
    "hiking",
    "skiing",
    "surfing",
    "cheese",
    "eggs",
    "milk",
    "honey",
    "bananas",
    "oranges",
    "tomatoes",
    "potatoes",
    "spices",
    "ice cream",
    "breakfast",
    "picnics",
    "birthdays",
    "holidays",
    "travel",
    "hotels",
    "airports",
    "time management",
    "habits",
    "motivation",
    "patience",
    "honesty",
    "teamwork",
    "public speaking",
    "reading",
    "writing a resume",
    "budgeting",
    "pets",
    "houseplants",
    "first aid",
    "walking",
]
TEMPLATES = [
    "Explain {t} in simple terms.",
    "What is {t}?",
    "Give me three facts about {t}.",
    "Write a short paragraph about {t}.",
    "Why is {t} important?",
    "Tell me something interesting about {t}.",
    "How would you describe {t} to a child?",
    "What are the pros and cons of {t}?",
]


class ChatTokenizer:
    """The checkpoint's tokenizer plus the ChatML rendering SmolLM2's template produces."""

    def __init__(self, checkpoint: Path) -> None:
        from tokenizers import Tokenizer

        try:
            self.tok = Tokenizer.from_file(str(Path(checkpoint) / "tokenizer.json"))
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exceptions
            raise CheckpointError(f"{checkpoint}: cannot read tokenizer.json ({e})") from e
        self.eos = self.tok.token_to_id("<|im_end|>")
        self.system_ids = self.encode(f"<|im_start|>system\n{SYSTEM}<|im_end|>\n")

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def turn(self, role: str, text: str) -> list[int]:
        return self.encode(f"<|im_start|>{role}\n{text}<|im_end|>\n")

    def prompt(self, user: str) -> list[int]:
        """System + user turn + the assistant header: what generation starts from."""
        return self.system_ids + self.turn("user", user) + self.encode("<|im_start|>assistant\n")

    def conversation(
        self, turns: list[tuple[str, str]], assistant_only: bool = False
    ) -> tuple[list[int], list[int]]:
        """(ids, mask) for the default system prompt plus `turns` [(role, text)]."""
        ids, mask = list(self.system_ids), [0] * len(self.system_ids)
        for role, text in turns:
            head = self.encode(f"<|im_start|>{role}\n")
            body = self.encode(f"{text}<|im_end|>\n")
            keep = role == "assistant" or not assistant_only
            ids += head + body
            mask += [int(not assistant_only)] * len(head) + [int(keep)] * len(body)
        return ids, mask


def _find(data_dir: Path, pattern: str) -> Path:
    hits = sorted(Path(data_dir).glob(pattern))
    if not hits:
        raise CheckpointError(
            f"{data_dir}: no {pattern}",
            hint="pip download --no-deps chitchat-dataset chatterbot-corpus -d DIR",
        )
    return hits[-1]


def chitchat_conversations(data_dir: Path) -> list[list[tuple[str, str]]]:
    """Shuffled (fixed seed) chitchat conversations as alternating user/assistant turns."""
    with zipfile.ZipFile(_find(data_dir, "chitchat_dataset-*.whl")) as z:
        raw = json.loads(z.read("chitchat_dataset/dataset.json"))
    convs = []
    for key in sorted(raw):
        turns = [
            " ".join(m["text"].strip() for m in turn if m.get("text"))
            for turn in raw[key]["messages"]
        ]
        turns = [t for t in turns if t]
        if len(turns) >= 2:
            convs.append([("user" if j % 2 == 0 else "assistant", t) for j, t in enumerate(turns)])
    random.Random(SEED).shuffle(convs)
    return convs


def chatterbot_questions(data_dir: Path) -> list[str]:
    """The English questions of chatterbot-corpus (first line of each exchange)."""
    import yaml  # only this source needs PyYAML

    out = []
    with zipfile.ZipFile(_find(data_dir, "chatterbot_corpus-*.whl")) as z:
        for name in sorted(z.namelist()):
            if "/english/" not in name or not name.endswith(".yml"):
                continue
            doc = yaml.safe_load(z.read(name)) or {}
            for conv in doc.get("conversations") or []:
                if conv and isinstance(conv[0], str) and len(conv[0]) > 8:
                    q = conv[0].strip()
                    out.append(q[0].upper() + q[1:] + ("" if q[-1] in "?.!" else "?"))
    return sorted(set(out))


def instruction_prompts(topics: list[str] = TOPICS) -> list[str]:
    return [t.format(t=topic) for topic in topics for t in TEMPLATES]


def pack(
    seqs: list[tuple[list[int], list[int]]], seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate (ids, mask) sequences and cut into [N, seq_len] rows (the tail is dropped)."""
    ids = [t for s, _ in seqs for t in s]
    mask = [m for _, ms in seqs for m in ms]
    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"only {len(ids)} tokens: not enough for one {seq_len}-token row")
    cut = n * seq_len
    return (
        torch.tensor(ids[:cut], dtype=torch.int32).view(n, seq_len),
        torch.tensor(mask[:cut], dtype=torch.uint8).view(n, seq_len),
    )


def interleave(a: torch.Tensor, b: torch.Tensor, every: int) -> torch.Tensor:
    """Rows of `a` with one row of `b` after every `every` rows of `a` (b cycles)."""
    if len(b) == 0:
        return a
    rows, j = [], 0
    for i in range(len(a)):
        rows.append(a[i])
        if (i + 1) % every == 0:
            rows.append(b[j % len(b)])
            j += 1
    return torch.stack(rows)


def equal_length_prompts(prompts: list[str], tok: ChatTokenizer, n: int, batch: int) -> list[str]:
    """Up to `n` prompts drawn from the most common token lengths, so batches are full
    (generation batches only prompts of one length: no padding, no attention mask)."""
    by_len: dict[int, list[str]] = {}
    for p in prompts:
        by_len.setdefault(len(tok.prompt(p)), []).append(p)
    out: list[str] = []
    for _, group in sorted(by_len.items(), key=lambda kv: -len(kv[1])):
        random.Random(1).shuffle(group)
        out += group[: max(batch, (len(group) // batch) * batch)][: n - len(out)]
        if len(out) >= n:
            break
    return out
