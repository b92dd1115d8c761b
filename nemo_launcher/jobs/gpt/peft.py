"""LoRA fine-tuning of a GPT `.nemo`: the base weights stay frozen, only the adapters train.

    python3 -u -m nemo_launcher.jobs.gpt.peft --config <job dir>/<run.name>_hydra.yaml

Reads the resolved `peft` section. Writes to <explicit_log_dir>/checkpoints/:
- <name>.nemo: the adapter file, a .nemo holding only the adapter weights and the LoRA settings
  (merge it later with `python3 -m nemo_launcher.jobs.gpt.lora_merge`);
- <name>_merged.nemo (model.peft.merge: true): the base model with every update added into its weights,
  a plain GPT .nemo that export and evaluation read like any other.
Exit codes: 0 done, 2 configuration error, 74 a file could not be saved (no space or permission),
75 explicit_log_dir is in use by another job, anything else a crash.
"""
import sys

from .sft_program import run_program


def lora_tune(cfg, placement) -> dict:
    from . import sft_train
    from .lora import add_lora
    from .lora_file import load_adapter_file, save_adapter_file

    peft = cfg.model.peft
    session = sft_train.start(cfg, placement)
    adapters = add_lora(session.model, peft.lora_tuning, seed=cfg.model.seed)
    if peft.restore_from_path:
        _, state = load_adapter_file(peft.restore_from_path)
        adapters.load_state_dict(state, peft.restore_from_path)
    if placement.rank == 0:
        count = sum(p.numel() for p in adapters.parameters())
        total = sum(p.numel() for p in session.model.parameters())
        print(f"LoRA r={peft.lora_tuning.adapter_dim} alpha={peft.lora_tuning.alpha} on {', '.join(peft.lora_tuning.targets())}: "
              f"{len(adapters.modules)} adapters, {count:,} trainable of {total:,} parameters on this rank", flush=True)
    history = sft_train.train(session, trainable=adapters.parameters())
    outputs = {"adapter": cfg.exp_manager.nemo_path()}
    state = adapters.state_dict()  # a TP collective: every rank takes part
    if placement.rank == 0:
        with sft_train.saving(outputs["adapter"], 2 * sum(t.numel() * t.element_size() for t in state.values()), cfg.stage):
            save_adapter_file(outputs["adapter"], peft.lora_tuning, state, cfg.model.restore_from_path)
    if peft.merge:
        adapters.merge()
        outputs["merged"] = cfg.exp_manager.nemo_path("_merged")
        sft_train.save_model(session, session.model, outputs["merged"])
    labels = {"adapter": "adapter file", "merged": "merged model"}
    written = {labels[key]: path for key, path in outputs.items()}
    sft_train.training_summary(session, history, written).show(placement.rank)
    return outputs


def main(argv=None) -> int:
    return run_program(argv, "peft", "nemo_launcher.jobs.gpt.peft", lora_tune)


if __name__ == "__main__":
    sys.exit(main())
