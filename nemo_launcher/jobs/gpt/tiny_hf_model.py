"""A tiny Hugging Face model made here, with random weights: the stand-in for a downloaded checkpoint where there is
no network (the Llama quick start imports it as it would a downloaded Llama).

    python3 -u -m nemo_launcher.jobs.gpt.tiny_hf_model --config <job dir>/<run.name>_hydra.yaml
    (the job of data_preparation=hf_model/<name>)

Writes output_dir: `transformers`' class for model_type built from the config's sizes (seeded random weights) saved
as config.json + model.safetensors, and tokenizer.json, the repository's tiny byte-level BPE (GPT-2's format, read
through `tokenizers`) whose <|endoftext|> ends documents and answers. A rerun with the same settings keeps the
folder as it is.
"""

import json
from pathlib import Path

PROG = "python3 -m nemo_launcher.jobs.gpt.tiny_hf_model"
EOS = "<|endoftext|>"
_SETTINGS_FILE = "tiny_hf_model_settings.json"
_CONFIG_CLASSES = {
    "llama": "LlamaConfig",
    "mistral": "MistralConfig",
    "qwen2": "Qwen2Config",
    "mixtral": "MixtralConfig",
}


def write_tokenizer(vocab_file: str, merge_file: str, output: Path):
    """GPT-2-format vocab + merges -> a byte-level BPE tokenizer.json; returns the tokenizer."""
    import tokenizers

    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(vocab_file, merge_file))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    tokenizer.add_special_tokens([EOS])
    tokenizer.save(str(output / "tokenizer.json"))
    return tokenizer


def model_config(cfg, vocab_size: int, eos_id: int):
    """The transformers config of cfg's model_type and sizes (no sliding window: the whole context is attended)."""
    import transformers

    settings = dict(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
    )
    if cfg.model_type in ("mistral", "mixtral"):
        settings["sliding_window"] = None
    if cfg.model_type == "mixtral":
        settings.update(num_local_experts=cfg.num_local_experts, num_experts_per_tok=cfg.num_experts_per_tok)
    return getattr(transformers, _CONFIG_CLASSES[cfg.model_type])(**settings)


def write_model(cfg, output: Path) -> str:
    """Writes the folder; returns the architecture written."""
    import torch
    import transformers

    output.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(cfg.vocab_file, cfg.merge_file, output)
    config = model_config(cfg, tokenizer.get_vocab_size(), tokenizer.token_to_id(EOS))
    torch.manual_seed(cfg.seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(output)
    return config.architectures[0] if config.architectures else type(model).__name__


def main(argv=None):
    import dataclasses

    from ...contract.schemas.hf_model_data import TinyHFModelConfig
    from ..steps.config import load_bound
    from ..steps.step_report import StepReport

    cfg = load_bound(TinyHFModelConfig, PROG.removeprefix("python3 -m "), argv)
    report = StepReport("tiny_hf_model", unit="model")
    output = Path(cfg.output_dir)
    settings = json.dumps({k: v for k, v in dataclasses.asdict(cfg).items() if k != "run"}, sort_keys=True)
    marker = output / _SETTINGS_FILE
    if marker.is_file() and marker.read_text() == settings and (output / "config.json").is_file():
        report.kept(str(output), output=str(output / "config.json"))
        return report
    architecture = write_model(cfg, output)
    marker.write_text(settings)  # last: a folder without it is rewritten
    report.done(str(output), output=str(output / "config.json"))
    report.note("model", f"{architecture}, {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, random weights")
    return report


if __name__ == "__main__":
    from ..steps.config import run_step

    run_step(main)
