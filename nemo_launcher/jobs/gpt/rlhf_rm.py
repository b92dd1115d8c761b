"""Reward-model training (`rlhf_rm`): a GPT `.nemo` (the SFT model) gets a scalar head in place of its output layer
and every weight trains on preference pairs with the Bradley-Terry loss -log sigmoid(r_chosen - r_rejected).

    python3 -u -m nemo_launcher.jobs.gpt.rlhf_rm --config <job dir>/<run.name>_hydra.yaml
    torchrun --nproc_per_node=2 -m nemo_launcher.jobs.gpt.rlhf_rm --config ...      (TP and DP here)

Reads the resolved `rlhf_rm` section (contract/schemas/rlhf_rm.py), starts from
model.pretrained_checkpoint.restore_from_path and trains on model.data.data_prefix.train on the trainer core
(TensorBoard/W&B under exp_manager.explicit_log_dir, checkpoints in its checkpoints/step-<N>, exact resume after a
kill, max_time, stop signals, self-requeue, the closing summary). Validation logs val_loss, val_accuracy (share of
pairs the model ranks right; chance 0.5) and val_margin; after the last step the test split, when listed, the same
as test_*. Then it writes <explicit_log_dir>/checkpoints/<exp_manager.name>.nemo, the reward model the PPO critic and
reward server load (jobs/rlhf/reward_model.py). Exit codes: 0 done (or stopped and saved), 2 configuration error,
74 a checkpoint or the model could not be saved, 75 explicit_log_dir in use by another job, else a crash.

Only the standard library is imported at module level (dist_checkpointing's helper process re-imports it).
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.gpt.rlhf_rm"
STAGE = "rlhf_rm"


def reward_model_job(cfg):
    """The tuning job of a bound RewardModelConfig (the class is built here: torch loads with it)."""
    import dataclasses

    from ...contract.schemas.rlhf_rm import STAGE
    from ..common.config import JobConfigError
    from ..core.nemo_archive import read_nemo_config
    from ..core.parts import assemble_parts
    from ..rlhf.reward_model import build_scalar_model
    from ..rlhf.reward_training import PairData, RewardHeadMethod, RewardModule, reward_recipe_fields
    from .converter import GPT as GPT_FAMILY
    from .recipe import GPT
    from .tuning import GptTuning

    class RewardModelJob(GptTuning):
        """GPT's tuning job with the scalar-head model, the pairs data, the test split and the reward module."""

        def recipe(self, cfg):
            self.figures = {}  # the newest validation and test means (RewardModule), for the summary
            fields = reward_recipe_fields(self.data, cfg.model.encoder_seq_length, self.figures)
            return dataclasses.replace(GPT, **fields)

        def _load_base(self, on_gpu: bool):
            model_cfg = self.cfg.model
            self.nemo_config = read_nemo_config(self.base_path)
            positions = self.nemo_config.get("max_position_embeddings")
            if positions is not None and model_cfg.encoder_seq_length > int(positions):
                raise JobConfigError(
                    f"{STAGE}.model.encoder_seq_length={model_cfg.encoder_seq_length}: longer than the "
                    f"max_position_embeddings({positions}) of {self.base_path}; set at most {positions}"
                )
            model, section = build_scalar_model(
                GPT_FAMILY,
                self.nemo_config,
                self.base_path,
                model_cfg.tensor_model_parallel_size,
                self.cfg.trainer.precision_name(),
                hidden_dropout=model_cfg.hidden_dropout,
                attention_dropout=model_cfg.attention_dropout,
            )
            spec = section.tokenizer
            from ..common.tokenizer import load_tokenizer

            self.tokenizer = load_tokenizer(spec.library, spec.type, spec.model, spec.vocab_file, spec.merge_file)
            self._vocab_rows = model.embedding.word_embeddings.weight.shape[0] * model_cfg.tensor_model_parallel_size
            self.model = model.train()
            return self.model

        def answer(self, prompt, tokens, sample=None):
            raise JobConfigError("a reward model scores sequences; it generates none")

        def build(self, recipe, cfg, placement, on_gpu: bool, resume):
            model = self._load_base(on_gpu)
            self.method.attach(model, self)
            self.collate = self.data.collate(self.tokenizer)
            self.validation_sets = self.data.validation_sets(self.tokenizer) if cfg.trainer.limit_val_batches else ()
            test = self.data.test_dataset(self.tokenizer) if cfg.trainer.limit_test_batches else None
            if placement.rank == 0:
                print(self.method.describe(model), flush=True)

            def datasets(batches):
                size = batches.total_samples(cfg.trainer.max_steps)
                train = self.data.train_dataset(self.tokenizer, size, cfg.model.seed)
                return train, self.validation_sets or None, test

            return assemble_parts(
                recipe,
                cfg,
                placement,
                on_gpu,
                False,
                self.tokenizer,
                self._vocab_rows,
                model.config,
                [model],
                datasets,
                data_description=self.data.describe(),
            )

        def module(self, parts):
            return RewardModule(parts, self)

    data = PairData(
        cfg.model.data.data_prefix.splits(), cfg.model.encoder_seq_length, f"{STAGE}.model", cfg.model.data.num_workers
    )
    method = RewardHeadMethod(cfg.nemo_path())
    return RewardModelJob(cfg, STAGE, cfg.model.pretrained_checkpoint.restore_from_path, data, method)


def main(argv=None) -> int:
    from ...contract.schemas.rlhf_rm import RewardModelConfig
    from ..tuning.job import run_tuning_program  # deferred: the trainer's modules load after the program starts

    def bind_job(section):
        cfg = RewardModelConfig.from_dict(section, STAGE)
        return cfg, reward_model_job(cfg)

    return run_tuning_program(argv, PROG, bind_job)


if __name__ == "__main__":
    sys.exit(main())
