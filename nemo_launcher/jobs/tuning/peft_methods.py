"""The tuning methods that keep a converted model frozen, any family (GPT, T5/mT5): prompt learning (p-tuning,
prompt tuning), Houlsby adapters and IA3, and the result files they write and evaluation reads.

    method = method_for(cfg, "adapter_learning")           # cfg: a bound PromptLearningConfig (gpt_prompt_learning)
    settings, prompts = restore_result(model, "megatron_t5_prompt.nemo", ("prompt",))     # for inference

A method attaches its tensors to the family's model (virtual_prompts.py, layer_adapters.py), trains them through
the family's own forward step (`base_step`, which the family's tuning job sets), checkpoints only them, and at the
last step writes model.nemo_path: a `.nemo` holding only the method's tensors and settings, which evaluation loads
beside the base model. The result of prompt learning is a table of virtual tokens per task: restore_path names an
earlier one, whose existing_tasks are copied into the new file bit for bit while new_tasks train.
"""

from typing import Any

import torch

from ...contract.schemas.gpt_prompt_learning import AdapterSection, PromptLearningConfig
from ..common.config import JobConfigError, bind
from ..core.nemo_archive import load_nemo, save_nemo
from .base import Method, copy_into, replicated
from .job import run_tuning_program
from .layer_adapters import add_houlsby, add_ia3, gather_whole, houlsby_sharded_state, ia3_sharded_state, load_whole
from .tuned_files import saving, tensor_bytes
from .virtual_prompts import VirtualPrompts


def save_method_file(
    path: str, settings: dict[str, Any], state: dict[str, torch.Tensor], base_model: str, stage: str
) -> None:
    with saving(path, 2 * tensor_bytes(state), stage):
        save_nemo(path, {"tuning": settings, "base_model": str(base_model)}, state, tokenizer_files={})


def load_method_file(path: str, *methods: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(settings, tensors) of a result file of one of `methods` (prompt, adapter, ia3); refuses any other .nemo."""
    config, state = load_nemo(path)
    settings = config.get("tuning")
    if not isinstance(settings, dict) or settings.get("method") not in methods:
        found = settings.get("method") if isinstance(settings, dict) else "a full model"
        raise JobConfigError(f"{path}: not a result of {' or '.join(methods)} learning (it holds {found})")
    return settings, state


def templates_of(model, tasks) -> dict[str, dict[str, Any]]:
    """The task templates a result file records, so that its evaluation lays out test lines as training did."""
    import dataclasses

    return {task: dataclasses.asdict(model.template(task)) for task in tasks}


class PromptMethod(Method):
    name = "prompt learning"

    def __init__(self, cfg):
        self.cfg = cfg
        self.prompts = None

    def attach(self, model, job) -> None:
        m = self.cfg.model
        existing = {}
        if m.restore_path:
            settings, state = load_method_file(m.restore_path, "prompt")
            missing = [t for t in m.existing_tasks if f"prompt_table.{t}" not in state]
            if missing:
                raise JobConfigError(
                    f"model.existing_tasks: {missing[0]!r} is not in {m.restore_path} "
                    f"(it holds {', '.join(settings.get('tasks', {}))})"
                )
            existing = {t: state[f"prompt_table.{t}"] for t in m.existing_tasks}
        for param in model.parameters():
            param.requires_grad_(False)
        tokens = {t: m.template(t).total_virtual_tokens for t in m.new_tasks}
        model.virtual_prompts = VirtualPrompts(
            model,
            list(m.existing_tasks) + list(m.new_tasks),
            m.new_tasks,
            tokens,
            m.virtual_prompt_style,
            existing,
            m.p_tuning,
            m.prompt_tuning.new_prompt_init_methods,
            m.prompt_tuning.new_prompt_init_text,
            job.tokenizer,
            m.seed,
        ).to(next(model.parameters()).device)
        self.prompts = model.virtual_prompts
        self.name = f"{m.virtual_prompt_style} ({', '.join(m.new_tasks)})"

    def sharded_state(self):
        return {f"prompt.{name}": replicated(p, f"prompt.{name}") for name, p in self.prompts.trainable().items()}

    def load_state(self, state) -> None:
        copy_into({f"prompt.{name}": p for name, p in self.prompts.trainable().items()}, state)

    def forward_step(self, data_iterator, model):
        batch = next(data_iterator)
        self.prompts.place(batch.get("virtual_mask"), batch.get("task_ids"))
        return self.base_step(iter([batch]), model)

    def before_generation(self, tokens, sample) -> None:
        ids, virtual, task = sample
        mask = torch.zeros_like(tokens, dtype=torch.bool)
        mask[0, : len(virtual)] = torch.tensor(virtual, dtype=torch.bool)
        self.prompts.place(mask, torch.tensor([task]))

    def write(self, module, job) -> dict[str, str]:
        m = self.cfg.model
        if module.parts.placement.rank == 0:
            table = self.prompts.table()
            settings = {
                "method": "prompt",
                "virtual_prompt_style": m.virtual_prompt_style,
                "tasks": templates_of(m, table),
            }
            save_method_file(
                m.nemo_path, settings, {f"prompt_table.{t}": v for t, v in table.items()}, job.base_path, job.stage
            )
        return {"virtual prompts": m.nemo_path}


class LayerMethod(Method):
    """Adapters or IA3: tensors inside every layer, named after the linear they sit on."""

    def __init__(self, cfg, kind: str):
        self.cfg, self.kind = cfg, kind
        self.name = "Houlsby adapters" if kind == "adapter" else "IA3 (keys, values, FFN activations)"
        self.params: dict[str, torch.nn.Parameter] = {}

    def attach(self, model, job) -> None:
        if self.kind == "adapter":
            self.params = add_houlsby(model, self.cfg.model.adapter_tuning, self.cfg.model.seed)
        else:
            self.params = add_ia3(model)

    def sharded_state(self):
        return (houlsby_sharded_state if self.kind == "adapter" else ia3_sharded_state)(self.params)

    def load_state(self, state) -> None:
        copy_into(self.params, state)

    def whole_state(self) -> dict[str, torch.Tensor]:
        if self.kind == "ia3":
            return gather_whole(self.params)  # a TP collective
        return {name: p.detach().float().cpu() for name, p in self.params.items()}

    def write(self, module, job) -> dict[str, str]:
        import dataclasses

        m = self.cfg.model
        state = self.whole_state()
        if module.parts.placement.rank == 0:
            settings = {"method": self.kind, "tasks": templates_of(m, m.new_tasks)}
            if self.kind == "adapter":
                settings["adapter_tuning"] = dataclasses.asdict(m.adapter_tuning)
            save_method_file(m.nemo_path, settings, state, job.base_path, job.stage)
        return {"adapters" if self.kind == "adapter" else "IA3 vectors": m.nemo_path}


def method_for(cfg, stage: str) -> Method:
    if stage == "prompt_learning":
        return PromptMethod(cfg)
    return LayerMethod(cfg, "adapter" if stage == "adapter_learning" else "ia3")


def run_method(argv, stage: str, prog: str, tuning_class, data_class) -> int:
    """The program of one of these stages for a family: binds the section (schema gpt_prompt_learning, any family)
    and runs the family's tuning job on the trainer core: tuning_class(cfg, stage, base model path,
    data_class(cfg.model), the stage's method)."""

    def bind_job(section):
        cfg = PromptLearningConfig.from_dict(section, stage=stage)
        data = data_class(cfg.model)
        return cfg, tuning_class(cfg, stage, cfg.model.language_model_path, data, method_for(cfg, stage))

    return run_tuning_program(argv, prog, bind_job)


def restore_result(model: torch.nn.Module, path: str, methods: tuple[str, ...]):
    """Puts a result file's tensors into `model` (the frozen base, this TP rank's shard) for inference.

    Returns (settings, prompts): `prompts` is the table of virtual tokens for a prompt file (place them before
    each forward), None for adapters and IA3, which sit in the layers from now on.
    """
    settings, state = load_method_file(path, *methods)
    weight = next(model.parameters())
    if settings["method"] == "prompt":
        table = {task: state[f"prompt_table.{task}"] for task in settings["tasks"]}
        prompts = VirtualPrompts(model, list(table), [], {}, "prompt-tuning", table, None, None, None, None, 0)
        model.virtual_prompts = prompts.to(weight.device)
        return settings, prompts
    if settings["method"] == "adapter":
        params = add_houlsby(model, bind(AdapterSection, settings["adapter_tuning"], "adapter_tuning"), seed=0)
    else:
        params = add_ia3(model)
    load_whole(params, state, settings["method"] == "ia3", str(path))
    with torch.no_grad():
        for param in params.values():  # a bf16 base computes its adapters in bf16 too
            param.data = param.data.to(weight.dtype)
    return settings, None
