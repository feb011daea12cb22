"""Fixed inputs of the quality gate: factual prompts, held-out assistant prompts, loop prompts.

FACTUAL were kept from a list of 45 only where the teacher (k3-smol at step 0, greedy, bf16)
answers correctly and unambiguously, so the gate measures what distillation loses, not what
SmolLM2 never knew (it names Neptune the largest planet and Kennedy the first US president).
An answer is correct if its lower-cased text contains an accepted answer as a whole word.
"""

from __future__ import annotations

FACTUAL: list[tuple[str, tuple[str, ...]]] = [
    ("What is the capital of France?", ("paris",)),
    ("What is the capital of Italy?", ("rome",)),
    ("What is the capital of Japan?", ("tokyo",)),
    ("What is the capital of Germany?", ("berlin",)),
    ("What is the capital of England?", ("london",)),
    ("What is the capital of Russia?", ("moscow",)),
    ("What is the capital of China?", ("beijing",)),
    ("What is the capital of Egypt?", ("cairo",)),
    ("What is the capital of Canada?", ("ottawa",)),
    ("What is the capital of Greece?", ("athens",)),
    ("Who wrote Romeo and Juliet?", ("shakespeare",)),
    ("Who developed the theory of relativity?", ("einstein",)),
    ("Which planet is known as the Red Planet?", ("mars",)),
    ("What is the chemical symbol for water?", ("h2o", "h₂o")),
    ("What gas do plants absorb from the air for photosynthesis?", ("carbon dioxide", "co2")),
    ("What is the boiling point of water in degrees Celsius?", ("100",)),
    ("How many days are there in a week?", ("seven", "7")),
    ("How many legs does a spider have?", ("eight", "8")),
    ("What is the largest ocean on Earth?", ("pacific",)),
    ("What is the tallest mountain in the world?", ("everest",)),
    ("What is the longest river in Africa?", ("nile",)),
    ("What star is at the center of our solar system?", ("sun",)),
    ("What is the largest mammal in the world?", ("blue whale", "whale")),
    ("What language is spoken in Brazil?", ("portuguese",)),
    ("What is the main language spoken in Mexico?", ("spanish",)),
    ("What is the opposite of hot?", ("cold",)),
    ("In which country are the pyramids of Giza?", ("egypt",)),
    ("What is the currency of Japan?", ("yen",)),
    ("Who discovered penicillin?", ("fleming",)),
    ("What is the capital of Australia?", ("canberra",)),
]

HELDOUT_TOPICS = [
    "glaciers",
    "earthquakes",
    "lightning",
    "coral reefs",
    "penguins",
    "whales",
    "owls",
    "tigers",
    "the Great Wall of China",
    "the Renaissance",
    "the Moon landing",
    "the telephone",
    "electric cars",
    "batteries",
    "magnets",
    "rainbows",
    "clouds",
    "tides",
    "comets",
    "telescopes",
    "microscopes",
    "bridges",
    "skyscrapers",
    "castles",
    "pyramids",
    "volunteering",
    "meditation",
    "yoga",
    "running",
    "swimming",
    "board games",
    "video games",
    "origami",
    "knitting",
    "pizza",
    "rice",
    "apples",
    "mushrooms",
    "salt",
    "sugar",
]
HELDOUT_TEMPLATES = [
    "Explain {t} in simple terms.",
    "Write a short paragraph about {t}.",
    "Tell me something interesting about {t}.",
    "Give me three facts about {t}.",
]
HELDOUT_ASSISTANT_N = 32

LOOP_PROMPTS = [
    "Write a short story about a dragon who is afraid of the dark.",
    "Describe your ideal weekend in detail.",
    "Write a haiku about the sea.",
]
