"""T5/mT5 fine-tuning on the trainer core: the parts built from a `.nemo`, and the LightningModule that validates by
generating answers and writes the tuned `.nemo`.

    run_program(argv, prog, T5FinetuneConfig, tuning_recipe, build=build_tuning_parts, module_class=Seq2SeqTuningModule)

Everything the core does for pre-training holds here too (resuming exactly after kill -9 from step-<N> checkpoints,
SIGTERM/SIGUSR1 and max_time saves, TensorBoard, the run lock, exit codes): the model starts from the .nemo's weights
instead of random ones, and reads source/target text pairs (text_pairs.py) through the T5 recipe's forward step.
Training samples are drawn from the train_ds pairs by gpt.sft_data.MixedDataset (concat_sampling_probabilities,
a fresh seeded permutation per pass), a pure function of the seed, so a resumed run reads what an uninterrupted
one would have read next.

Validation, every trainer.val_check_interval steps and after the last one, per validation_ds file pair: the loss
over limit_val_batches global batches, and greedy answers to the same questions scored by the config's metric
(exact_string_match, or SQuAD's exact match and F1 against every accepted answer). Several pairs are also pooled
as metric.average says.
"""

import dataclasses
import logging
import shutil
from pathlib import Path

import torch

from ...contract.model_facts import facts_of_model
from ...contract.model_rules import check_against_model
from ..common.config import JobConfigError
from ..core.module import TrainingModule
from ..core.recipe import Recipe, Sequences
from .text_pairs import EncodedPairs, PairEncoder, read_pairs

log = logging.getLogger(__name__)


def _sequences(model) -> Sequences:
    train = model.data.train_ds
    return Sequences(train.max_src_seq_length, train.max_tgt_seq_length)


def tuning_recipe(cfg) -> Recipe:
    from .recipe import T5

    # The model and the data come from build_tuning_parts; the forward step and loss are pre-training's.
    return dataclasses.replace(T5, sequences=_sequences, flops_per_token=None, summary_items=_summary_items)


def _summary_items(cfg, outcome):
    return [("started from", cfg.model.restore_from_path)]


@dataclasses.dataclass
class ValidationFile:
    label: str  # the pair's name in logs and metrics
    pairs: list[dict]
    dataset: EncodedPairs


def _validation_files(cfg, encoder: PairEncoder) -> list[ValidationFile]:
    section = cfg.model.data.validation_ds
    files = []
    for index, (source, target, answers) in enumerate(zip(section.sources(), section.targets(), section.answers())):
        pairs = read_pairs(source, target, answers, key="model.data.validation_ds")
        label = section.names[index] if section.names else Path(source).stem
        files.append(ValidationFile(label, pairs, EncodedPairs(pairs, encoder)))
    return files


def load_base_model(path: str, tp: int, dropout, precision: str, key: str = "model.restore_from_path"):
    """(this rank's T5Model with the .nemo's weights, in training mode, the .nemo's config, tokenizer). The
    architecture is the .nemo's; dropout, (hidden, attention), is the tuning config's. `key` names the path in
    errors."""
    from megatron.core import parallel_state

    from ...contract.schemas.t5_training import T5ModelSection
    from ..common.config import bind
    from ..common.tokenizer import load_tokenizer
    from ..core.nemo_archive import layout_of, load_nemo_shard, load_weights, padded_vocab_of, read_nemo_config
    from ..core.shards import split_state_dict
    from .shards import t5_shard_layout
    from .standalone import build_inference_model, inference_section, load_t5_nemo

    if not Path(path).is_file():
        raise JobConfigError(f"{key}: {path} does not exist")
    nemo_config = read_nemo_config(path)
    section = bind(T5ModelSection, nemo_config, "model")
    if section.num_attention_heads % tp:
        raise JobConfigError(
            f"model.tensor_model_parallel_size: {tp} does not divide the {section.num_attention_heads} "
            f"attention heads of {path}; pick a TP that divides them"
        )
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    if layout_of(nemo_config) == (tp, 1):
        state_dict = load_nemo_shard(path, tp_rank, 0)
    else:  # another layout: merged, then cut for this TP (each rank reads the archive whole once)
        _, full = load_t5_nemo(path)
        state_dict = split_state_dict(full, t5_shard_layout(nemo_config, tp), tp_rank, 0)
    section = dataclasses.replace(
        inference_section(section, tp), hidden_dropout=dropout[0], attention_dropout=dropout[1]
    )
    tokenizer = load_tokenizer(**dataclasses.asdict(section.tokenizer))
    model = build_inference_model(section, padded_vocab_of(state_dict, tp, tokenizer.vocab_size), precision)
    load_weights(model, state_dict, str(path))
    return model.train(), nemo_config, tokenizer


def check_cpu_precision(trainer) -> None:
    if trainer.accelerator == "cpu" and trainer.precision_name() != "fp32":
        raise JobConfigError(
            f"trainer.precision: {trainer.precision} needs accelerator gpu (megatron-core's "
            "mixed-precision optimizer only wraps CUDA tensors); use 32 on the CPU"
        )


def build_tuning_parts(recipe: Recipe, cfg, placement, on_gpu: bool, resume=None):
    """The core's parts for a fine-tuning run (what parts.build_parts is for pre-training). A resumed run loads the
    .nemo too, then the strategy overwrites every weight with the checkpoint's."""
    from ..core.parts import assemble_parts
    from ..core.schedule import BatchSchedule
    from ..tuning.sft_data import MixedDataset

    check_cpu_precision(cfg.trainer)
    m = cfg.model
    model, nemo_config, tokenizer = load_base_model(
        m.restore_from_path,
        m.tensor_model_parallel_size,
        (m.hidden_dropout, m.attention_dropout),
        cfg.trainer.precision_name(),
    )
    train_ds = cfg.model.data.train_ds
    encoder = PairEncoder(tokenizer, train_ds.max_src_seq_length, train_ds.max_tgt_seq_length)
    # The launcher's rules against the .nemo opened here (one the launcher could not read, or replaced since).
    check_against_model(facts_of_model(nemo_config, m.restore_from_path), cfg.stage, dataclasses.asdict(cfg))
    sources = [read_pairs(s, t, key="model.data.train_ds") for s, t in zip(train_ds.sources(), train_ds.targets())]
    validation = _validation_files(
        cfg,
        PairEncoder(
            tokenizer, cfg.model.data.validation_ds.max_src_seq_length, cfg.model.data.validation_ds.max_tgt_seq_length
        ),
    )

    def datasets(batches: BatchSchedule):
        mixed = MixedDataset(
            sources,
            train_ds.concat_sampling_probabilities,
            batches.total_samples(cfg.trainer.max_steps),
            cfg.model.seed,
        )
        return EncodedPairs(mixed, encoder), validation or None, None

    counts = ", ".join(f"{len(pairs)} from {name}" for pairs, name in zip(sources, train_ds.sources()))
    parts = assemble_parts(
        recipe,
        cfg,
        placement,
        on_gpu,
        False,
        tokenizer,
        model.embedding.word_embeddings.weight.shape[0] * cfg.model.tensor_model_parallel_size,
        model.config,
        [model],
        datasets,
        data_description=f"text pairs ({counts}), {len(validation)} validation pair(s)",
    )
    parts.nemo_config = nemo_config
    return parts


class Seq2SeqTuningModule(TrainingModule):
    """The core's module, reading text pairs, validating by generation, and writing the tuned .nemo at the end."""

    def __init__(self, parts):
        super().__init__(parts)
        self._file_losses: dict[int, list[dict[str, torch.Tensor]]] = {}

    # ---- data --------------------------------------------------------------------------------------------------------
    def train_dataloader(self):
        # MixedDataset shuffles on its own; the sampler reads it in order from the step reached.
        return self.step_loader(self.parts.cfg.model.data.train_ds.num_workers)

    def val_dataloader(self):
        from ..core.samplers import EvalBatchSampler, make_loader

        p = self.parts
        loaders = []
        for item in p.valid_dataset or []:
            sampler = EvalBatchSampler(
                len(item.dataset),
                p.cfg.model.global_batch_size,
                p.cfg.model.micro_batch_size,
                p.dp_rank,
                p.dp_size,
                p.cfg.trainer.limit_val_batches,
            )
            if len(sampler) == 0:
                raise JobConfigError(
                    f"model.data.validation_ds: {item.label} has {len(item.dataset)} pairs, fewer than one "
                    f"global batch ({p.cfg.model.global_batch_size}); validate on more pairs or set "
                    "trainer.limit_val_batches: 0"
                )
            loaders.append(
                make_loader(
                    item.dataset, sampler, p.cfg.model.data.validation_ds.num_workers, p.on_gpu, p.cfg.model.seed
                )
            )
        return loaders

    # ---- validation --------------------------------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._file_losses = {}

    def validation_step(self, batch, batch_idx, dataloader_idx: int = 0):
        losses = self._evaluate_batch(batch)
        if losses is not None:
            self._file_losses.setdefault(dataloader_idx, []).append(losses)

    def on_validation_epoch_end(self) -> None:
        from ..core.module import _mean_of

        p = self.parts
        per_file = [
            p.reduce_last_stage_means(_mean_of(self._file_losses.get(i, []))) for i in range(len(p.valid_dataset))
        ]
        name = p.loss_name
        self.last_val_losses = {name: sum(losses[name] for losses in per_file) / len(per_file)}
        metrics: dict[str, float] = {}
        if len(per_file) > 1:
            metrics.update({f"{item.label}_loss": losses[name] for item, losses in zip(p.valid_dataset, per_file)})
        metrics.update(self._generation_scores())
        self.last_val_metrics = metrics

    def _generation_scores(self) -> dict[str, float]:
        from ..common.qa_metrics import average_over_files
        from .scoring import score_answers

        p = self.parts
        section = p.cfg.model.data.validation_ds
        count = p.cfg.trainer.limit_val_batches * p.cfg.model.global_batch_size
        chunk = p.bare_chunks[0]
        per_file = {}
        for item in p.valid_dataset:
            # Every data-parallel rank answers its share of the questions the loss was computed on.
            mine = item.pairs[:count][p.dp_rank :: p.dp_size]
            predictions = answer_pairs(chunk, mine, item.dataset.encoder, p.cfg.model.micro_batch_size)
            per_file[item.label] = score_answers(section.metric.name, predictions, mine, self._sum_over_data_parallel)
        metrics: dict[str, float] = {}
        for score_name in next(iter(per_file.values()))[1]:
            pooled = {label: (examples, scores[score_name]) for label, (examples, scores) in per_file.items()}
            metrics[score_name] = average_over_files(pooled, section.metric.average)
            if len(per_file) > 1:
                metrics.update({f"{label}_{score_name}": score for label, (_, score) in pooled.items()})
        return metrics

    def _sum_over_data_parallel(self, values: list[float]) -> list[float]:
        """Sums per-rank totals over data-parallel ranks (tensor-parallel ranks hold the same ones: one counts)."""
        p = self.parts
        vector = torch.tensor(values if p.tp_rank == 0 else [0.0] * len(values), dtype=torch.float64, device=p.device)
        if p.placement.world_size > 1:
            torch.distributed.all_reduce(vector)
        return vector.tolist()

    # ---- the result --------------------------------------------------------------------------------------------------
    def write_outputs(self) -> dict[str, str]:
        """The tuned model as a TP=1 .nemo at exp_manager's path (evaluation and export reshard it as they need).
        Collective. A write that fails for lack of space or permission raises StorageFault (exit 74)."""
        path = save_tuned_nemo(self.parts, self.parts.cfg.exp_manager.nemo_path())
        return {"fine-tuned model": path}


def answer_pairs(model, pairs: list[dict], encoder: PairEncoder, batch_size: int) -> list[str]:
    """Greedy answers (decoded text) to the pairs' sources, batch_size sources per forward pass."""
    from .generate import greedy_answers

    predictions = []
    for start in range(0, len(pairs), batch_size):
        sources = [encoder.source_ids(pair["source"]) for pair in pairs[start : start + batch_size]]
        for ids in greedy_answers(model, sources, encoder.tokenizer, encoder.max_target):
            predictions.append(encoder.tokenizer.decode(ids))
    return predictions


def save_tuned_nemo(parts, path: str) -> str:
    """Every rank: the data-parallel replica 0 of each tensor-parallel rank hands its weights to rank 0, which merges
    them and writes one TP=1 archive with the base model's config (and tokenizer files)."""
    from ..common.storage import guarded_write, with_margin
    from ..core.nemo_archive import save_nemo
    from ..core.shards import merge_shards
    from .shards import t5_shard_layout
    from .standalone import host_state_dict

    target = Path(path)
    tp = parts.cfg.model.tensor_model_parallel_size
    state = host_state_dict(parts.bare_chunks[0])
    needed = 2 * tp * sum(t.numel() * t.element_size() for t in state.values())  # saved, then packed
    staging = target.parent / f".{target.name}.shards"
    advice = (
        f"Nothing was written to {target} (an earlier file there is unchanged). Free space there, or point "
        "exp_manager.explicit_log_dir (or base_results_dir) at a larger file system, then run the job again: it "
        "resumes from its last checkpoint and writes the model."
    )
    if tp > 1:
        if parts.dp_rank == 0:
            with guarded_write(target.parent, with_margin(needed), f"shard {parts.tp_rank} of {target.name}", advice):
                staging.mkdir(parents=True, exist_ok=True)
                torch.save(state, staging / f"tp{parts.tp_rank}.pt")
        torch.distributed.barrier()
    if parts.placement.rank == 0:
        try:
            if tp > 1:
                shards = {(t, 0): torch.load(staging / f"tp{t}.pt", weights_only=True) for t in range(tp)}
                state = merge_shards(shards, t5_shard_layout(parts.nemo_config, tp))
            config = dict(parts.nemo_config, tensor_model_parallel_size=1, pipeline_model_parallel_size=1)
            with guarded_write(target.parent, with_margin(needed), f"the fine-tuned model {target.name}", advice):
                save_nemo(target, config, state)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if parts.placement.world_size > 1:
        torch.distributed.barrier()
    return str(target)
