"""Schemas of `data_preparation=rlhf/<name>`: preference data for the RLHF stages, in the format of
contract/preference_data.py, one dataclass per `dataset`:
- tiny_preferences: the generated rule-following set (preference_data.tiny_comparisons; chance 50%), plus a small
  pre-training corpus of its prompts and responses, for the quick start and the tests.
- comparisons: local comparison jsonl files converted (prompt/chosen/rejected lines, the seed's {"text"} line pairs,
  ranked response lists, Anthropic HH-RLHF's chosen/rejected dialogues). Nothing is downloaded.

    cfg = PreferencePreparation.from_dict(section)   # by `dataset`, the launcher before submitting; the step too
    cfg.steps()                                      # [StepPlan("preference_tiny")]: nemo_launcher.jobs.data.<step>

Both write into output_dir, for every split they have: <split>_pairs.jsonl, <split>_prompts.jsonl (PPO's prompts),
<split>_sft.jsonl ({"input": prompt text, "output": response text}: what the fine_tuning stage reads) and
metadata.json (tokenizer, counts, how the set was made; written last, so a set without it is incomplete). The tiny
set also writes corpus/<CORPUS_NAME>.{bin,idx}, a Megatron indexed dataset that `training=gpt3/tiny` pre-trains on
with run.preprocessed_dir pointed at <output_dir>/corpus.
"""

import dataclasses
from typing import Literal

from ..binding import config_fault, field_fault, nearest, non_negative_fields, positive, positive_fields
from ..preference_data import SPLITS
from ..tokenizers import MEGATRON_TYPE_FILES, TokenizerLibrary
from .data_preparation import OneStepDataStage
from .run import RunBase

STAGE = "data_preparation"
SFT_SUFFIX = "_sft.jsonl"
CORPUS_DIR = "corpus"  # under output_dir: what training.run.preprocessed_dir points at
CORPUS_NAME = "preferences_text_document"  # <output_dir>/corpus/<CORPUS_NAME>.bin/.idx
# One {"input", "output"} line per comparison with its best response (what a policy should learn), or one per
# response: the tiny set's SFT policy then writes both kinds of answer, which leaves PPO and DPO something to improve.
SftResponses = Literal["chosen", "all"]
# auto: each line's keys say its format; any other value refuses lines of the other formats.
ComparisonFormat = Literal["auto", "pairs", "text_pairs", "ranked", "hh_rlhf"]


def sft_file(directory: str, split: str) -> str:
    return f"{directory}/{split}{SFT_SUFFIX}"


def corpus_prefix(directory: str) -> str:
    """The tiny set's pre-training corpus, as model.data.data_prefix names it (no .bin/.idx)."""
    return f"{directory}/{CORPUS_DIR}/{CORPUS_NAME}"


@dataclasses.dataclass(frozen=True)
class PreferenceTokenizer:
    """The tokenizer the ids come from, with the keys of a GPT config's model.tokenizer (the models that read the
    data must use the same vocabulary: the RLHF jobs compare vocab_size with metadata.json's)."""

    library: TokenizerLibrary = "megatron"
    type: str | None = "GPT2BPETokenizer"  # library megatron: GPT2BPETokenizer or a BertWordPiece type
    model: str | None = None  # sentencepiece .model or huggingface tokenizer.json
    vocab_file: str | None = None  # GPT-2 vocab.json (or WordPiece vocab.txt)
    merge_file: str | None = None  # GPT-2 merges.txt

    def check(self, key: str) -> None:
        if self.library == "megatron" and self.type not in MEGATRON_TYPE_FILES:
            close = nearest(str(self.type), list(MEGATRON_TYPE_FILES))
            raise field_fault(
                self,
                key,
                "type",
                f"the megatron library builds {', '.join(MEGATRON_TYPE_FILES)}"
                + (f" (nearest: {', '.join(close)})" if close else ""),
            )
        for name, path in self.files():
            if not path:
                what = f"library {self.library}" + (f" with type {self.type}" if self.library == "megatron" else "")
                raise field_fault(self, key, name, f"{what} is built from this file; name it")

    def files(self) -> list[tuple[str, str | None]]:
        """(key, path) of every file the configured tokenizer is built from."""
        if self.library != "megatron":
            return [("model", self.model)]
        return [(name, getattr(self, name)) for name in MEGATRON_TYPE_FILES[self.type]]

    def spec(self) -> dict:
        """The tokenizer as metadata.json records it (and a model config's tokenizer section names it)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SplitCounts:
    """A count per split; a split of 0 writes no file."""

    train: int
    validation: int = 0
    test: int = 0

    def check(self, key: str) -> None:
        positive(f"{key}.train", self.train)
        non_negative_fields(self, key, "validation", "test")

    def items(self) -> list[tuple[str, int]]:
        return [(split, getattr(self, split)) for split in SPLITS if getattr(self, split)]


@dataclasses.dataclass(frozen=True)
class SplitFiles:
    """The comparison jsonl files of each split, read in order; a split with none writes no file."""

    train: list[str]
    validation: list[str] = dataclasses.field(default_factory=list)
    test: list[str] = dataclasses.field(default_factory=list)

    def check(self, key: str) -> None:
        if not self.train:
            raise config_fault(f"{key}.train", self.train, "list the training comparison files, e.g. [/data/a.jsonl]")
        for split in SPLITS:
            for index, path in enumerate(getattr(self, split)):
                if not path.startswith("/"):
                    raise config_fault(
                        f"{key}.{split}[{index}]", path, "must be an absolute path (the job does not start here)"
                    )

    def items(self) -> list[tuple[str, list[str]]]:
        return [(split, getattr(self, split)) for split in SPLITS if getattr(self, split)]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _PreferenceSet(OneStepDataStage):
    run: RunBase
    output_dir: str  # the pairs, prompts, SFT and metadata files (and the tiny corpus) go here
    tokenizer: PreferenceTokenizer
    sft_responses: SftResponses = "chosen"

    def check(self, key: str) -> None:
        if not self.output_dir.startswith("/"):
            raise field_fault(self, key, "output_dir", "must be an absolute path, e.g. ${data_dir}/rlhf/<name>")

    def tokenizer_reads(self) -> list[tuple[str, str]]:
        return [(f"{STAGE}.tokenizer.{name}", path) for name, path in self.tokenizer.files()]

    def reads(self) -> list[tuple[str, str]]:
        return self.tokenizer_reads()


@dataclasses.dataclass(frozen=True, kw_only=True)
class TinyPreferencesConfig(_PreferenceSet):
    step = "preference_tiny"
    dataset: Literal["tiny_preferences"]
    comparisons: SplitCounts  # prompts per split, each with responses_per_prompt responses ranked by the rule
    prompts: SplitCounts  # PPO's prompts per split (drawn apart from the comparisons)
    responses_per_prompt: int = 2  # more than 2: a ranked list, expanded into n(n-1)/2 pairs
    words_per_response: int = 6  # neighbours in a ranking differ by two agreeable words, so at least 2(n-1)
    seed: int = 1  # split i (train, validation, test) draws with seed+i, its prompts with seed+10+i
    corpus_comparisons: int = 1024  # comparisons whose prompt+response texts make the pre-training corpus; 0: none
    sft_responses: SftResponses = "all"

    def check(self, key: str) -> None:
        super().check(key)
        positive_fields(self, key, "words_per_response")
        non_negative_fields(self, key, "corpus_comparisons")
        if self.responses_per_prompt < 2:
            raise field_fault(self, key, "responses_per_prompt", "a comparison needs at least 2 responses")
        if 2 * (self.responses_per_prompt - 1) > self.words_per_response:
            raise field_fault(
                self,
                key,
                "words_per_response",
                f"{self.responses_per_prompt} ranked responses differ by two agreeable words each, so they need at "
                f"least {2 * (self.responses_per_prompt - 1)} words; raise it or lower responses_per_prompt",
            )

    def split_seed(self, split: str) -> int:
        return self.seed + SPLITS.index(split)

    def prompt_seed(self, split: str) -> int:
        return self.seed + 10 + SPLITS.index(split)

    def corpus_seed(self) -> int:
        return self.seed + 100


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComparisonsConfig(_PreferenceSet):
    step = "preference_comparisons"
    dataset: Literal["comparisons"]
    inputs: SplitFiles
    format: ComparisonFormat = "auto"
    # fail: the first bad line stops the step, naming file:line and why; skip: each is reported and counted
    on_malformed: Literal["fail", "skip"] = "fail"
    # Pairs whose prompt and longer response exceed this many tokens are left out (counted); null keeps all.
    max_seq_length: int | None = None

    def check(self, key: str) -> None:
        super().check(key)
        if self.max_seq_length is not None and self.max_seq_length < 2:
            raise field_fault(self, key, "max_seq_length", "a prompt and a response need at least 2 tokens; or null")

    def reads(self) -> list[tuple[str, str]]:
        return [
            (f"{STAGE}.inputs.{split}", path) for split, paths in self.inputs.items() for path in paths
        ] + self.tokenizer_reads()


DATASETS = {"tiny_preferences": TinyPreferencesConfig, "comparisons": ComparisonsConfig}


class PreferencePreparation:
    """Binds a data_preparation=rlhf/<name> section to the schema its `dataset` names."""

    @staticmethod
    def from_dict(data, stage: str = STAGE) -> TinyPreferencesConfig | ComparisonsConfig:
        dataset = data.get("dataset") if isinstance(data, dict) else None
        if dataset not in DATASETS:
            raise config_fault(f"{stage}.dataset", dataset, f"choose one of {', '.join(DATASETS)}")
        return DATASETS[dataset].from_dict(data, stage)
