"""The reference log-probs of a DPO run: one forward pass of the frozen reference GPT over the train and validation
pairs, written as copies of the pairs files with "ref_chosen" and "ref_rejected" (summed response log-probs).

    python3 -u -m nemo_launcher.jobs.gpt.rlhf_dpo_reference --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.rlhf_dpo_reference --config ...     (TP 2 here)

Reads the resolved `rlhf_dpo` section (the DPO trainer's own file: contract/schemas/rlhf_dpo.py). The reference is
model.reference.model_path, or model.restore_from_path when null (LoRA-DPO: the base, adapters off); it runs at
model.tensor_model_parallel_size over trainer.num_nodes x trainer.devices processes, the pairs shared out over the
data-parallel ranks. The copies go to model.reference.output_dir; a rerun keeps those already written for the same
data and model (jobs/rlhf/dpo_reference.py). Data tokenized with another vocabulary is refused. Exit codes: 0 done,
2 configuration error, 74 a file could not be written (no space or permission), 75 the output folder is in use by
another job.
"""

import sys
import time

PROG = "python3 -m nemo_launcher.jobs.gpt.rlhf_dpo_reference"


def compute(cfg, placement) -> list[str]:
    import dataclasses

    from ...contract.model_facts import facts_of_model
    from ...contract.model_rules import check_against_model
    from ...contract.schemas.rlhf_dpo import TRAIN_SPLIT, VALIDATION_SPLIT
    from ..core.nemo_archive import read_nemo_config
    from ..rlhf.dpo_reference import ReferenceFiles
    from ..rlhf.pairs import check_vocabulary
    from .inference import load_gpt_from_nemo

    say = print if placement.rank == 0 else (lambda *_: None)
    m = cfg.model
    files = ReferenceFiles(
        m.reference.output_dir, m.reference_model(), m.data.max_seq_length, m.reference.micro_batch_size
    )
    # The launcher's rules against the model (TP and heads, ...), before a weight is read: as the trainer does.
    check_against_model(
        facts_of_model(read_nemo_config(files.model_path), files.model_path), "rlhf_dpo", dataclasses.asdict(cfg)
    )
    model, tokenizer = load_gpt_from_nemo(
        files.model_path, m.tensor_model_parallel_size, 1, cfg.trainer.precision_name()
    )
    for split in (TRAIN_SPLIT, VALIDATION_SPLIT):  # before any forward pass
        check_vocabulary(m.data.pairs(split), tokenizer.vocab_size, "rlhf_dpo.model.data.data_dir")
    say(f"reference model {files.model_path} (TP={m.tensor_model_parallel_size}, {placement.world_size} processes)")
    return [
        files.write(split, m.data.pairs(split), model, tokenizer, placement, say)
        for split in (TRAIN_SPLIT, VALIDATION_SPLIT)
    ]


def main(argv=None) -> int:
    from operator import attrgetter

    from ...contract.schemas.rlhf_dpo import DpoConfig
    from ..common.config import JobConfigError
    from ..common.report import JobFault, Summary, duration, print_error
    from ..common.run_directory import claimed_run

    started = time.monotonic()
    try:
        with claimed_run(argv, PROG, DpoConfig.from_dict, attrgetter("model.reference.output_dir")) as (cfg, where):
            from ..core.parts import shutdown

            try:
                cfg.data_parallel_size(where.world_size)
                outcomes = compute(cfg, where)
            finally:
                shutdown()
        summary = Summary("DPO reference log-probs written")
        summary.add("folder", cfg.model.reference.output_dir).add("splits", ", ".join(outcomes))
        summary.add("time", duration(time.monotonic() - started)).show(where.rank)
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
