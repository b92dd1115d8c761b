"""The T5, mT5 and BERT mistakes refused at launch, GPT's way (tests/launch/test_refusals.py): exit 2, one line
naming the key and the fix, nothing written. Among them, what megatron-core 0.16's T5Model and its datasets
cannot do, so that it is refused here instead of failing on the compute node after the queue wait."""

import pytest

T5 = ["stages=[training]", "training=t5/220m"]
MT5 = ["stages=[training]", "training=mt5/170m"]
BERT = ["stages=[training]", "training=bert/20b"]
T5_CONVERT = ["stages=[conversion]", "conversion=t5/convert_t5", "training=t5/220m"]
BERT_CONVERT = ["stages=[conversion]", "conversion=bert/convert_bert", "training=bert/110m"]
T5_TUNE = ["stages=[fine_tuning]", "fine_tuning=t5/squad", "training=t5/220m"]
MT5_TUNE = ["stages=[fine_tuning]", "fine_tuning=mt5/xquad", "training=mt5/170m"]
T5_CUSTOM = ["stages=[fine_tuning]", "fine_tuning=t5/custom_task", "training=t5/220m"] + [
    f"fine_tuning.model.data.{split}.{key}=/data/{split}_{key}.txt"
    for split in ("train_ds", "validation_ds")
    for key in ("src_file_name", "tgt_file_name")
]
# Downstream stages follow a training run of their own family (the default training config is GPT's).
T5_EVALUATE = ["stages=[evaluation]", "evaluation=t5/squad", "training=t5/220m"]
T5_EXPORT = ["stages=[export]", "export=t5/export_t5", "training=t5/220m"]

CASES = [
    # what megatron-core 0.16 cannot build
    (
        T5,
        ["training.model.pipeline_model_parallel_size=2"],
        [
            "training.model.pipeline_model_parallel_size=2",
            "megatron-core 0.16 cannot split a T5",
            "tensor_model_parallel_size",
        ],
    ),
    (T5, ["training.model.pipeline_model_parallel_split_rank=1"], ["pipeline_model_parallel_split_rank=1", "set 0"]),
    (
        T5,
        ["training.model.position_embedding_type=alibi"],
        ["position_embedding_type='alibi'", "learned_absolute, relative"],
    ),
    (T5, ["training.model.data.mean_ngram_size=3"], ["training.model.data.mean_ngram_size=3", "no mean span length"]),
    (T5, ["training.model.data.permutation=true"], ["training.model.data.permutation", "geometric_dist"]),
    # T5 span corruption and its tokens
    (
        T5,
        ["training.model.data.seq_length_dec=64"],
        ["training.model.data.seq_length_dec=64", "up to", "76 tokens", "at least 78"],
    ),
    (
        T5,
        ["training.model.tokenizer.num_sentinel_tokens=50"],
        ["num_sentinel_tokens=50", "76 one-token spans", "at least 76"],
    ),
    (T5, ["training.model.data.masked_lm_prob=1.5"], ["training.model.data.masked_lm_prob=1.5", "(0, 1)"]),
    (T5, ["training.model.max_position_embeddings=256"], ["max_position_embeddings=256", "longest sequence (512"]),
    (T5, ["training.model.data.seq_length=256"], ["training.model.data.seq_length=256", "encoder_seq_length (512)"]),
    (T5, ["training.model.tokenizer.merge_file=/data/merges.txt"], ["tokenizer.merge_file", "no merges file"]),
    (T5, ["training.model.tokenizer.type=null"], ["training.model.tokenizer.type", "BertWordPieceCase"]),
    (
        T5,
        ["training.model.tokenizer.type=GPT2BPETokenizer"],
        ["tokenizer.type='GPT2BPETokenizer'", "BertWordPieceCase"],
    ),
    (MT5, ["training.model.tokenizer.vocab_file=/data/vocab.txt"], ["tokenizer.vocab_file", "is for library megatron"]),
    (MT5, ["training.model.tokenizer.model=null"], ["training.model.tokenizer.model", "needs the .model file"]),
    # T5 layout and keys
    (T5, ["training.model.tensor_model_parallel_size=8"], ["num_attention_heads=12", "TP(8)"]),
    (
        T5,
        ["training.model.global_batch_size=1000"],
        ["global_batch_size=1000", "micro_batch_size(64) x data-parallel size(32)"],
    ),
    (T5, ["training.model.encoder_num_layers=0"], ["training.model.encoder_num_layers=0", "positive integer"]),
    (T5, ["+training.model.num_layers=12"], ["training.model.num_layers", "unknown key", "encoder_num_layers"]),
    (T5, ["training.model.activation=fast-swiglu"], ["activation='fast-swiglu'", "geglu"]),
    (T5, ["training.run.preprocessed_dir=null"], ["training.run.preprocessed_dir", "data_prefix is null"]),
    # BERT
    (BERT, ["training.model.num_layers=50"], ["training.model.num_layers=50", "PP(4)"]),
    (BERT, ["training.model.tokenizer.library=sentencepiece"], ["tokenizer.library='sentencepiece'", "megatron"]),
    (BERT, ["training.model.tokenizer.model=/data/spm.model"], ["tokenizer.model", "vocab_file only"]),
    (BERT, ["training.model.activation=relu"], ["activation='relu'", "gelu, geglu"]),
    (T5, ["training.model.data.dataloader_type=LDDL"], ["dataloader_type='LDDL'", "BERT's", "single or cyclic"]),
    (BERT, ["training.model.data.dataloader_type=LDDL"], ["data_prefix=None", "[train, validation, test]"]),
    (
        BERT,
        ["training.model.virtual_pipeline_model_parallel_size=5"],
        ["training.model.num_layers=48", "virtual PP(5) = 20"],
    ),
    (
        BERT,
        ["training.model.global_batch_size=4032", "training.model.virtual_pipeline_model_parallel_size=2"],
        ["global_batch_size=4032", "microbatches (4032 / 64 = 63)", "multiple of PP(4)"],
    ),
    # downstream stages
    (
        T5_CONVERT,
        ["conversion.model.pipeline_model_parallel_size=2"],
        ["conversion.model.pipeline_model_parallel_size=2", "cannot split"],
    ),
    (T5_CONVERT, ["conversion.model.model_type=gpt"], ["conversion.model.model_type='gpt'", "t5"]),
    (T5_CONVERT, ["conversion.run.nemo_file_name=a/b.nemo"], ["nemo_file_name='a/b.nemo'", "megatron_t5.nemo"]),
    (
        BERT_CONVERT,
        ["conversion.model.tokenizer_model=/data/spm.model"],
        ["conversion.model.tokenizer_model", "WordPiece"],
    ),
    (
        T5_TUNE,
        ["fine_tuning.model.restore_from_path=null"],
        ["fine_tuning.model.restore_from_path", "megatron_t5.nemo"],
    ),
    (
        T5_TUNE,
        ["fine_tuning.model.pipeline_model_parallel_size=2"],
        ["fine_tuning.model.pipeline_model_parallel_size=2", "cannot split"],
    ),
    (
        T5_TUNE,
        ["fine_tuning.model.data.validation_ds.tgt_file_name=[/a.txt,/b.txt]"],
        ["validation_ds.tgt_file_name", "one target file per source file (1 source files)"],
    ),
    (T5_TUNE, ["fine_tuning.model.data.validation_ds.metric.num_classes=3"], ["metric.num_classes=3", "no classes"]),
    (T5_CUSTOM, ["+fine_tuning.squad_preparation=[]"], ["fine_tuning.squad_preparation", "or set null"]),
    (
        T5_TUNE,
        ["+fine_tuning.squad_preparation.0.sample_questions=0"],
        ["fine_tuning.squad_preparation[0].sample_questions=0", "positive number"],
    ),
    (
        MT5_TUNE,
        [
            "fine_tuning.model.data.train_ds.src_file_name=[/a.txt,/b.txt]",
            "fine_tuning.model.data.train_ds.tgt_file_name=[/a.txt,/b.txt]",
        ],
        ["train_ds.concat_sampling_probabilities", "2 pairs"],
    ),
    (
        T5_EVALUATE,
        ["evaluation.model.restore_from_path=tuned.nemo"],
        ["evaluation.model.restore_from_path='tuned.nemo'", "absolute"],
    ),
    (
        T5_EVALUATE,
        ["evaluation.model.pipeline_model_parallel_size=2"],
        ["evaluation.model.pipeline_model_parallel_size=2", "cannot split"],
    ),
    (
        T5_EXPORT,
        ["export.model.tensor_model_parallel_size=2"],
        ["export.model.tensor_model_parallel_size=2", "one process"],
    ),
    (T5_EXPORT, ["export.run.model_type=gpt3"], ["export.run.model_type='gpt3'", "t5, mt5"]),
]


@pytest.mark.parametrize("base,overrides,words", CASES, ids=[" ".join(c[0][1:2] + c[1]) for c in CASES])
def test_family_mistake_is_refused_at_launch(base, overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(base + overrides, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not results.exists(), "nothing may be written when validation fails"


def test_relative_position_embeddings_need_no_table_longer_than_the_sequences(launch, tmp_path):
    """The seed's BCP override for T5: relative attention bias instead of learned positions."""
    code, out, err = launch(
        T5 + ["training.model.position_embedding_type=relative", "training.model.max_position_embeddings=1"],
        results=tmp_path / "results",
    )
    assert code == 0, err
