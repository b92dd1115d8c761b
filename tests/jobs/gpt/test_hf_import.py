"""Hugging Face import and export back, exact: a tiny model of each architecture is built here with transformers
(random weights, nothing downloaded), imported by the conversion_hf2nemo job the launcher plans (TP 1 and TP 2),
and our model's logits are compared with transformers' own; the .nemo exported back loads in transformers with
the same logits.

- Llama with grouped-query attention and Llama 3.1's rope scaling (rope_theta 500000);
- Mistral (no sliding window), Qwen2 (q/k/v biases, tied embeddings), Mixtral (4 experts, top 2; EP 1).
The TP 2 archives are run at TP 2 (tests/jobs/nemo_logits.py, two processes), each rank on its own shard, and the
distributed checkpoint written beside each must hold the same weights.
"""

import os
import subprocess

import pytest

from tests.conftest import require_module

torch = require_module("torch")
transformers = require_module("transformers")
tokenizers = require_module("tokenizers")

from nemo_launcher.jobs.gpt import inference  # noqa: E402
from nemo_launcher.jobs.gpt.nemo_to_hf import main as nemo_to_hf  # noqa: E402
from tests.jobs import warm_python  # noqa: E402
from tests.jobs.gpt_models import megatron_logits  # noqa: E402
from tests.jobs.pipeline_support import REPO, plan_pipeline, run_job  # noqa: E402

IMPORT = "nemo_launcher.jobs.gpt.hf_import"
TOLERANCE = 1e-5  # max |logit difference| in fp32
VOCAB = 100  # rows of the Hugging Face embedding; the tokenizer knows 92 of them
SHAPE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
# name -> (transformers config class, its settings, our config choice)
ARCHITECTURES = {
    # Llama 3.1's scaling stretches a context of 8192 positions: transformers warns about a shorter one.
    "llama3": (
        "LlamaConfig",
        dict(rope_parameters=LLAMA3_ROPE, max_position_embeddings=16384),
        "hf_llama2/convert_llama2_nemo",
    ),
    "mistral": ("MistralConfig", dict(sliding_window=None), "hf_mistral_7b/convert_mixtral_7b_nemo"),
    "qwen2": ("Qwen2Config", dict(tie_word_embeddings=True), "hf_qwen2/convert_qwen2_nemo"),
    "mixtral": (
        "MixtralConfig",
        dict(num_local_experts=4, num_experts_per_tok=2, sliding_window=None),
        "hf_mixtral/convert_mixtral_nemo",
    ),
}
TOKENS = torch.tensor([[3, 17, 42, 5, 88, 1, 9, 60, 23, 4, 77, 31, 95, 12]])


def _hf_folder(path, name: str):
    """save_pretrained of a random model of architecture `name`, with a word-level tokenizer.json beside it."""
    class_name, settings, _ = ARCHITECTURES[name]
    config = getattr(transformers, class_name)(**{**SHAPE, **settings})
    torch.manual_seed(11)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    transformers.utils.logging.disable_progress_bar()
    model.save_pretrained(path)
    words = ["<unk>", "</s>"] + [f"w{i}" for i in range(VOCAB - 10)]
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel({w: i for i, w in enumerate(words)}, "<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(path / "tokenizer.json"))
    with torch.no_grad():
        return model(TOKENS).logits


def _import(work, data_dir, name: str, tp: int, pp: int = 1):
    """The launcher plans the import job of the folder; the job runs as its script would. Returns results/."""
    choice = ARCHITECTURES[name][2]
    run = plan_pipeline(
        work,
        [
            "stages=[conversion_hf2nemo]",
            f"conversion_hf2nemo={choice}",
            f"conversion_hf2nemo.run.huggingface_ckpt_path={work / name}",
            f"conversion_hf2nemo.run.convert_name=tp{tp}_pp{pp}",
            f"conversion_hf2nemo.model.tensor_model_parallel_size={tp}",
            f"conversion_hf2nemo.model.pipeline_model_parallel_size={pp}",
            "cluster.gpus_per_node=2",
        ],
        data_dir,
    )
    run_job(run.configs["conversion_hf2nemo"], IMPORT, processes=tp * pp)
    return run.configs["conversion_hf2nemo"].parent / "results"


@pytest.fixture(scope="module")
def hf_work(tmp_path_factory):
    """The folders made with transformers, and the launcher's results under results/."""
    return tmp_path_factory.mktemp("hf_import")


@pytest.fixture(scope="module")
def imported(hf_work):
    """name -> (transformers logits, TP 1 results/, TP 2 results/, TP 2 logits at TP 2, checkpoint tensors that
    differ from the TP 2 archive)."""
    work = hf_work
    found = {}
    for name in ARCHITECTURES:
        reference = _hf_folder(work / name, name)
        found[name] = [reference, _import(work, work, name, 1), _import(work, work, name, 2)]
    torch.save(TOKENS, work / "tokens.pt")
    triples = []
    for name, (_, _, tp2) in found.items():
        (nemo,) = tp2.glob("*.nemo")
        triples += [str(nemo), str(tp2 / "checkpoints" / "step-0"), str(work / f"{name}_tp2.pt")]
    _run_at_tp2("tests.jobs.nemo_logits", ["2", str(work / "tokens.pt"), *triples])
    for name in found:
        result = torch.load(work / f"{name}_tp2.pt")
        found[name] += [result["logits"], result["differ"]]
    return found


def _run_at_tp2(module: str, args: list[str]) -> None:
    command = [warm_python.interpreter(), "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    command += ["-m", module, *args]
    env = warm_python.environment(warm_python.job_environment(os.environ))
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{module} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


def _close(ours, theirs) -> float:
    assert ours.shape[-1] >= VOCAB and ours.shape[:-1] == theirs.shape[:-1]
    assert theirs.abs().max() > 0.1  # not a trivially flat model
    return (ours[..., :VOCAB] - theirs).abs().max().item()


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_tp1_import_gives_the_transformers_logits(imported, name):
    reference, tp1, _, _, _ = imported[name]
    (nemo,) = tp1.glob("*.nemo")
    model, tokenizer = inference.load_gpt_from_nemo(nemo)
    assert tokenizer.vocab_size == VOCAB - 8  # the tokenizer came along; the model keeps its 100 rows
    assert _close(megatron_logits(model, TOKENS), reference) < TOLERANCE
    assert (tp1 / "checkpoints" / "step-0" / "COMPLETE").is_file()


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_tp2_import_run_at_tp2_gives_the_transformers_logits(imported, name):
    reference, _, _, tp2_logits, differ = imported[name]
    assert _close(tp2_logits, reference) < TOLERANCE
    assert differ == []  # the distributed checkpoint holds the archive's weights


def test_pp2_import_holds_the_weights_of_the_tp1_import(imported, hf_work):
    """Pipeline stages split the layers: the PP 2 archive's stages, merged, are the TP 1 archive's weights, and its
    checkpoint is complete (each stage saved its layers under their global numbers)."""
    _, tp1, _, _, _ = imported["llama3"]
    pp2 = _import(hf_work, hf_work, "llama3", tp=1, pp=2)
    (whole,), (staged,) = tp1.glob("*.nemo"), pp2.glob("*.nemo")
    _, expected = inference.load_gpt_nemo(whole)
    config, merged = inference.load_gpt_nemo(staged)
    assert config["pipeline_model_parallel_size"] == 2
    assert sorted(merged) == sorted(expected)
    assert all(torch.equal(merged[key], expected[key]) for key in expected)
    assert (pp2 / "checkpoints" / "step-0" / "COMPLETE").is_file()


@pytest.mark.parametrize("name", sorted(ARCHITECTURES))
def test_export_back_loads_in_transformers_with_the_same_logits(imported, name, tmp_path, capsys):
    reference, _, tp2, _, _ = imported[name]
    (nemo,) = tp2.glob("*.nemo")
    assert nemo_to_hf(["--nemo", str(nemo), "--output", str(tmp_path)]) == 0
    expected = {"llama3": "LlamaForCausalLM", "mistral": "LlamaForCausalLM"}.get(name)
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert type(back).__name__ == (expected or ARCHITECTURES[name][0].replace("Config", "ForCausalLM"))
    assert f"Hugging Face {type(back).__name__}: {tmp_path}" in capsys.readouterr().out
    with torch.no_grad():
        logits = back(TOKENS).logits
    assert logits.shape == reference.shape  # the 100 rows of the original, not the padded table
    assert (logits - reference).abs().max().item() < TOLERANCE
    # The tokenizer.json came back. (AutoTokenizer would pick Qwen2's own class by model_type, which rebuilds a BPE
    # from the file; this test's word-level tokenizer has no merges, a real Qwen2's does.)
    assert transformers.PreTrainedTokenizerFast.from_pretrained(tmp_path)("w3 w7")["input_ids"] == [5, 9]


@pytest.mark.parametrize("name", ["llama3", "qwen2"])
def test_a_merged_lora_exports_with_the_merged_models_logits(imported, name, tmp_path):
    """An adapter on the imported model's attention and MLP (random, as a trained one would be) merged by
    lora_merge: transformers computes what our merged model computes, which is not what the base computed."""
    from nemo_launcher.contract.schemas.gpt_sft import LoraSection
    from nemo_launcher.jobs.gpt.lora_merge import main as lora_merge
    from nemo_launcher.jobs.tuning.lora_file import save_adapter_file

    reference, tp1, _, _, _ = imported[name]
    (base,) = tp1.glob("*.nemo")
    generator = torch.Generator().manual_seed(5)
    adapters = {}
    for layer in range(SHAPE["num_hidden_layers"]):
        qkv_rows = (SHAPE["num_attention_heads"] + 2 * SHAPE["num_key_value_heads"]) * 16  # 16 channels a head
        for linear, rows in (
            ("self_attention.linear_qkv", qkv_rows),
            ("mlp.linear_fc1", 2 * SHAPE["intermediate_size"]),
        ):
            name_of = f"decoder.layers.{layer}.{linear}.lora."
            adapters[name_of + "a"] = torch.randn(4, SHAPE["hidden_size"], generator=generator) * 0.1
            adapters[name_of + "b"] = torch.randn(rows, 4, generator=generator) * 0.1
    save_adapter_file(str(tmp_path / "adapter.nemo"), LoraSection(adapter_dim=4, alpha=8.0), adapters, str(base))
    merged = tmp_path / "merged.nemo"
    assert lora_merge(["--base", str(base), "--adapter", str(tmp_path / "adapter.nemo"), "--output", str(merged)]) == 0
    assert nemo_to_hf(["--nemo", str(merged), "--output", str(tmp_path / "hf")]) == 0

    model, _ = inference.load_gpt_from_nemo(merged)
    ours = megatron_logits(model, TOKENS)[..., :VOCAB]
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = back(TOKENS).logits
    assert (ours - theirs).abs().max().item() < TOLERANCE
    assert (theirs - reference).abs().max().item() > 100 * TOLERANCE  # the adapter changed the model


def test_export_of_a_file_that_is_no_nemo_is_one_line(tmp_path, capsys):
    (tmp_path / "config.json").write_text("{}")
    assert nemo_to_hf(["--nemo", str(tmp_path / "config.json"), "--output", str(tmp_path / "hf")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"Error: {tmp_path / 'config.json'}: not a .nemo archive (")
    assert not (tmp_path / "hf").exists()
