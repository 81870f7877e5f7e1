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

# A second domain, no word shared with the first: what the fine-tuning tests move a run to.
ES_EN_OFFICE = {
    "la": "the",
    "mesa": "table",
    "silla": "chair",
    "puerta": "door",
    "ventana": "window",
    "abre": "opens",
    "cierra": "closes",
    "limpia": "cleans",
    "mira": "watches",
    "nueva": "new",
    "vieja": "old",
    "blanca": "white",
    "negra": "black",
    "lámpara": "lamp",
    "carta": "letter",
    "escribe": "writes",
}


def word_for_word_pairs(count, seed, glossary=ES_EN):
    """Random Spanish word strings and their word-for-word English glosses (`glossary`)."""
    rng = random.Random(seed)
    words = sorted(glossary)
    pairs = []
    for _ in range(count):
        sentence = [rng.choice(words) for _ in range(rng.randint(3, 8))]
        pairs.append((" ".join(sentence), " ".join(glossary[word] for word in sentence)))
    return pairs


def write_corpus(directory, train=600, dev=40, test=40, glossary=ES_EN):
    """Writes train/dev/test.tsv of `glossary`'s sentences under `directory` and returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, count, seed in (("train", train, 0), ("dev", dev, 1), ("test", test, 2)):
        pairs = word_for_word_pairs(count, seed, glossary)
        lines = [f"{source}\t{target}\n" for source, target in pairs]
        (directory / f"{split}.tsv").write_text("".join(lines), encoding="utf-8")
    return directory
