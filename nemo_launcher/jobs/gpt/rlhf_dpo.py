"""DPO (direct preference optimisation) of a GPT policy on preference pairs, against reference log-probs computed
beforehand by rlhf_dpo_reference.py; with model.peft, LoRA-DPO (adapters on the frozen base, the base the reference).

    python3 -u -m nemo_launcher.jobs.gpt.rlhf_dpo --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.rlhf_dpo --config ...      (TP or DP 2 here)

Reads the resolved `rlhf_dpo` section (contract/schemas/rlhf_dpo.py), starts from model.restore_from_path and trains
trainer.max_steps steps on the trainer core (TensorBoard under exp_manager.explicit_log_dir, checkpoints in its
checkpoints/step-<N>, exact resume after a kill, max_time, stop signals, self-requeue) with the loss of
jobs/rlhf/dpo.py. Training and validation log the DPO loss, the preference and SFT terms, the preference accuracy,
the reward margin and the chosen and rejected implicit rewards. At the last step it writes the tuned policy,
<explicit_log_dir>/checkpoints/<exp_manager.name>.nemo (merged for LoRA-DPO, whose adapter file is
<name>_lora.nemo beside it), a plain GPT .nemo that conversion, evaluation and export read like any other.
Exit codes: 0 done (or stopped and saved), 2 configuration error (a missing or stale reference copy included),
74 a checkpoint or the model could not be saved, 75 explicit_log_dir is in use by another job, else a crash.

Only the standard library is imported at module level (dist_checkpointing's helper process re-imports it).
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.gpt.rlhf_dpo"
STAGE = "rlhf_dpo"


def dpo_job(cfg):
    """The GPT tuning job of a bound DpoConfig: every weight trains, or LoRA adapters on the frozen base."""
    import dataclasses
    from functools import partial

    from ..core.recipe import Sequences
    from ..rlhf.dpo import LOSS_NAMES, DpoSettings, dpo_forward_step
    from ..rlhf.dpo_training import PreferenceModule, PreferencePairs, WholePolicy
    from ..rlhf.pairs import split_pair_microbatches
    from ..tuning.lora import LoraMethod
    from .tuning import GptTuning

    class DpoTuning(GptTuning):
        """GPT's tuning job with DPO's forward step, figures and module, on preference pairs."""

        def recipe(self, cfg):
            from .recipe import GPT

            self.method.base_step = partial(dpo_forward_step, DpoSettings.of(cfg.model.dpo))
            return dataclasses.replace(
                GPT,
                forward_step=self.method.forward_step,
                loss_names=LOSS_NAMES,
                split_microbatches=split_pair_microbatches,
                # a pair is two sequences: what tokens/s counts
                sequences=lambda model: Sequences(2 * self.data.max_seq_length),
                flops_per_token=None,
            )

        def _load_base(self, on_gpu: bool):
            model = super()._load_base(on_gpu)
            self.data.check_tokenizer(self.tokenizer)
            return model

        def module(self, parts):
            return PreferenceModule(parts, self)

    peft = cfg.model.peft
    if peft is None:
        method = WholePolicy(cfg.policy_path())
    else:
        method = LoraMethod(peft, cfg.model.seed, cfg.adapter_path(), cfg.policy_path())
    return DpoTuning(cfg, STAGE, cfg.model.restore_from_path, PreferencePairs(cfg), method)


def main(argv=None) -> int:
    from ...contract.schemas.rlhf_dpo import DpoConfig
    from ..tuning.job import run_tuning_program  # deferred: the trainer's modules load after the program starts

    def bind_job(section):
        cfg = DpoConfig.from_dict(section, STAGE)
        return cfg, dpo_job(cfg)

    return run_tuning_program(argv, PROG, bind_job)


if __name__ == "__main__":
    sys.exit(main())
