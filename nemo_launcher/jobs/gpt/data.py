"""megatron-core GPT datasets over the data blend: the GPT recipe's `build_datasets`.

    train, valid, test = build_gpt_datasets(cfg, tokenizer, sizes=[train, validation, test samples], blend)

A sample is {tokens, labels, loss_mask, position_ids} of model.encoder_seq_length tokens (and attention_mask
with per-document masks). The blend, the split checks and the sizes are the trainer core's (core/datasets.py).
"""

from ...contract.schemas.gpt_training import TrainingConfig
from ..core.datasets import megatron_blend, megatron_split


def gpt_dataset_settings(cfg: TrainingConfig, blend: list) -> dict:
    """GPTDatasetConfig's keyword arguments (all but the tokenizer) from the config."""
    data = cfg.model.data
    return dict(
        random_seed=cfg.model.seed,
        sequence_length=cfg.model.encoder_seq_length,
        blend=megatron_blend(blend),
        split=megatron_split(data.splits_string),
        path_to_cache=data.index_mapping_dir,
        reset_position_ids=data.reset_position_ids,
        reset_attention_mask=data.reset_attention_mask,
        eod_mask_loss=data.eod_mask_loss,
        mmap_bin_files=data.data_impl == "mmap",
        # Without per-document masks the attention is plainly causal, which the layers build themselves;
        # a [1, s, s] mask per sample would cost s*s bytes of host memory and copies for nothing.
        create_attention_mask=data.reset_attention_mask,
    )


def build_gpt_datasets(cfg: TrainingConfig, tokenizer, sizes: list[int], blend: list):
    """(train, validation, test) megatron-core GPT datasets of `sizes` samples; a split of weight 0 is None."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    dataset_config = GPTDatasetConfig(tokenizer=tokenizer, **gpt_dataset_settings(cfg, blend))
    return BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, dataset_config).build()
