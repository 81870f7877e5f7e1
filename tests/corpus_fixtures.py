"""Hand-checked verse texts and pairs for the corpus tests (tests/training/corpus/).

Taken from the cleaned RV1909 (Spanish) and WEB (English) texts, both public
domain, with the verse numbers each module gives them. Jonah 2 is one of the
chapters where the RV1909 module follows the Hebrew numbering: its 2:1 is the
WEB's 1:17 and its 1:17 slot is empty, so pairing by number shifts the chapter
by one verse. Jonah 1 and 3 are numbered alike in both.
"""

# (chapter, verse) -> (RV1909 text, WEB text); '' marks an empty verse slot.
JONAH = {
    (1, 12): (
        "El les respondió: Tomadme, y echadme á la mar, y la mar se os quietará: porque yo sé que por mí ha venido esta grande tempestad sobre vosotros.",
        "He said to them, “Take me up, and throw me into the sea. Then the sea will be calm for you; for I know that because of me this great storm is on you.”",
    ),
    (1, 13): (
        "Y aquellos hombres trabajaron por tornar la nave á tierra; mas no pudieron, porque la mar iba á más, y se embravecía sobre ellos.",
        "Nevertheless the men rowed hard to get them back to the land; but they could not, for the sea grew more and more stormy against them.",
    ),
    (1, 14): (
        "Entonces clamaron á Jehová, y dijeron: Rogámoste ahora, Jehová, que no perezcamos nosotros por la vida de aqueste hombre, ni pongas sobre nosotros la sangre inocente: porque tú, Jehová, has hecho como has querido.",
        "Therefore they cried to Yahweh, and said, “We beg you, Yahweh, we beg you, don’t let us die for this man’s life, and don’t lay on us innocent blood; for you, Yahweh, have done as it pleased you.”",
    ),
    (1, 15): (
        "Y tomaron á Jonás, y echáronlo á la mar; y la mar se quietó de su furia.",
        "So they took up Jonah and threw him into the sea; and the sea ceased its raging.",
    ),
    (1, 16): (
        "Y temieron aquellos hombres á Jehová con gran temor; y ofrecieron sacrificio á Jehová, y prometieron votos.",
        "Then the men feared Yahweh exceedingly; and they offered a sacrifice to Yahweh and made vows.",
    ),
    (1, 17): (
        "",
        "Yahweh prepared a huge fish to swallow up Jonah, and Jonah was in the belly of the fish three days and three nights.",
    ),
    (2, 1): (
        "Mas Jehová había prevenido un gran pez que tragase á Jonás: y estuvo Jonás en el vientre del pez tres días y tres noches.",
        "Then Jonah prayed to Yahweh, his God, out of the fish’s belly.",
    ),
    (2, 2): (
        "Y oró Jonás desde el vientre del pez á Jehová su Dios,",
        "He said, “I called because of my affliction to Yahweh. He answered me. Out of the belly of Sheol I cried. You heard my voice.",
    ),
    (2, 3): (
        "Y dijo: Clamé de mi tribulación á Jehová, y él me oyó; del vientre del sepulcro clamé, y mi voz oiste.",
        "For you threw me into the depths, in the heart of the seas. The flood was all around me. All your waves and your billows passed over me.",
    ),
    (2, 4): (
        "Echásteme en el profundo, en medio de los mares, y rodeóme la corriente; todas tus ondas y tus olas pasaron sobre mí.",
        "I said, ‘I have been banished from your sight; yet I will look again toward your holy temple.’",
    ),
    (2, 5): (
        "Y yo dije: Echado soy de delante de tus ojos: mas aun veré tu santo templo.",
        "The waters surrounded me, even to the soul. The deep was around me. The weeds were wrapped around my head.",
    ),
    (2, 6): (
        "Las aguas me rodearon hasta el alma, rodeóme el abismo; la ova se enredó á mi cabeza.",
        "I went down to the bottoms of the mountains. The earth barred me in forever; yet you have brought my life up from the pit, Yahweh my God.",
    ),
    (2, 7): (
        "Descendí á las raíces de los montes; la tierra echó sus cerraduras sobre mí para siempre: mas tú sacaste mi vida de la sepultura, oh Jehová Dios mío.",
        "“When my soul fainted within me, I remembered Yahweh. My prayer came in to you, into your holy temple.",
    ),
    (2, 8): (
        "Cuando mi alma desfallecía en mí, acordéme de Jehová; y mi oración entró hasta ti en tu santo templo.",
        "Those who regard vain idols forsake their own mercy.",
    ),
    (2, 9): (
        "Los que guardan las vanidades ilusorias, su misericordia abandonan.",
        "But I will sacrifice to you with the voice of thanksgiving. I will pay that which I have vowed. Salvation belongs to Yahweh.”",
    ),
    (2, 10): (
        "Yo empero con voz de alabanza te sacrificaré; pagaré lo que prometí. La salvación pertenece á Jehová. Y mandó Jehová al pez, y vomitó á Jonás en tierra.",
        "Then Yahweh spoke to the fish, and it vomited out Jonah on the dry land.",
    ),
    (3, 1): (
        "Y fué palabra de Jehová segunda vez á Jonás, diciendo:",
        "Yahweh’s word came to Jonah the second time, saying,",
    ),
    (3, 2): (
        "Levántate, y ve á Nínive, aquella gran ciudad, y publica en ella el pregón que yo te diré.",
        "“Arise, go to Nineveh, that great city, and preach to it the message that I give you.”",
    ),
    (3, 3): (
        "Y levantóse Jonás, y fué á Nínive, conforme á la palabra de Jehová. Y era Nínive ciudad sobremanera grande, de tres días de camino.",
        "So Jonah arose, and went to Nineveh, according to Yahweh’s word. Now Nineveh was an exceedingly great city, three days’ journey across.",
    ),
    (3, 4): (
        "Y comenzó Jonás á entrar por la ciudad, camino de un día, y pregonaba diciendo: De aquí á cuarenta días Nínive será destruída.",
        "Jonah began to enter into the city a day’s journey, and he cried out, and said, “In forty days, Nineveh will be overthrown!”",
    ),
    (3, 5): (
        "Y los hombres de Nínive creyeron á Dios, y pregonaron ayuno, y vistiéronse de sacos desde el mayor de ellos hasta el menor de ellos.",
        "The people of Nineveh believed God; and they proclaimed a fast and put on sackcloth, from their greatest even to their least.",
    ),
    (3, 6): (
        "Y llegó el negocio hasta el rey de Nínive, y levantóse de su silla, y echó de sí su vestido, y cubrióse de saco, y se sentó sobre ceniza.",
        "The news reached the king of Nineveh, and he arose from his throne, took off his royal robe, covered himself with sackcloth, and sat in ashes.",
    ),
    (3, 7): (
        "E hizo pregonar y anunciar en Nínive, por mandado del rey y de sus grandes, diciendo: Hombres y animales, bueyes y ovejas, no gusten cosa alguna, no se les dé alimento, ni beban agua:",
        "He made a proclamation and published through Nineveh by the decree of the king and his nobles, saying, “Let neither man nor animal, herd nor flock, taste anything; let them not feed, nor drink water;",
    ),
    (3, 8): (
        "Y que se cubran de saco los hombres y los animales, y clamen á Dios fuertemente: y conviértase cada uno de su mal camino, de la rapiña que está en sus manos.",
        "but let them be covered with sackcloth, both man and animal, and let them cry mightily to God. Yes, let them turn everyone from his evil way and from the violence that is in his hands.",
    ),
    (3, 9): (
        "¿Quién sabe si se volverá y arrepentirá Dios, y se apartará del furor de su ira, y no pereceremos?",
        "Who knows whether God will not turn and relent, and turn away from his fierce anger, so that we might not perish?”",
    ),
    (3, 10): (
        "Y vió Dios lo que hicieron, que se convirtieron de su mal camino: y arrepintióse del mal que había dicho les había de hacer, y no lo hizo.",
        "God saw their works, that they turned from their evil way. God relented of the disaster which he said he would do to them, and he didn’t do it.",
    ),
}

# Length-ratio model fitted on the whole paired corpus (stats.json of the build),
# so the tests judge these chapters the way the real build does.
FULL_CORPUS_LENGTH_RATIO = 1.0432
FULL_CORPUS_LENGTH_SCALE = 1.4031

# 1 John 5:7: the RV1909 has the Comma Johanneum, the WEB does not.
COMMA_JOHANNEUM = (
    "Porque tres son los que dan testimonio en el cielo, el Padre, el Verbo, y el Espíritu Santo: y estos tres son uno.",
    "For there are three who testify:",
)
ORDINARY_PAIR = (
    "Este es Jesucristo, que vino por agua y sangre: no por agua solamente, sino por agua y sangre. Y el Espíritu es el que da testimonio: porque el Espíritu es la verdad.",
    "This is he who came by water and blood, Jesus Christ; not with the water only, but with the water and the blood. It is the Spirit who testifies, because the Spirit is the truth.",
)

# Pairs any TSV reader must read back as written: accents, ñ, ü, inverted marks.
GOOD_PAIRS = [
    ("¿Dónde está la estación?", "Where is the station?"),
    ("El niño comió una manzana.", "The boy ate an apple."),
    ("Mañana iré a Córdoba con mi pingüino.", "Tomorrow I will go to Córdoba with my penguin."),
]
