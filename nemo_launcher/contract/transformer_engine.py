"""Settings Transformer Engine refuses, checked when a config is bound (at launch and again when the job starts).

    check_fp8(cfg.model, cfg.trainer, "training.model")   # from gpu_training.check_gpu_settings

FP8 (`model.fp8`) runs every linear layer's GEMMs through Transformer Engine, which refuses, at the first forward
pass, a GEMM whose operands are not FP8-shaped: both 2-D, rows a multiple of 8, columns a multiple of 16
(transformer_engine.pytorch.utils.check_dim_for_fp8_exec, asserted for the input and for the weight). In a
transformer layer on one tensor-parallel rank, with h = hidden_size, a = num_attention_heads x kv_channels,
g = query groups x kv_channels, f = ffn_hidden_size (x 2 for a gated MLP) and t = micro_batch_size x seq_length / CP
tokens, those are:

    linear_qkv   input t x h      weight (a + 2g)/TP x h
    linear_proj  input t x a/TP   weight h x a/TP
    linear_fc1   input t x h      weight f/TP x h
    linear_fc2   input t x f/TP   weight h x f/TP      (f without the gate factor)

so the rule asks: t a multiple of 8; h, a/TP and ffn_hidden_size/TP multiples of 16; (a + 2g)/TP and f/TP
multiples of 8. FP8 also needs Transformer Engine's layers on a GPU (trainer.accelerator: gpu,
model.transformer_engine: true); the job refuses it when TE does not import, which only the node can know.
"""

from .binding import config_fault

# FP8 GEMM operand shapes (Transformer Engine's check_dim_for_fp8_exec).
FP8_ROWS = 8
FP8_COLUMNS = 16


def check_fp8(model, trainer, key: str) -> None:
    """Raises JobConfigError `<key>.<field>=<value>: <why>` for an FP8 setting Transformer Engine would refuse."""
    if not getattr(model, "fp8", False):
        return
    if trainer.accelerator == "cpu" or not model.transformer_engine:
        raise config_fault(
            f"{key}.fp8",
            True,
            "FP8 runs through Transformer Engine's layers on GPUs: needs trainer.accelerator: gpu and "
            "model.transformer_engine: true (or set fp8: false)",
        )
    tp = model.tensor_model_parallel_size
    cp = getattr(model, "context_parallel_size", 1)
    head_size = model.kv_channels or model.hidden_size // model.num_attention_heads
    attention = model.num_attention_heads * head_size
    groups = (getattr(model, "num_query_groups", None) or model.num_attention_heads) * head_size
    gate = 2 if getattr(model, "activation", "") in ("fast-swiglu", "swiglu", "fast-geglu", "geglu") else 1
    tokens = model.micro_batch_size * model.encoder_seq_length // cp
    # (field, value shown, the number that must divide, what it is)
    rules = (
        ("micro_batch_size", model.micro_batch_size, tokens, FP8_ROWS, "micro_batch_size x seq_length / CP tokens"),
        ("hidden_size", model.hidden_size, model.hidden_size, FP8_COLUMNS, "hidden_size"),
        ("ffn_hidden_size", model.ffn_hidden_size, model.ffn_hidden_size // tp, FP8_COLUMNS, "ffn_hidden_size / TP"),
        ("num_attention_heads", model.num_attention_heads, attention // tp, FP8_COLUMNS, "heads x head size / TP"),
        (
            "num_attention_heads",
            model.num_attention_heads,
            (attention + 2 * groups) // tp,
            FP8_ROWS,
            "(heads + 2 x query groups) x head size / TP",
        ),
        ("ffn_hidden_size", model.ffn_hidden_size, gate * model.ffn_hidden_size // tp, FP8_ROWS, "ffn width / TP"),
    )
    for field, shown, number, multiple, what in rules:
        if number % multiple:
            raise config_fault(
                f"{key}.{field}",
                shown,
                f"with fp8, Transformer Engine needs {what} ({number}) to be a multiple of {multiple} "
                f"(its FP8 GEMMs take {FP8_ROWS}-row, {FP8_COLUMNS}-column tiles); change it or set fp8: false",
            )
