"""The tokenizer facts both sides share: the libraries a config may name and Megatron's file-built types.

    from nemo_launcher.contract.tokenizers import TOKENIZER_LIBRARIES, TokenizerLibrary, MEGATRON_TYPE_FILES

The schemas type their `library`/`tokenizer_library` keys with `TokenizerLibrary` (or a family's subset of it),
and the job side's tokenizer loaders refuse what is not in these tables, so a library or type added here is
accepted by the launcher and built by the job from one edit.
"""

import typing
from typing import Literal

# megatron: GPT-2 BPE (vocab.json + merges.txt) or WordPiece (vocab.txt); sentencepiece: a .model;
# huggingface: a tokenizer.json.
TokenizerLibrary = Literal["megatron", "sentencepiece", "huggingface"]
TOKENIZER_LIBRARIES: tuple[str, ...] = typing.get_args(TokenizerLibrary)

# WordPiece types of the megatron library -> whether the text is lower-cased before lookup.
WORDPIECE_TYPES: dict[str, bool] = {"BertWordPieceCase": False, "BertWordPieceLowerCase": True}
# The types the megatron library builds from files, and the config keys of the files each needs.
MEGATRON_TYPE_FILES: dict[str, tuple[str, ...]] = {
    "GPT2BPETokenizer": ("vocab_file", "merge_file"),
    **{name: ("vocab_file",) for name in WORDPIECE_TYPES},
}
MEGATRON_TYPES: tuple[str, ...] = tuple(MEGATRON_TYPE_FILES)
