"""Training a scalar-head reward model on preference pairs, on the tuning wing and the trainer core, any family whose
model reward_model.py can build: the pairs data, the Bradley-Terry loss, the method and the module.

    data = PairData(train_files, validation_files, test_files, max_seq_length, length_key, num_workers)
    method = RewardHeadMethod(output_path)         # every weight trains; writes the reward-model .nemo at the end
    recipe = dataclasses.replace(family_recipe, **reward_recipe_fields(method, data, max_seq_length))
    module_class = lambda parts: RewardModule(parts, job)

The loss of a micro-batch of m pairs is the mean over its pairs of -log sigmoid(r_chosen - r_rejected), where r is the
head's scalar at the last token of each row (the response's end-of-document id). Reported with it: accuracy (share
of pairs with r_chosen > r_rejected; chance is 1/2) and margin (mean r_chosen - r_rejected); validation and the test
split log all three (val_loss, val_accuracy, val_margin; test_*).
"""

from functools import partial

import torch
import torch.nn.functional as F

from ..core.module import _mean_of
from ..core.recipe import Sequences
from ..core.samplers import EvalBatchSampler, make_loader
from ..tuning.base import Method, TuningModule
from .pairs import PairsDataset, RepeatedPairs, check_vocabulary, collate_pairs, read_pairs, split_pair_microbatches
from .pairs import split_pairs as halves
from .reward_model import save_scalar_model

LOSS_NAMES = ("rm loss", "accuracy", "margin")


def pairwise_loss(lengths: torch.Tensor, output: torch.Tensor):
    """(loss, {"rm loss", "accuracy", "margin"}) of a micro-batch's model output [2m, s, 1] (chosen rows first), as
    megatron's schedules expect a loss_func to return."""
    per_position = output.squeeze(-1).float()
    rewards = per_position.gather(1, (lengths.to(per_position.device) - 1).unsqueeze(1)).squeeze(1)
    chosen, rejected = halves(rewards)
    difference = chosen - rejected
    loss = -F.logsigmoid(difference).mean()
    # The schedule divides the returned loss in place; report copies.
    return loss, {
        "rm loss": loss.detach().clone(),
        "accuracy": (difference > 0).float().mean().detach(),
        "margin": difference.mean().detach(),
    }


def reward_forward_step(data_iterator, model):
    """megatron-core's forward_step_func for a micro-batch of pairs: the head's scalars at every position, then the
    pairwise loss at each row's last token."""
    batch = next(data_iterator)
    output = model(batch["tokens"], batch["position_ids"], None)
    return output, partial(pairwise_loss, batch["lengths"])


def reward_recipe_fields(data: "PairData", max_seq_length: int, figures: dict[str, dict[str, float]]) -> dict:
    """What a family's recipe changes for reward-model training (dataclasses.replace(recipe, **fields)). `figures`:
    the dict RewardModule fills with the newest validation and test means, shown in the closing summary."""
    return dict(
        forward_step=reward_forward_step,
        loss_names=LOSS_NAMES,
        sequences=lambda model: Sequences(max_seq_length),
        split_microbatches=split_pair_microbatches,
        flops_per_token=None,
        epoch_samples=lambda cfg: data.train_count(),
        summary_items=lambda cfg, outcome: summary_lines(figures),
    )


def summary_lines(figures: dict[str, dict[str, float]]) -> list[tuple[str, str]]:
    """("val accuracy", "0.9531"), ... for the closing summary (which shows each split's loss itself)."""
    return [
        (f"{split} {name}", f"{values[name]:.4f}")
        for split, values in figures.items()
        for name in LOSS_NAMES[1:]
        if name in values
    ]


class PairData:
    """The pairs files of each split (read in order and concatenated), checked against the model's vocabulary and
    longest sequence when the job has its tokenizer."""

    def __init__(self, splits: dict[str, list[str]], max_seq_length: int, key: str, num_workers: int = 0):
        self.splits, self.max_seq_length, self.key, self.num_workers = splits, max_seq_length, key, num_workers
        self._read: dict[str, list] = {}

    def pairs(self, split: str, vocab_size: int) -> list:
        if split not in self._read:
            found = []
            for path in self.splits.get(split, ()):
                where = f"{self.key}.data.data_prefix.{split}"
                check_vocabulary(path, vocab_size, where)
                found += read_pairs(path, vocab_size, self.max_seq_length, f"{self.key}.encoder_seq_length")
            self._read[split] = found
        return self._read[split]

    def train_count(self) -> int:
        """Training pairs in one pass, counted by lines (the launcher-free count a run sized in epochs needs before
        the tokenizer is loaded; read_pairs refuses blank or bad lines later)."""
        total = 0
        for path in self.splits["train"]:
            with open(path, encoding="utf-8") as handle:
                total += sum(1 for line in handle if line.strip())
        return total

    def collate(self, tokenizer):
        return partial(collate_pairs, pad_id=tokenizer.eod)

    def train_dataset(self, tokenizer, size: int, seed: int):
        return RepeatedPairs(self.pairs("train", tokenizer.vocab_size), size, seed)

    def validation_sets(self, tokenizer):
        if "validation" not in self.splits:
            return []
        return [("validation", PairsDataset(self.pairs("validation", tokenizer.vocab_size)))]

    def test_dataset(self, tokenizer):
        if "test" not in self.splits:
            return None
        return PairsDataset(self.pairs("test", tokenizer.vocab_size))

    def describe(self) -> str:
        return ", ".join(self.splits["train"])

    def validation_metrics(self, job, module) -> dict[str, float]:
        return {}  # accuracy and margin come with the loss (LOSS_NAMES)


class RewardHeadMethod(Method):
    """Reward-model training: the loaded model already carries its scalar head (reward_model.py builds it in place
    of the output layer, fresh or from a reward-model .nemo); every weight trains, the head's with the transformer's
    (not its bias: see attach).
    Checkpoints hold the whole model, as fine-tuning's do; the result is a reward-model .nemo."""

    name = "reward model (scalar head, all weights)"
    freezes_base = False

    def __init__(self, output: str):
        self.output = output

    def attach(self, model: torch.nn.Module, job) -> None:
        """Keeps the head's bias as loaded: the pairwise loss sees only differences of rewards, so the bias gets a
        gradient of zero up to rounding, which Adam would blow up into steps of the learning rate (a random walk
        that differs between TP layouts)."""
        if not hasattr(model, "reward_head"):
            raise RuntimeError("the reward model is built with its head (reward_model.build_scalar_model)")
        model.reward_head.bias.requires_grad_(False)

    def forward_step(self, data_iterator, model):
        return reward_forward_step(data_iterator, model)

    def write(self, module, job) -> dict[str, str]:
        save_scalar_model(job.model, job.nemo_config, self.output, job.stage, module.parts.placement)
        return {"reward model": self.output}


class RewardModule(TuningModule):
    """The tuning module with every reported value (loss, accuracy, margin) kept at validation, and the test split
    read through the pairs collate; the newest of both land in the job's `figures` for the summary."""

    def on_validation_epoch_end(self) -> None:
        batches = [losses for per_set in self._file_losses for losses in per_set]
        self.last_val_losses = self.parts.reduce_last_stage_means(_mean_of(batches))  # every rank: a collective
        self.last_val_metrics = {}
        if self.last_val_losses is not None:
            self.tuning.figures["val"] = dict(self.last_val_losses)

    def evaluate_test_split(self) -> float | None:
        loss = super().evaluate_test_split()
        if loss is not None:
            self.tuning.figures["test"] = dict(self.last_test_losses)
        return loss

    def _eval_loader(self, dataset, limit: int):
        p = self.parts
        if dataset is None or limit == 0:
            return []
        sampler = EvalBatchSampler(
            len(dataset), p.cfg.model.global_batch_size, p.cfg.model.micro_batch_size, p.dp_rank, p.dp_size, limit
        )
        return make_loader(dataset, sampler, self.tuning.num_workers, p.on_gpu, p.cfg.model.seed, self.tuning.collate)
