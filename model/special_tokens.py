"""The reserved tokens every vocabulary of the project starts with, and their ids: their one home.

Padding is id 0 (the masks rely on it), and every tokenizer (`model.tokenizer`) and decoder
(`model.decoding`) uses these ids.
"""

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")
