"""A small word-for-word Spanish→English corpus written on the spot (no Bible, no network): the
training tests and the notebooks' fast mode train on it."""

import random

ES_EN = {
    "el": "the",
    "perro": "dog",
    "gato": "cat",
    "casa": "house",
    "come": "eats",
    "bebe": "drinks",
    "agua": "water",
    "pan": "bread",
    "grande": "big",
    "pequeño": "small",
    "rojo": "red",
    "azul": "blue",
    "corre": "runs",
    "duerme": "sleeps",
    "niño": "boy",
    "niña": "girl",
    "libro": "book",
    "lee": "reads",
    "árbol": "tree",
    "sol": "sun",
}


def word_for_word_pairs(count, seed):
    """Random Spanish word strings and their word-for-word English glosses."""
    rng = random.Random(seed)
    words = sorted(ES_EN)
    pairs = []
    for _ in range(count):
        sentence = [rng.choice(words) for _ in range(rng.randint(3, 8))]
        pairs.append((" ".join(sentence), " ".join(ES_EN[word] for word in sentence)))
    return pairs


def write_corpus(directory, train=600, dev=40, test=40):
    """Writes train/dev/test.tsv under `directory` and returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, count, seed in (("train", train, 0), ("dev", dev, 1), ("test", test, 2)):
        lines = [f"{source}\t{target}\n" for source, target in word_for_word_pairs(count, seed)]
        (directory / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    return directory
