"""megatron-core's BERT dataset over the data blend: the BERT recipe's `build_datasets`.

    train, valid, test = build_bert_datasets(cfg, tokenizer, sizes=[train, validation, test samples], blend)

The .bin/.idx files hold one sequence per sentence and documents of sentences (what data preparation writes for
BERT). A sample is [CLS] A [SEP] B [SEP] of at most model.encoder_seq_length tokens: runs of whole sentences of
one document, with the two segments swapped half of the time when the sentence-order head is on (`is_random`),
word pieces masked as model.data says, then padded: {text, types, labels, loss_mask, padding_mask, is_random,
truncated}. Masking is drawn from a generator seeded by (model.seed + sample index), so a sample is the same
whenever and wherever it is read, which is what makes a resumed run exact. The blend, the split checks and the
sizes are the trainer core's (core/datasets.py).
"""

from ...contract.schemas.bert_training import BertTrainingConfig
from ..core.datasets import masked_word_piece_settings


def build_bert_datasets(cfg: BertTrainingConfig, tokenizer, sizes: list[int], blend: list):
    """(train, validation, test) megatron-core BERT datasets of `sizes` samples; a split of weight 0 is None.

    `tokenizer`: a MaskingTokenizer (common/tokenizer.py), which has the [CLS]/[SEP]/[MASK]/[PAD] ids and the
    id -> piece table the masking reads to keep the pieces of a word together.
    """
    from megatron.core.datasets.bert_dataset import BERTMaskedWordPieceDataset, BERTMaskedWordPieceDatasetConfig
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder

    dataset_config = BERTMaskedWordPieceDatasetConfig(
        **masked_word_piece_settings(cfg, tokenizer, blend), classification_head=cfg.model.bert_binary_head
    )
    return BlendedMegatronDatasetBuilder(BERTMaskedWordPieceDataset, sizes, lambda: True, dataset_config).build()
