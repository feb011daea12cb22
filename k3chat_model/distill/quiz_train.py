"""More one-line factual questions, prompts for stage 2's factual-answer (Q→A) rows.

Why: `quiz_prompts` alone gives a few hundred questions, too few to teach the one-line answer
form without repeating them; these add hundreds more, each held out by subject from every
factual check (the gate's FACTUAL, HELDOUT_QUIZ, WIDE_FACTUAL) so those checks stay unbiased.
"""

from __future__ import annotations

from .gate_data import FACTUAL
from .quiz import _GENERIC, HELDOUT_QUIZ, WIDE_FACTUAL, _words, leaks_gate, quiz_prompts

_GEOGRAPHY = [
    "What is the capital of Jordan?", "What is the capital of Cyprus?",
    "What is the capital of Malta?", "What is the capital of Slovakia?",
    "What is the capital of Belarus?", "What is the capital city of Armenia?",
    "What is the capital of Mongolia?", "What is the capital of Algeria?",
    "What is the capital of Tunisia?", "What is the capital of Ecuador?",
    "What is the capital of Costa Rica?", "Which city is the capital of Rwanda?",
    "Which city is the capital of Haiti?", "What is the capital of the state of Texas?",
    "What is the capital of the state of California?", "In which country is Machu Picchu?",
    "In which country is the ancient city of Petra?", "In which country is the Alhambra?",
    "In which country is the city of Barcelona?", "In which country is the city of Istanbul?",
    "In which country is the city of Mumbai?", "In which country is the city of Cape Town?",
    "In which country is the Gobi Desert mostly?", "In which city is the Burj Khalifa?",
    "In which city is the Space Needle?", "In which city is the Hagia Sophia?",
    "In which city is La Sagrada Familia?", "In which city is the Little Mermaid statue?",
    "In which city is the Christ the Redeemer statue?", "In which city is the Leaning Tower?",
    "Which city is known as the Big Apple?", "Which city is known as the Windy City?",
    "Which US state is the largest by area?", "Which US state is made up of islands?",
    "In which US state is the city of Miami?", "In which US state is Las Vegas?",
    "Which river flows through Baghdad?", "Which river carved the Grand Canyon?",
    "What is the longest river in Europe?", "What is the longest river in Asia?",
    "What is the deepest lake in the world?", "Which is the biggest of the Great Lakes?",
    "What is the biggest island on the planet?", "What is the smallest country in the world?",
    "What is the highest waterfall?", "Which desert covers much of northern Africa?",
    "What is the driest desert?", "Which sea separates Europe and Africa?",
    "Which sea is so salty that people float in it?", "Which continent is the coldest?",
    "On which continent is Argentina?", "Which country is famous for its fjords?",
    "Which country is famous for tulips?",
    "What is the imaginary line around the middle of Earth called?",
    "What is the line of zero degrees longitude called?",
    "What is the currency of the European Union?",
]  # fmt: skip
_SCIENCE = [
    "Which element has the symbol Fe?", "Which element has the symbol Na?",
    "Which element has the symbol Au?", "Which element has the symbol Ag?",
    "Which element has the symbol Pb?", "What is the chemical symbol for sulfur?",
    "What is the chemical symbol for magnesium?", "What is the chemical symbol for aluminum?",
    "What is the atomic number of hydrogen?", "What is the atomic number of carbon?",
    "What is the lightest element?", "Which gas makes up most of the air?",
    "Which noble gas glows in bright signs?", "Which gas do balloons float with?",
    "What is the chemical formula for methane?", "What is the chemical formula for ammonia?",
    "What is the pH of a neutral solution?", "What does DNA stand for?",
    "What is the basic unit of life?", "What is the unit of electric current?",
    "What is the unit of power?", "What is the unit of voltage?", "What is the unit of pressure?",
    "What is the SI unit of temperature?", "What does a thermometer measure?",
    "What does a barometer measure?", "What is the study of earthquakes called?",
    "What is the study of plants called?", "What is the study of rocks called?",
    "What is the study of stars and space called?",
    "What is it called when a liquid turns into a gas?",
    "What is it called when a gas turns into a liquid?",
    "What is it called when a solid turns into a liquid?", "What are the three states of matter?",
    "What is absolute zero in Celsius?", "What is the softest mineral?",
    "What kind of rock forms from cooled lava?", "What is molten rock under the ground called?",
    "What is molten rock called after it erupts?", "What is the layer of gas around Earth called?",
    "Which layer of the atmosphere blocks ultraviolet rays?",
    "What is the outermost layer of Earth called?", "What is the innermost layer of Earth called?",
    "Which metal is attracted to a magnet?",
    "What do we call a material that lets electricity flow?",
    "What is the name of the force that slows down moving objects?",
    "Who proposed the laws of planetary motion?",
]  # fmt: skip
_SPACE = [
    "Which planet is farthest from the sun?", "Which planet spins on its side?",
    "What is the third planet from the sun?",
    "Which dwarf planet was once called the ninth planet?", "What is the name of our galaxy?",
    "What is a shooting star?", "What is an exploding star called?",
    "What was the first artificial satellite?", "Who was the first person in space?",
    "What are Saturn's rings mostly made of?", "What is the Sun mostly made of?",
    "How long does light from the Sun take to reach us?",
    "How long does it take Earth to orbit the Sun?", "What is the largest moon of Saturn?",
    "What is the largest moon of Jupiter?", "What is the name of the American space agency?",
    "What is a group of stars forming a pattern called?",
    "What is the brightest star in the night sky?",
    "What do we call a rock that hits the ground from space?",
    "What is the name of the telescope launched into orbit in 1990?",
]  # fmt: skip
_ANIMALS = [
    "What is a baby frog called?", "What is a baby dog called?", "What is a baby cat called?",
    "What is a baby sheep called?", "What is a baby horse called?", "What is a young deer called?",
    "What is a baby bear called?", "What is a group of fish called?",
    "What is a group of crows called?", "What is a group of sheep called?",
    "What is a group of bees called?", "What is a bird's home called?", "Where do bees live?",
    "What is a rabbit's underground home called?", "What sound does a dog make?",
    "What sound does a lion make?", "What sound does a sheep make?", "What is the largest fish?",
    "Which slow animal hangs upside down in trees?",
    "Which bird cannot fly and lives in Antarctica?", "Which bird is a symbol of peace?",
    "What is the fastest bird?", "Which animal has black and white stripes?",
    "Which animal is called the ship of the desert?", "What do pandas mainly eat?",
    "What do koalas eat?", "What is a male chicken called?", "How many arms does a starfish have?",
    "How many hearts does an octopus have?", "What is the largest reptile?",
    "What do you call an animal that is active at night?",
    "What do you call an animal with a backbone?", "Which flying animal uses echolocation?",
    "Where do polar bears live?", "What is the largest cat?",
    "Which animal is known for changing color?", "What animal is Bambi?",
    "What kind of animal is Nemo?", "Which animal is the symbol of the WWF?",
    "What is the national animal of Scotland?", "Which bird lays the biggest eggs?",
    "What do caterpillars eat?", "Which animal produces wool?", "Which insect glows at night?",
    "What animal has the longest neck?",
]  # fmt: skip
_PLANTS_WEATHER = [
    "What do you call a tree that loses its leaves in autumn?",
    "What do you call a tree that keeps its leaves all year?",
    "What part of a plant grows under the ground?", "What part of a plant makes its food?",
    "Which tree do acorns grow on?", "What is the tallest type of tree?",
    "What do bees collect from flowers?", "What is a cactus adapted to live in?",
    "Which flower follows the sun across the sky?",
    "What is a large spinning storm that forms over warm seas?",
    "What is a funnel-shaped windstorm called?",
    "What forms when sunlight shines through raindrops?",
    "What is a scientist who studies weather called?",
    "What falls from clouds when it is very cold?",
    "What is a large slow-moving mass of ice called?", "What is land surrounded by sea called?",
    "What do you call an opening in the crust that erupts lava?",
    "What is a shaking of the ground called?",
    "What is a giant sea wave caused by an earthquake called?", "What are the four seasons?",
    "Which season comes after winter?", "In which season do leaves fall from trees?",
]  # fmt: skip
_BODY_FOOD = [
    "Which organ filters the blood?", "Where is food digested in the body?",
    "What is the largest internal organ?", "What is the colored part of the eye called?",
    "How many senses do humans have?", "Which sense uses the nose?", "Which sense uses the tongue?",
    "What connects muscles to bones?", "How many ribs does a human have?",
    "What is the hardest substance in the human body?", "Which vitamin is found in oranges?",
    "What is normal human body temperature in Celsius?", "What does the heart pump?",
    "Where in the body is the smallest bone?",
    "What do you call the joint between the thigh and the shin?",
    "What is the main ingredient in guacamole?", "What is tofu made from?",
    "What is bread made from?", "What grain is used for popcorn?",
    "Which fruit is used to make wine?", "What vegetable are French fries made from?",
    "What is made from fermented cabbage?", "What is cheese made from?",
    "What is butter made from?", "What is the yellow part of an egg called?",
    "What are dried grapes called?", "What are dried plums called?",
    "Which spice gives curry its yellow color?", "What is chocolate made from?",
    "Which drink is made from roasted beans?", "Which vegetable can make you cry when you cut it?",
    "Which fruit has its seeds on the outside?",
    "Which tropical fruit has a spiky crown of leaves?", "What kind of food is a baguette?",
    "What is the main herb in pesto?", "Which Italian dish has layers of pasta, sauce and cheese?",
    "What drink is made by steeping leaves in boiling liquid?",
]  # fmt: skip
_SPORT_GAMES = [
    "How many players are on a volleyball team?", "How many players are on a baseball team?",
    "How many players are on a cricket team?", "How many holes are on a standard golf course?",
    "In which sport do you hit a shuttlecock?", "Which sport is played at Wimbledon?",
    "How often are the Summer Olympics held?", "How many rings are on the Olympic flag?",
    "What sport does Lionel Messi play?", "What sport is Tiger Woods known for?",
    "Which sport uses a bat and wickets?", "In which sport can you score a touchdown?",
    "What is a perfect score in bowling?", "How long is a marathon?",
    "What sport does Roger Federer play?", "How many minutes is a soccer match?",
    "In chess, which piece moves only diagonally?", "How many squares are on a chessboard?",
    "Which chess piece can jump over other pieces?", "In which sport do you use a foil or an épée?",
    "What sport did Muhammad Ali compete in?", "In which sport would you do a backstroke?",
]  # fmt: skip
_ARTS_BOOKS = [
    "Who wrote The Catcher in the Rye?", "Who wrote To Kill a Mockingbird?",
    "Who wrote The Little Prince?", "Who wrote Robinson Crusoe?", "Who wrote Gulliver's Travels?",
    "Who wrote The Old Man and the Sea?", "Who wrote Crime and Punishment?",
    "Who wrote Anna Karenina?", "Who wrote Charlie and the Chocolate Factory?",
    "Who wrote The Cat in the Hat?", "Which author created Sherlock Holmes?",
    "Who wrote Peter Pan?", "Who wrote The Jungle Book?", "Who wrote Wuthering Heights?",
    "Who wrote Little Women?", "Who wrote The Time Machine?",
    "Who wrote Twenty Thousand Leagues Under the Sea?", "Who wrote Brave New World?",
    "Who wrote A Tale of Two Cities?", "Who is the author of Winnie-the-Pooh?",
    "Who wrote The Very Hungry Caterpillar?", "Who wrote The Chronicles of Narnia?",
    "Who wrote Sense and Sensibility?", "Who wrote the play Othello?",
    "Who wrote The Communist Manifesto?", "Name the author of The Adventures of Huckleberry Finn?",
    "Who wrote Fahrenheit 451?", "Who painted The Girl with a Pearl Earring?",
    "Who painted The Kiss?", "Who sculpted The Thinker?",
    "Which painter cut off part of his own ear?", "Which art style is Picasso known for?",
    "Who painted the Campbell's Soup Cans?", "Who composed The Four Seasons?",
    "Who composed The Nutcracker?", "Which band sang Hey Jude?", "Who is known as the King of Pop?",
    "Who is known as the King of Rock and Roll?", "How many strings does a standard guitar have?",
    "Which tall stringed instrument is played by plucking?",
    "How many musicians play in a quartet?", "Which woodwind instrument is held sideways?",
    "Which brass instrument has a slide?", "Which instrument did Louis Armstrong play?",
    "What is the name of Harry Potter's owl?", "What is the name of Sherlock Holmes's friend?",
    "What kind of creature is Shrek?", "In which city does Batman live?",
    "What is Superman's home planet?", "Which fairy tale character has very long hair?",
    "Whose nose grew when he lied?", "Which fairy tale girl lost a glass slipper?",
    "What is the cowboy's name in Toy Story?", "How many dwarfs are in Snow White's story?",
    "Who created Mickey Mouse?", "Who directed the film Jaws?", "Who is Batman's young partner?",
    "Which wizard is the headmaster of Hogwarts?",
]  # fmt: skip
_HISTORY = [
    "In which year did World War I begin?", "Who was the first female prime minister of Britain?",
    "Which president freed the slaves in America?", "Which French emperor lost at Waterloo?",
    "Which civilization built Machu Picchu?", "Which empire was ruled by Genghis Khan?",
    "Who was the first woman to win a Nobel Prize?", "Who is called the father of computers?",
    "Who said that the Earth moves around the Sun?", "In which city was John F. Kennedy shot?",
    "Who gave the I Have a Dream speech?", "Who was South Africa's first Black president?",
    "In which year did the French Revolution begin?",
    "What was the ship that carried the Pilgrims?", "What was the name of Charles Darwin's ship?",
    "Which explorer first reached the South Pole?",
    "Who was the Greek philosopher who taught Alexander the Great?",
    "Who was the teacher of Plato?", "Who was known as the Maid of Orléans?",
    "Which city was buried by the eruption of Vesuvius?",
    "Who was the longest-reigning British monarch?",
    "Which American war was fought from 1861 to 1865?", "Who was the king of the Greek gods?",
    "Who was the Greek goddess of wisdom?", "Who was the Norse god of thunder?",
    "Who flew too close to the sun on wax wings?", "Which Greek hero had a weak heel?",
    "How many wonders of the ancient world were there?",
    "Who was the first woman to fly solo across the Atlantic?", "Who discovered radium?",
    "Who is the father of genetics?", "Who founded Facebook?", "Who invented the phonograph?",
    "Which explorer first sailed from Europe around Africa to India?",
    "In which year did the Soviet Union collapse?",
    "What was the name of the wooden horse used to enter Troy?",
]  # fmt: skip
_NUMBERS = [
    "How many millimeters are in a centimeter?", "How many milliliters are in a liter?",
    "How many inches are in a foot?", "How many feet are in a mile?",
    "How many pounds are in a stone?", "How many hours are in a week?",
    "How many seconds are in an hour?", "How many minutes are in a day?",
    "How many days are in February in a normal year?", "Which month has the fewest days?",
    "What is the first month of the year?", "What is the last month of the year?",
    "How many days are in a fortnight?", "How many sides does a heptagon have?",
    "How many sides does a decagon have?", "How many degrees are in a circle?",
    "What do the angles of a triangle add up to?", "How many edges does a cube have?",
    "How many faces does a cube have?", "How many zeros are in one million?",
    "How many items are in a dozen?", "How many is a baker's dozen?",
    "What is the Roman numeral for 10?", "What is the Roman numeral for 50?",
    "What number does the Roman numeral C stand for?",
    "What number does the Roman numeral M stand for?", "What is 6 times 7?", "What is 6 times 6?",
    "What is 5 times 12?", "What is 11 times 11?", "What is 25 plus 17?", "What is 100 minus 37?",
    "What is 144 divided by 12?", "What is the square root of 64?",
    "What is the square root of 144?", "What is 2 to the power of 10?",
    "What is 10 percent of 200?", "What is a quarter of 100?", "What is 3 cubed?",
    "What is the next prime number after 7?", "What is the smallest prime number?",
    "Is 17 a prime number?", "What is pi to two decimal places?",
    "How many kilograms are in a metric ton?", "What is 0 degrees Celsius in Fahrenheit?",
    "How many bits are in a byte?", "How many cents are in a dollar?",
]  # fmt: skip
_WORDS = [
    "What is the plural of goose?", "What is the plural of tooth?", "What is the plural of man?",
    "What is the plural of cactus?", "What is the plural of sheep?",
    "What is the past tense of go?", "What is the past tense of eat?",
    "What is the past tense of run?", "What is the past tense of swim?",
    "What is a synonym for big?", "What is a synonym for quick?", "What is the opposite of left?",
    "What is the opposite of black?", "What is the opposite of win?",
    "What is the opposite of push?", "What is the opposite of inside?",
    "What is the opposite of yes?", "What is the opposite of east?",
    "What is the opposite of summer?", "What is the opposite of tall?",
    "What is the opposite of heavy?",
    "What do you call a word that means the same as another word?",
    "What do you call a word with the opposite meaning of another?",
    "What do you call words that sound alike but differ in meaning?",
    "What do you call an action word?", "What does enormous mean?",
    "What does gracias mean in English?", "What does bonjour mean?",
    "How do you say hello in Spanish?", "How do you say thank you in French?",
    "How do you say yes in German?", "What do you call a person who fixes teeth?",
    "What do you call a doctor for animals?", "What do you call a person who flies a plane?",
    "What do you call a person who writes poems?",
    "What do you call a person who designs buildings?",
    "What do you call a person who bakes bread?",
    "What do you call a person who works in a library?", "What do you call a house made of ice?",
    "What do you call a shape with six sides?", "What do you call a three-sided shape?",
    "What do you call a boat that travels underwater?", "What is the front of a ship called?",
    "What is the back of a ship called?", "What do you call the first meal of the day?",
    "What do you call a place where planes land?",
    "What is the first letter of the Greek alphabet?",
    "How many vowels are in the English alphabet?",
]  # fmt: skip
_EVERYDAY = [
    "What color is grass?", "What color is snow?", "What color are emeralds?",
    "What color is a sapphire?", "What color is a flamingo?", "What color is an eggplant?",
    "What color is a carrot?", "What color are school buses in America?", "What color is a ruby?",
    "What are the three primary colors?", "What color do you get when you mix black and white?",
    "What color is the top light on a traffic light?", "What day comes after Friday?",
    "What day comes before Monday?", "On which date is Christmas Day?",
    "On which date is New Year's Day?", "Which holiday is celebrated on October 31?",
    "On which date is Valentine's Day?", "How many wheels does a tricycle have?",
    "Which vehicle runs on rails?", "What do you call the time when the sun comes up?",
    "What is the tallest building on Earth?", "What does CPU stand for?",
    "What does USB stand for?", "What does NASA stand for?", "What does HTML stand for?",
    "What does GPS stand for?", "What is the most used internet search engine?",
    "What does a firefighter put out?", "What do you call the person who delivers letters?",
    "What is the holy book of Christianity?", "What is the holy book of Judaism?",
    "What shape is a soccer ball?", "What shape has no corners?",
    "What is the main ingredient of glass?", "What is paper made from?", "What powers a windmill?",
]  # fmt: skip

MORE_QUIZ: list[str] = (
    _GEOGRAPHY + _SCIENCE + _SPACE + _ANIMALS + _PLANTS_WEATHER + _BODY_FOOD + _SPORT_GAMES
    + _ARTS_BOOKS + _HISTORY + _NUMBERS + _WORDS + _EVERYDAY
)  # fmt: skip

_HELDOUT = [q for q, _ in FACTUAL] + list(HELDOUT_QUIZ) + [q for q, _ in WIDE_FACTUAL]
_HELDOUT_SET = set(_HELDOUT)
_HELDOUT_WORDS = [(_words(q), _words(q) - _GENERIC) for q in _HELDOUT]


def leaks_heldout(question: str) -> bool:
    """True if `question` is, or shares its subject with, a question of any factual check.

    A held-out question's subject words (its words less `_GENERIC`) all in `question` is a leak,
    as in `leaks_gate`; so are `question`'s own subject words all in a held-out question, so
    that "Who wrote Hamlet?" would leak from any held-out question naming Hamlet.
    """
    if question in _HELDOUT_SET:
        return True
    words = _words(question)
    own = words - _GENERIC
    return any((subj and subj <= words) or (own and own <= held) for held, subj in _HELDOUT_WORDS)


def factual_train_prompts() -> list[str]:
    """`quiz_prompts` and MORE_QUIZ, less every question that leaks a factual check, sorted.

    `quiz_prompts` is only kept from the gate; 18 of its questions share a subject with a
    held-out set (one, the Sistine Chapel ceiling, is a `WIDE_FACTUAL` question reworded), so
    rows aimed at exactly that form leave them out too."""
    qs = set(quiz_prompts()) | set(MORE_QUIZ)
    return sorted(q for q in qs if not leaks_heldout(q) and not leaks_gate(q))
