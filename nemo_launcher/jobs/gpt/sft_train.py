"""The supervised fine-tuning loop shared by fine-tuning (all weights) and PEFT (adapters only).

    session = start(cfg, placement)                     # process group, megatron state, the .nemo's model
    ... optionally freeze the model and attach adapters (peft) ...
    history = train(session)                            # trainer.max_steps optimizer steps, validations
    save_model(session, session.model, "out.nemo")      # TP-sharded archives when TP > 1

The numerics are the pre-training trainer core's pieces (nemo_launcher/jobs/core): megatron DDP and megatron's
optimizer (optim.py), `run_microbatches` (steps.py) with GPT's forward step (recipe.py), the step sampler
(samplers.py), the cosine schedule (schedule.py). The loop
around them is a plain one rather than the trainer's Lightning module: SFT samples vary in length and
are padded per step (to the step's longest sample, not to max_seq_length, which on SQuAD would be ~8x
the compute), which the pre-training module's fixed-shape loaders do not do. A fine-tuning run is
short and restarts from its `.nemo`; it keeps no resumable checkpoints.
"""
import dataclasses
import json
import logging
import shutil
import time
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from ..common.config import JobConfigError
from ..common.distributed import Placement
from ...contract.schemas.gpt_sft import DatasetSection, SftConfig
from .sft_data import EncodedDataset, MixedDataset, SampleEncoder, collate, read_jsonl

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Session:
    cfg: SftConfig
    placement: Placement
    device: torch.device
    precision: str  # fp32, bf16 or fp16
    nemo_config: Dict[str, Any]  # the model config read from the .nemo (tokenizer keys point at extracted files)
    tokenizer: Any
    model: torch.nn.Module  # bare GPTModel: state dicts, generation
    tp_rank: int
    dp_rank: int
    dp_size: int
    started: float = dataclasses.field(default_factory=time.monotonic)  # for the closing summary's time


def start(cfg: SftConfig, placement: Placement) -> Session:
    """Joins the processes, builds the model the .nemo describes (with this config's dropout) and loads it."""
    # Imported before start_model_parallel applies the CPU shim, which patches only modules already loaded.
    import megatron.core.distributed  # noqa: F401
    import megatron.core.optimizer  # noqa: F401
    from megatron.core import parallel_state

    from ..common.config import bind
    from ..common.tokenizer import load_tokenizer
    from ...contract.schemas.gpt_training import ModelSection
    from .nemo_archive import layout_of, load_nemo, load_nemo_shard, load_weights, padded_vocab_of, read_nemo_config
    from .shards import ShardLayout, split_state_dict
    from .standalone import build_inference_model, inference_section, on_gpu, start_model_parallel

    gpu = on_gpu()
    if (cfg.trainer.accelerator == "gpu") != gpu:
        raise JobConfigError(f"trainer.accelerator: {cfg.trainer.accelerator}, but this machine "
                             f"{'has' if gpu else 'has no'} GPU; set {'gpu' if gpu else 'cpu'}")
    tp = cfg.model.tensor_model_parallel_size
    dp_size = cfg.data_parallel_size(placement.world_size)
    path = cfg.model.restore_from_path
    nemo_config = read_nemo_config(path)
    start_model_parallel(tp, 1, seed=cfg.model.seed)
    section = bind(ModelSection, nemo_config, "model")
    section = dataclasses.replace(inference_section(section, tp, 1), hidden_dropout=cfg.model.hidden_dropout,
                                  attention_dropout=cfg.model.attention_dropout)
    spec = section.tokenizer
    tokenizer = load_tokenizer(spec.library, spec.type, spec.model, spec.vocab_file, spec.merge_file)
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    if layout_of(nemo_config) == (tp, 1):
        state_dict = load_nemo_shard(path, tp_rank, 0)
    else:  # an archive of another layout is merged and cut again for this TP (each rank reads it whole once)
        _, full = load_nemo(path)
        state_dict = split_state_dict(full, ShardLayout.of(nemo_config, tp, 1), tp_rank, 0)
    precision = cfg.trainer.precision_name()
    model = build_inference_model(section, padded_vocab_of(state_dict, tp, tokenizer.vocab_size), precision)
    load_weights(model, state_dict, path)
    model.train()
    return Session(cfg, placement, next(model.parameters()).device, precision, nemo_config, tokenizer, model,
                   tp_rank, parallel_state.get_data_parallel_rank(), dp_size)


def _loader(dataset, sampler, section: DatasetSection, session: Session) -> torch.utils.data.DataLoader:
    from ..common.helper_processes import ignore_stop_signals

    return torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, num_workers=section.num_workers, pin_memory=session.device.type == "cuda",
        worker_init_fn=ignore_stop_signals,  # scancel signals workers too; the job ends them (helper_processes.py)
        collate_fn=partial(collate, pad_id=session.tokenizer.eod, answer_only_loss=session.cfg.model.answer_only_loss),
    )


def _mean_over_data_parallel(session: Session, value: Optional[torch.Tensor]) -> Optional[float]:
    """Mean of a per-rank loss over data-parallel ranks (TP ranks hold the same value; one counts)."""
    contributes = value is not None and session.tp_rank == 0
    pair = torch.tensor([float(value) if contributes else 0.0, float(contributes)], device=session.device)
    if session.placement.world_size > 1:
        torch.distributed.all_reduce(pair)
    total, count = pair.tolist()
    return total / count if count else None


class Validator:
    """Validation loss per file over `limit_val_batches` global batches (the same samples every time),
    and with metric exact_string_match, the share of greedy answers equal to a reference answer."""

    def __init__(self, session: Session):
        from ..core.samplers import EvalBatchSampler

        self.session = session
        cfg = session.cfg
        section = cfg.model.data.validation_ds
        self.encoder = SampleEncoder(session.tokenizer, section)
        self.files = []
        for index, name in enumerate(section.file_names):
            examples = read_jsonl(name, section.context_key, section.label_key)
            label = section.names[index] if section.names else Path(name).stem
            sampler = EvalBatchSampler(len(examples), cfg.model.global_batch_size, cfg.model.micro_batch_size,
                                       session.dp_rank, session.dp_size, cfg.trainer.limit_val_batches)
            if len(sampler) == 0 and cfg.trainer.limit_val_batches > 0:
                log.warning("validation file %s has %d samples, fewer than one global batch (%d): no loss is computed on it",
                            name, len(examples), cfg.model.global_batch_size)
            loader = _loader(EncodedDataset(examples, self.encoder), sampler, section, session)
            self.files.append((label, examples, loader))

    def __call__(self, ddp_model) -> Dict[str, float]:
        cfg, session = self.session.cfg, self.session
        metrics: Dict[str, float] = {}
        ddp_model.eval()
        with torch.no_grad():
            for label, examples, loader in self.files:
                losses = []
                for batch in loader:
                    batch = {k: v.to(session.device) for k, v in batch.items()}
                    loss = _step_loss(ddp_model, batch, cfg.model.micro_batch_size, forward_only=True)
                    if loss is not None:
                        losses.append(loss)
                mean = _mean_over_data_parallel(session, torch.stack(losses).mean() if losses else None)
                if mean is not None:
                    metrics[f"validation_loss_{label}"] = mean
                if cfg.model.data.validation_ds.metric.name == "exact_string_match":
                    metrics[f"validation_exact_string_match_{label}"] = self._exact_match(examples)
        ddp_model.train()
        file_losses = [v for k, v in metrics.items() if k.startswith("validation_loss_")]
        if file_losses:
            metrics["validation_loss"] = sum(file_losses) / len(file_losses)
        return metrics

    def _exact_match(self, examples) -> float:
        from .generate import greedy_generate

        session, section = self.session, self.session.cfg.model.data.validation_ds
        count = min(len(examples), max(1, session.cfg.trainer.limit_val_batches) * session.cfg.model.global_batch_size)
        hits = torch.zeros(2, device=session.device)
        max_length = int(self.session.nemo_config.get("max_position_embeddings") or self.encoder.max_ids)
        for index in range(session.dp_rank, count, session.dp_size):
            example = examples[index]
            ids = greedy_generate(session.model, self.encoder.prompt_ids(example["input"]),
                                  section.metric.tokens_to_generate, session.tokenizer.eod,
                                  session.tokenizer.vocab_size, max_length)
            answer = session.tokenizer.decode(ids).strip()
            references = [a.strip() for a in example.get("answers", [example["output"]])]
            hits += torch.tensor([float(answer in references), 1.0], device=session.device)
        if session.placement.world_size > 1:
            torch.distributed.all_reduce(hits)
        right, total = hits.tolist()
        # Every TP rank of a data-parallel rank counted the same samples.
        return right / total if total else 0.0


def _step_loss(ddp_model, batch: Dict[str, torch.Tensor], micro_batch_size: int, forward_only: bool) -> Optional[torch.Tensor]:
    """Mean loss over one step's microbatches, padded to the step's longest sample (None off the last stage)."""
    from ..core.recipe import Sequences, split_along_batch
    from ..core.steps import run_microbatches
    from .recipe import gpt_forward_step

    means = run_microbatches([ddp_model], split_along_batch(batch, micro_batch_size), gpt_forward_step,
                             Sequences(batch["tokens"].shape[1]), micro_batch_size, forward_only)
    return None if means is None else means["lm loss"]


def _train_loader(session: Session) -> torch.utils.data.DataLoader:
    from ..core.samplers import StepBatchSampler
    from ..core.schedule import BatchSchedule

    cfg = session.cfg
    section = cfg.model.data.train_ds
    sources = [read_jsonl(name, section.context_key, section.label_key) for name in section.file_names]
    batches = BatchSchedule(cfg.model.global_batch_size, cfg.model.micro_batch_size, session.dp_size)
    mixed = MixedDataset(sources, section.concat_sampling_probabilities, batches.total_samples(cfg.trainer.max_steps),
                         cfg.model.seed)
    sampler = StepBatchSampler(len(mixed), batches, cfg.trainer.max_steps, start_step=lambda: 0, dp_rank=session.dp_rank)
    return _loader(EncodedDataset(mixed, SampleEncoder(session.tokenizer, section)), sampler, section, session)


def _check_lengths(session: Session) -> None:
    limit = int(session.nemo_config.get("max_position_embeddings") or 0)
    for split in ("train_ds", "validation_ds"):
        length = getattr(session.cfg.model.data, split).max_seq_length
        if session.nemo_config.get("position_embedding_type", "learned_absolute") == "learned_absolute" and length > limit:
            raise JobConfigError(f"model.data.{split}.max_seq_length: {length} is longer than the model's "
                                 f"max_position_embeddings ({limit})")


def train(session: Session, trainable: Optional[List[torch.nn.Parameter]] = None) -> List[Dict[str, float]]:
    """Runs trainer.max_steps steps; returns the logged metrics (the same lines metrics.jsonl gets).

    trainable: the parameters to update (default: all of the model's); the rest must not require grad.
    """
    from ..common.report import eta, remaining_seconds
    from ..core.optim import attach_schedule_hooks, build_optimizer, set_hyperparameters, wrap_chunks
    from ..core.schedule import CosineSchedule

    cfg = session.cfg
    _check_lengths(session)
    if trainable is not None:
        chosen = {id(p) for p in trainable}
        assert all(p.requires_grad == (id(p) in chosen) for p in session.model.parameters()), "freeze the rest first"
    config = session.model.config
    (ddp_model,) = wrap_chunks([session.model], config, session.precision, session.dp_size,
                               session.device.type == "cuda", distributed=False)
    optimizer = build_optimizer(cfg, [ddp_model], session.precision, distributed=False)
    attach_schedule_hooks(config, [ddp_model], optimizer)
    sched = cfg.model.optim.sched
    try:
        lr_at = CosineSchedule(cfg.model.optim.lr, sched.min_lr, sched.warmup_steps, sched.constant_steps, cfg.trainer.max_steps)
    except ValueError as error:
        raise JobConfigError(f"model.optim.sched: {error}") from None
    validate = Validator(session) if cfg.trainer.limit_val_batches > 0 else None
    metrics_file = Path(cfg.exp_manager.explicit_log_dir) / "metrics.jsonl"
    rank_zero = session.placement.rank == 0
    if rank_zero:
        metrics_file.parent.mkdir(parents=True, exist_ok=True)
    history: List[Dict[str, float]] = []

    def record(step: int, values: Dict[str, float], eta_text: Optional[str] = None) -> None:
        entry = {"step": step, **values}
        history.append(entry)
        if rank_zero:
            with open(metrics_file, "a") as handle:
                handle.write(json.dumps(entry) + "\n")
            fields = [f"step={step}/{cfg.trainer.max_steps}"]
            fields += [f"{k}={v:.4g}{'s' if k == 'step_time' else ''}" if isinstance(v, float) else f"{k}={v}"
                       for k, v in values.items()]
            if eta_text is not None:
                fields.append(f"eta={eta_text}")
            print(" ".join(fields), flush=True)

    window_start, window_losses = time.perf_counter(), []
    for step, batch in enumerate(_train_loader(session)):
        batch = {k: v.to(session.device, non_blocking=True) for k, v in batch.items()}
        ddp_model.zero_grad_buffer()
        optimizer.zero_grad()
        loss = _step_loss(ddp_model, batch, cfg.model.micro_batch_size, forward_only=False)
        lr = lr_at(step)
        set_hyperparameters(optimizer, lr, cfg.model.optim.weight_decay)
        _, grad_norm, _ = optimizer.step()
        window_losses.append(loss)
        done = step + 1
        if done % cfg.trainer.log_every_n_steps == 0 or done == cfg.trainer.max_steps:
            mean = _mean_over_data_parallel(session, torch.stack(window_losses).mean())
            seconds = time.perf_counter() - window_start
            values = {"train_loss": mean, "lr": lr, "step_time": seconds / len(window_losses)}
            if grad_norm is not None:
                values["grad_norm"] = float(grad_norm)
            record(done, values, eta(remaining_seconds(values["step_time"], done, cfg.trainer.max_steps)))
            window_start, window_losses = time.perf_counter(), []
        if validate is not None and (done % cfg.trainer.val_check_interval == 0 or done == cfg.trainer.max_steps):
            values = validate(ddp_model)
            if values:
                record(done, values)
            window_start = time.perf_counter()
    session.model.eval()
    return history


def training_summary(session: Session, history: List[Dict[str, float]], outputs: Dict[str, str]):
    """The closing lines of a fine-tuning or PEFT job: steps, time, the last losses, the files written."""
    from ..common.report import Summary, duration, size, size_of

    cfg = session.cfg
    steps = max((entry["step"] for entry in history), default=0)
    summary = Summary(f"{cfg.stage} finished: {steps} of {cfg.trainer.max_steps} steps from {cfg.model.restore_from_path}")
    summary.add("time", duration(time.monotonic() - session.started))
    last = {}
    for entry in history:
        last.update({key: (entry["step"], value) for key, value in entry.items() if key != "step"})
    for key in ("train_loss", "validation_loss"):
        if key in last:
            summary.add(key.replace("_", " "), f"{last[key][1]:.4f} (step {last[key][0]})")
    for key, (step, value) in last.items():
        if key.startswith("validation_exact_string_match"):
            summary.add(key.replace("validation_", "").replace("_", " "), f"{value:.3f} (step {step})")
    for label, path in outputs.items():
        summary.add(label, f"{path} ({size(size_of(path))})")
    summary.add("metrics", Path(cfg.exp_manager.explicit_log_dir) / "metrics.jsonl")
    return summary


def save_model(session: Session, model: torch.nn.Module, path: str) -> None:
    """Writes `model` as a .nemo with the base model's config: one state dict for TP=1, one shard per TP
    rank otherwise (the layout the model was trained in). Collective: every rank calls it. A write that fails
    for lack of space or permission raises StorageFault; an earlier file at `path` is then unchanged."""
    from .nemo_archive import save_nemo, write_nemo

    tp = session.cfg.model.tensor_model_parallel_size
    world = session.placement.world_size
    # Host copies: a .nemo must load on machines without this job's GPUs.
    state = {k: v.cpu() for k, v in model.state_dict().items() if not k.endswith("._extra_state")}
    # The weights are written twice before the archive is renamed into place: saved, then packed.
    needed = 2 * tp * sum(t.numel() * t.element_size() for t in state.values())
    if tp == 1:
        if session.placement.rank == 0:
            with saving(path, needed, session.cfg.stage):
                save_nemo(path, session.nemo_config, state)
    else:
        staging = Path(path).parent / f".{Path(path).name}.shards"
        if session.dp_rank == 0:
            with saving(path, needed, session.cfg.stage):
                staging.mkdir(parents=True, exist_ok=True)
                torch.save(state, staging / f"tp{session.tp_rank}.pt")
        torch.distributed.barrier()
        if session.placement.rank == 0:
            config = dict(session.nemo_config, tensor_model_parallel_size=tp, pipeline_model_parallel_size=1)
            try:
                with saving(path, 0, session.cfg.stage):  # the room was checked before the shards were written
                    write_nemo(path, config, {(t, 0): staging / f"tp{t}.pt" for t in range(tp)})
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    if world > 1:
        torch.distributed.barrier()


def saving(path: str, needed: int, stage: str):
    """Around one write of a fine-tuning result: room checked first, a failure for lack of space or permission
    said in one line (exit 74) instead of a traceback."""
    from ..common.storage import guarded_write, with_margin

    folder = Path(path).parent
    advice = (f"Nothing was written to {path} (an earlier file there is unchanged). Free space there, or point "
              f"exp_manager.explicit_log_dir (or base_results_dir) at a larger file system, then run the {stage} job again.")
    return guarded_write(folder, with_margin(needed) if needed else 0, f"the {stage} result {Path(path).name}", advice)
