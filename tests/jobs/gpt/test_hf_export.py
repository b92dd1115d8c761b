"""Hugging Face export: transformers loads what we wrote and computes the same logits as our model.

transformers is a test-only dependency; the export itself writes config.json + safetensors without it.
"""

import pytest

from tests.conftest import require_module

torch = require_module("torch")
transformers = require_module("transformers")

from nemo_launcher.jobs.gpt.hf_export import GPT2, LLAMA, HFExportError, export_hf, hf_architecture, write_hf_tokenizer  # noqa: E402
from tests.jobs.data_support import gpt2_files  # noqa: E402,F401  (fixture)
from tests.jobs.gpt_models import megatron_logits, model_section, random_model  # noqa: E402

VOCAB = 50257
TOLERANCE = 1e-5

CASES = {
    "gpt2": ("classic", {}, GPT2),
    "gpt2_layernorm1p_untied_nobias": (
        "classic",
        {"normalization": "layernorm1p", "share_embeddings_and_output_weights": False, "bias": False},
        GPT2,
    ),
    "llama_gqa": ("improved", {}, LLAMA),
    "llama_bias_tied": (
        "improved",
        {"bias": True, "share_embeddings_and_output_weights": True, "num_query_groups": None},
        LLAMA,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_transformers_model_gives_our_logits(tmp_path, gpt2_files, case):  # noqa: F811
    style, overrides, architecture = CASES[case]
    section = model_section(style, *gpt2_files, **overrides)
    model = random_model(section)
    assert export_hf(section, model.state_dict(), tmp_path, vocab_size=VOCAB, eod=50256) == architecture
    write_hf_tokenizer(section["tokenizer"], tmp_path, "<|endoftext|>", 32)

    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert type(hf).__name__ == architecture
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    text = "The quick brown fox jumps over the lazy dog, again and again."
    tokens = torch.tensor([hf_tokenizer(text)["input_ids"]])
    ours = megatron_logits(model, tokens)[..., :VOCAB]
    with torch.no_grad():
        theirs = hf(tokens).logits
    diff = (ours - theirs).abs().max().item()
    assert diff < TOLERANCE, f"{case}: max |logit difference| {diff}"
    assert ours.abs().max() > 1.0  # not a trivially flat model


def test_refusals_name_the_blocking_keys(gpt2_files):  # noqa: F811
    improved_1p = model_section("improved", *gpt2_files, normalization="layernorm1p")
    with pytest.raises(HFExportError, match="normalization is layernorm1p .*train with normalization: rmsnorm"):
        hf_architecture(improved_1p)
    with pytest.raises(HFExportError, match="activation is squared-relu"):
        hf_architecture(model_section("classic", *gpt2_files, activation="squared-relu"))
    with pytest.raises(HFExportError, match="rotary_percentage is 0.5"):
        hf_architecture(model_section("improved", *gpt2_files, rotary_percentage=0.5))
    with pytest.raises(HFExportError, match="num_query_groups is 2"):
        hf_architecture(model_section("classic", *gpt2_files, num_query_groups=2))
