"""Short factual questions, prompts for teacher replies in the one-line Q→A form.

Why: chat corpora and "explain X" instructions hold almost no one-line questions, and that is
the form where a distilled hybrid drifts (asked for a capital, it answered in the country's own
language and looped). Training on the teacher's answers to *other* questions of that form
teaches the form, not the gate: every question the gate asks is excluded, and so is every
question about a subject the gate asks about (no "capital of" any gate country, no currency of
Japan, ...), so the gate's factual set stays held out.
"""

from __future__ import annotations

import re

from .gate_data import FACTUAL

COUNTRIES = [
    "Spain", "Portugal", "Ireland", "Scotland", "Wales", "Norway", "Sweden", "Finland",
    "Denmark", "Iceland", "the Netherlands", "Belgium", "Switzerland", "Austria", "Poland",
    "Hungary", "Ukraine", "Turkey", "Iran", "Iraq", "Israel", "Saudi Arabia", "India",
    "Pakistan", "Thailand", "Vietnam", "Indonesia", "the Philippines", "South Korea",
    "North Korea", "Kenya", "Nigeria", "Ethiopia", "Morocco", "South Africa", "Argentina",
    "Chile", "Peru", "Colombia", "Venezuela", "Cuba", "the United States", "New Zealand",
    "Brazil", "Mexico", "Czech Republic", "Romania", "Bulgaria", "Croatia", "Serbia",
]  # fmt: skip
WRITERS = [
    "Hamlet", "Macbeth", "Pride and Prejudice", "Oliver Twist", "A Christmas Carol",
    "Moby-Dick", "War and Peace", "The Odyssey", "Don Quixote", "Frankenstein",
    "Harry Potter", "The Hobbit", "1984", "Animal Farm", "Alice's Adventures in Wonderland",
    "The Adventures of Tom Sawyer", "Great Expectations", "Jane Eyre", "Dracula",
    "The Origin of Species",
]  # fmt: skip
PAINTERS = ["the Mona Lisa", "The Starry Night", "the Sistine Chapel ceiling", "Guernica",
            "The Last Supper", "Sunflowers", "The Scream", "The Persistence of Memory"]  # fmt: skip
INVENTIONS = [
    "the telephone", "the light bulb", "the printing press", "the airplane",
    "the World Wide Web", "the steam engine", "the radio", "dynamite", "the telescope",
    "the theory of evolution", "the laws of motion", "the polio vaccine",
]  # fmt: skip
ELEMENTS = [
    "gold", "silver", "iron", "oxygen", "hydrogen", "carbon", "sodium", "potassium",
    "helium", "nitrogen", "copper", "lead", "calcium", "neon", "uranium", "zinc",
]  # fmt: skip
ANIMAL_LEGS = ["a dog", "an insect", "a bird", "a cat", "an octopus", "a horse",
               "a cow", "a crab", "an ant", "a chicken"]  # fmt: skip
OPPOSITES = ["up", "big", "fast", "happy", "light", "old", "open", "early", "full",
             "wet", "loud", "rich", "strong", "day", "begin"]  # fmt: skip
UNITS = [
    "How many hours are there in a day?", "How many minutes are there in an hour?",
    "How many seconds are there in a minute?", "How many months are there in a year?",
    "How many days are there in a year?", "How many days are there in a leap year?",
    "How many weeks are there in a year?", "How many centimeters are there in a meter?",
    "How many grams are there in a kilogram?", "How many meters are there in a kilometer?",
    "How many years are there in a century?", "How many years are there in a decade?",
    "How many sides does a triangle have?", "How many sides does a hexagon have?",
    "How many sides does a square have?", "How many continents are there?",
    "How many planets are in our solar system?", "How many colors are in a rainbow?",
    "How many players are on a soccer team?", "How many strings does a violin have?",
    "How many keys does a piano have?", "How many bones are in the human body?",
    "How many teeth does an adult human have?", "How many chambers does the human heart have?",
]  # fmt: skip
SINGLES = [
    "What is the largest planet in our solar system?", "What is the smallest planet?",
    "Which planet is closest to the sun?", "Which planet has rings?",
    "What is the largest continent?", "What is the largest desert in the world?",
    "What is the largest country by area?",
    "What is the hardest natural substance?", "What is the freezing point of water?",
    "What is the speed of light?", "What do bees make?", "What do caterpillars turn into?",
    "What is the largest organ of the human body?", "What organ pumps blood?",
    "What is the closest star to Earth?", "What is the natural satellite of Earth?",
    "Who was the first person to walk on the moon?",
    "What is the chemical formula for table salt?", "What is the square root of 81?",
    "What is 12 times 12?", "What is 15 plus 27?", "What is 100 divided by 4?",
    "What is the primary language of Argentina?", "What is the largest bird?",
    "What is the fastest land animal?", "What is the tallest animal?",
    "What color is the sky on a clear day?", "What color are bananas when ripe?",
    "What is frozen water called?", "What is the boiling point of water in Fahrenheit?",
    "Which gas do humans breathe out?", "What do plants release during photosynthesis?",
    "Which ocean lies between Europe and America?",
]  # fmt: skip
TEMPLATES = [
    ("What is the capital of {}?", COUNTRIES),
    ("Which city is the capital of {}?", COUNTRIES),
    ("What language is spoken in {}?", COUNTRIES),
    ("What is the currency of {}?", COUNTRIES),
    ("Who wrote {}?", WRITERS),
    ("Who painted {}?", PAINTERS),
    ("Who invented {}?", INVENTIONS),
    ("What is the chemical symbol for {}?", ELEMENTS),
    ("How many legs does {} have?", ANIMAL_LEGS),
    ("What is the opposite of {}?", OPPOSITES),
]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


# Words that name what a gate question is about; a training question sharing one with the
# same gate question's frame would leak its answer. Generic words are not subjects.
_GENERIC = _words(
    "what is the of which who how many are there in a does do from for known as at on our "
    "world earth main largest tallest longest spoken language capital currency wrote "
    "developed discovered planet chemical symbol boiling point degrees celsius days week "
    "legs opposite country center star system have"
)
_GATE_SUBJECTS = [(_words(q) - _GENERIC) for q, _ in FACTUAL]


def leaks_gate(question: str) -> bool:
    """True if `question` is a gate question or shares its subject with one."""
    words = _words(question)
    return any(question == q for q, _ in FACTUAL) or any(
        subj and subj <= words for subj in _GATE_SUBJECTS
    )


def quiz_prompts() -> list[str]:
    """Every templated and single question that does not leak a gate question, sorted."""
    qs = [t.format(x) for t, xs in TEMPLATES for x in xs] + UNITS + SINGLES
    return sorted({q for q in qs if not leaks_gate(q)})


# One-line questions held out from training (never in `quiz_prompts`) and from the gate (no gate
# subject), in the form where the gate's factual check fails. Why: the chat and assistant
# selection sets score long replies, where a wrong first answer token is a few tokens in
# hundreds; choosing a layer by them never looked at the form that fails.
#
# HELDOUT_FACTUAL: those the teacher (k3-smol, greedy, bf16, 32 tokens) answers correctly, with
# their accepted answers: a second factual check, chosen as the gate's was, on questions the
# gate never asks. Why: one answer in the gate's 30 decides a milestone, so a layer or snapshot
# chosen by the gate's own count would be chosen by its noise.
HELDOUT_FACTUAL: list[tuple[str, tuple[str, ...]]] = [
    ("What is the capital of Nepal?", ("kathmandu",)),
    ("What is the capital of Ghana?", ("accra",)),
    ("What is the capital of Lebanon?", ("beirut",)),
    ("What is the capital of Uruguay?", ("montevideo",)),
    ("What is the capital of Malaysia?", ("kuala lumpur",)),
    ("What is the capital of Bangladesh?", ("dhaka",)),
    ("What language is spoken in Quebec?", ("french",)),
    ("What language is spoken in Jamaica?", ("english",)),
    ("What is the currency of the United Kingdom?", ("pound",)),
    ("Who wrote The Divine Comedy?", ("dante",)),
    ("Who wrote Les Misérables?", ("hugo",)),
    ("Who wrote The Great Gatsby?", ("fitzgerald",)),
    ("Who wrote The Canterbury Tales?", ("chaucer",)),
    ("Who was the first emperor of Rome?", ("augustus",)),
    ("In which year did World War II end?", ("1945",)),
    ("Which ship sank after hitting an iceberg in 1912?", ("titanic",)),
    ("What is the chemical symbol for tin?", ("sn",)),
    ("What is the chemical symbol for chlorine?", ("cl",)),
    ("What is the powerhouse of the cell?", ("mitochondria", "mitochondrion")),
    ("What force keeps us on the ground?", ("gravity",)),
    ("Which planet is the hottest?", ("venus",)),
    ("What is the unit of electrical resistance?", ("ohm", "ohms")),
    ("What is the largest bone in the human body?", ("femur",)),
    ("What is the longest river in South America?", ("amazon",)),
    ("Which country is home to the kangaroo?", ("australia",)),
    ("Which river flows through London?", ("thames",)),
    ("Which river flows through Paris?", ("seine",)),
    ("In which city is the Eiffel Tower?", ("paris",)),
    ("In which city is the Colosseum?", ("rome",)),
    ("In which country is the Taj Mahal?", ("india",)),
    ("How many sides does a pentagon have?", ("five", "5")),
    ("What is the opposite of north?", ("south",)),
]

# HELDOUT_QUIZ adds those the teacher gets wrong or leaves unanswered in 32 tokens: the quiz set
# (`validation.quiz_set`) scores the teacher's own answers teacher-forced, right or wrong.
HELDOUT_QUIZ = [q for q, _ in HELDOUT_FACTUAL] + [
    "What is the capital of Jamaica?",
    "What is the capital of Estonia?",
    "What is the currency of Malaysia?",
    "Who wrote The Raven?",
    "Who wrote Treasure Island?",
    "Who composed the Moonlight Sonata?",
    "Who composed The Magic Flute?",
    "Who painted The Night Watch?",
    "Who painted The Birth of Venus?",
    "Who sculpted the statue of David?",
    "Who was the first president of the United States?",
    "What do you call an animal that eats only plants?",
    "Which blood cells fight infection?",
    "How many players are on a basketball team?",
    "How many wheels does a bicycle have?",
    "What color do you get when you mix blue and yellow?",
]


# WIDE_FACTUAL: HELDOUT_FACTUAL and 85 more, screened the same way (teacher greedy, bf16, the
# gate's 40 tokens) from 195 candidates: kept only where the teacher's answer is right and
# unambiguous, not where the accepted word is merely echoed from the question or comes after a
# wrong answer, and no single-letter accepted answer (the whole-word check finds "s" in "it's").
# Why: 32 questions cannot rank hybrids whose true accuracies differ by a few points; 117,
# compared question by question (`benchmarks/factual_probe.py`), can tell a real loss of facts
# from the luck of which of the gate's 30 flip.
WIDE_FACTUAL: list[tuple[str, tuple[str, ...]]] = HELDOUT_FACTUAL + [
    ("What is the capital of Afghanistan?", ("kabul",)),
    ("What is the capital of Syria?", ("damascus",)),
    ("What is the capital of Sri Lanka?", ("colombo", "kotte")),
    ("What is the capital of Qatar?", ("doha",)),
    ("What is the capital of Senegal?", ("dakar",)),
    ("What is the capital of Uganda?", ("kampala",)),
    ("What is the capital of Tanzania?", ("dodoma",)),
    ("What is the capital of Zimbabwe?", ("harare",)),
    ("What is the capital of Cambodia?", ("phnom penh",)),
    ("What is the capital of Taiwan?", ("taipei",)),
    ("What is the capital of Latvia?", ("riga",)),
    ("What is the capital of Lithuania?", ("vilnius",)),
    ("What is the capital of Slovenia?", ("ljubljana",)),
    ("In which city is the Statue of Liberty?", ("new york",)),
    ("In which city is Big Ben?", ("london",)),
    ("In which city is the Brandenburg Gate?", ("berlin",)),
    ("In which city is the Kremlin?", ("moscow",)),
    ("In which city is the Golden Gate Bridge?", ("san francisco",)),
    ("In which city is the Sydney Opera House?", ("sydney",)),
    ("In which city is the Acropolis?", ("athens",)),
    ("In which city is Times Square?", ("new york",)),
    ("In which city is the Louvre?", ("paris",)),
    ("In which city is Hollywood?", ("los angeles",)),
    ("In which country is Stonehenge?", ("england", "uk", "united kingdom", "britain")),
    ("In which country is Mount Fuji?", ("japan",)),
    ("In which country is the Amazon rainforest mostly?", ("brazil",)),
    ("In which country is the city of Toronto?", ("canada",)),
    ("Which river flows through Rome?", ("tiber",)),
    ("Which river flows through Vienna?", ("danube",)),
    ("Which river flows through New Orleans?", ("mississippi",)),
    ("What is the longest river in the United States?", ("missouri", "mississippi")),
    ("What is the largest lake in Africa?", ("victoria",)),
    ("What is the largest rainforest in the world?", ("amazon",)),
    ("Who painted the ceiling of the Sistine Chapel?", ("michelangelo",)),
    ("Who wrote the Declaration of Independence?", ("jefferson",)),
    ("Who formulated the law of universal gravitation?", ("newton",)),
    ("Who developed the first successful vaccine for smallpox?", ("jenner",)),
    ("Who founded Microsoft?", ("gates", "allen")),
    ("Who founded Apple?", ("jobs", "wozniak")),
    ("Who wrote The Iliad?", ("homer",)),
    ("Who wrote The Lord of the Rings?", ("tolkien",)),
    ("Who was the British prime minister during most of World War II?", ("churchill",)),
    ("Who led India's independence movement with nonviolence?", ("gandhi",)),
    ("Who was the Greek god of the sea?", ("poseidon",)),
    ("Who was the Roman god of war?", ("mars",)),
    ("What is the chemical symbol for mercury?", ("hg",)),
    ("What is the chemical formula for carbon dioxide?", ("co2", "co₂")),
    ("What gas do humans need to breathe?", ("oxygen",)),
    ("What is the center of an atom called?", ("nucleus",)),
    ("What is the unit of force?", ("newton",)),
    ("What is the unit of energy?", ("joule",)),
    ("What is the unit of frequency?", ("hertz",)),
    ("What is the study of living things called?", ("biology",)),
    ("What pigment makes plants green?", ("chlorophyll",)),
    ("What organ do humans use to breathe?", ("lungs", "lung")),
    ("What organ controls the body?", ("brain",)),
    ("What vitamin does sunlight help the body make?", ("vitamin d",)),
    ("What is the largest land animal?", ("elephant",)),
    ("What is a group of lions called?", ("pride",)),
    ("What is a group of wolves called?", ("pack",)),
    ("What is the young of a cow called?", ("calf",)),
    ("How many sides does an octagon have?", ("eight", "8")),
    ("How many sides does a rectangle have?", ("four", "4")),
    ("How many degrees are there in a right angle?", ("90", "ninety")),
    ("How many fingers are on one human hand?", ("five", "5")),
    ("How many ounces are there in a pound?", ("16", "sixteen")),
    ("How many feet are there in a yard?", ("three", "3")),
    ("How many years are there in a millennium?", ("1000", "1,000", "thousand")),
    ("How many cards are there in a standard deck?", ("52", "fifty-two")),
    ("How many states are there in the United States?", ("50", "fifty")),
    ("How many stripes are on the United States flag?", ("13", "thirteen")),
    ("How many letters are in the English alphabet?", ("26", "twenty-six")),
    ("What is 7 times 8?", ("56",)),
    ("What is 9 times 9?", ("81",)),
    ("What is half of 50?", ("25",)),
    ("In which year did Columbus reach the Americas?", ("1492",)),
    ("In which year did humans first land on the moon?", ("1969",)),
    ("Which ancient civilization built the Colosseum?", ("roman", "romans")),
    ("What is the holy book of Islam?", ("quran", "koran", "qur'an")),
    ("What instrument has 88 keys?", ("piano",)),
    ("What sport uses a puck?", ("hockey",)),
    ("What is the opposite of love?", ("hate",)),
    ("What is the opposite of true?", ("false",)),
    ("What is the plural of mouse?", ("mice",)),
    ("What is the plural of child?", ("children",)),
]
