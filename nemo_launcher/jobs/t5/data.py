"""megatron-core's T5 span-corruption datasets over the data blend: the T5 recipe's `build_datasets`.

    train, valid, test = build_t5_datasets(cfg, tokenizer, sizes=[train, validation, test samples], blend)

Each sample is a run of whole sentences of one document (data preparation splits them), masked the way
`model.data` says: spans become sentinels in the encoder input (text_enc, enc_mask), the decoder reads
bos + `<sentinel> span ...` (text_dec, dec_mask) and predicts `<sentinel> span ... eos` (labels, loss_mask).
Padding is id 0 with mask 0. Whole-word masking follows WordPiece's `##` continuation pieces; a SentencePiece
vocabulary (mT5) has none, so there every piece is a word of its own (megatron-core's rule).
"""

from ...contract.schemas.t5_training import T5TrainingConfig
from ..core.datasets import masked_word_piece_settings


def build_t5_datasets(cfg: T5TrainingConfig, tokenizer, sizes: list[int], blend: list):
    """(train, validation, test) datasets of `sizes` samples; a split of weight 0 is None."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.t5_dataset import T5MaskedWordPieceDataset, T5MaskedWordPieceDatasetConfig

    dataset_config = T5MaskedWordPieceDatasetConfig(
        **masked_word_piece_settings(cfg, tokenizer, blend), sequence_length_decoder=cfg.model.data.seq_length_dec
    )
    return BlendedMegatronDatasetBuilder(T5MaskedWordPieceDataset, sizes, lambda: True, dataset_config).build()
