"""Caption -> a fixed number of token ids: start token, the caption's tokens (cut to fit), end token, padding.

    tok = load_clip_tokenizer(cfg.model.tokenizer)
    tok.encode("a red circle", 77) -> [1, 100, 35, ..., 2, 0, 0, ...];  tok.eos, tok.pad, tok.vocab_size

byte: UTF-8 bytes (0 pads, 1 starts, 2 ends, byte b is b + 3), no files. clip: CLIP's BPE through transformers'
CLIPTokenizer from the config's vocab.json and merges.txt (lower-cased, </w> word ends, <|startoftext|> and
<|endoftext|>); padding is id 0, as OpenAI's CLIP pads. The text tower reads its features at the first end token.
"""

from ...contract.schemas.clip_training import BYTE_VOCAB_SIZE
from ..common.config import JobConfigError

_PAD, _BOS, _EOS, _BYTE_OFFSET = 0, 1, 2, 3


class ByteTokenizer:
    vocab_size, pad, bos, eos = BYTE_VOCAB_SIZE, _PAD, _BOS, _EOS

    def encode(self, text: str, length: int) -> list[int]:
        body = [b + _BYTE_OFFSET for b in text.encode("utf-8")][: length - 2]
        ids = [_BOS, *body, _EOS]
        return ids + [_PAD] * (length - len(ids))


class ClipBpeTokenizer:
    pad = 0

    def __init__(self, vocab_file: str, merge_file: str):
        from transformers import CLIPTokenizer

        try:
            # transformers 5 reads the files through vocab= and merges=; its old vocab_file= and merges_file= are
            # swallowed as unknown keywords and leave a three-token vocabulary that maps every word to one id.
            self._tokenizer = CLIPTokenizer(vocab=vocab_file, merges=merge_file)
        except (OSError, ValueError) as error:
            raise JobConfigError(
                f"model.tokenizer: {vocab_file} and {merge_file} are no CLIP BPE files ({error})"
            ) from None
        self.vocab_size = len(self._tokenizer)
        self.bos, self.eos = self._tokenizer.bos_token_id, self._tokenizer.eos_token_id

    @property
    def hf(self):
        """transformers' tokenizer (to save beside a Hugging Face export)."""
        return self._tokenizer

    def encode(self, text: str, length: int) -> list[int]:
        ids = self._tokenizer(text, truncation=True, max_length=length)["input_ids"]
        ids[-1] = self.eos  # a cut caption still ends with the end token the text tower reads
        return ids + [self.pad] * (length - len(ids))


def load_clip_tokenizer(section):
    if section.library == "byte":
        return ByteTokenizer()
    return ClipBpeTokenizer(section.vocab_file, section.merge_file)
