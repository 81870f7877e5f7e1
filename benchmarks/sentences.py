"""Sentences the benchmarks send to a real translator: Spanish, its source language.

Everyday phrases from one word to seventeen, so that batches mix short and long inputs as real
traffic does (a merged batch steps until its longest sentence ends).
"""

SPANISH_SENTENCES = (
    "Hace buen tiempo hoy.",
    "¿Dónde está la estación de tren?",
    "Me gustaría una taza de café, por favor.",
    "Esta es una frase más larga para comprobar que el servidor funciona con entradas de "
    "longitudes variadas.",
    "Gracias.",
    "¿Cuánto cuesta?",
    "Mañana por la mañana vamos al museo.",
    "Buenas noches.",
)
