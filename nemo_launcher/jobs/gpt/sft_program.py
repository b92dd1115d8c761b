"""The entry point shared by the fine-tuning and PEFT programs: config, logging, exit codes, shutdown.
The body ends with the job's summary (sft_train.training_summary).

Rank 0 holds exp_manager.explicit_log_dir's lock while the job runs. Exit codes: 0 done, 2 configuration error,
74 the model could not be saved for lack of space or permission, 75 explicit_log_dir is in use by another job
(one `Error:` line on stderr for each), anything else a crash with its traceback.
"""
from typing import Callable


def run_program(argv, stage: str, module: str, body: Callable) -> int:
    from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
    from ..common.distributed import placement_from_env
    from ..common.quiet import start_job
    from ..common.report import JobFault, print_error
    from ..common.run_directory import claimed

    try:
        path = config_path_from_argv(argv, prog=f"python3 -m {module}")
        placement = placement_from_env()
        start_job(placement.rank)
        from ...contract.schemas.gpt_sft import SftConfig

        cfg = SftConfig.from_dict(load_resolved_config(path), stage=stage)
        with claimed(cfg.exp_manager.explicit_log_dir, placement.rank):
            if placement.rank == 0:
                print(f"{stage} run {cfg.run.name}: {placement.world_size} processes ({placement.source}), "
                      f"TP={cfg.model.tensor_model_parallel_size}, from {cfg.model.restore_from_path}", flush=True)
            try:
                body(cfg, placement)
            finally:
                from ..core.parts import shutdown

                shutdown()
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0

