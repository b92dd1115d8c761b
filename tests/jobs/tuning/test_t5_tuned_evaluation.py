"""Evaluation of a T5 or mT5 tuned by prompt learning, adapters or IA3 (evaluation=prompt_t5|prompt_mt5|adapter_t5|
ia3_t5/squad): the launcher writes the config, nemo_launcher.jobs.t5.evaluate_tuned answers every test line with the
base .nemo and the result file, and its predictions are checked against independent computations: IA3 folded into
the base's weights, virtual tokens equal to the placeholder's own embedding (which must change nothing), and
one-line-at-a-time generation; the scores are SQuAD's on those predictions. An mT5 with a SentencePiece vocabulary
is p-tuned through prompt_learning=mt5/squad and evaluated through prompt_mt5/squad."""

from pathlib import Path

import pytest
import yaml

from tests.conftest import require_module
from tests.jobs.gpt_train_support import losses, run_training

from .t5_peft_support import prompt_lines, sharp_mt5, sharp_t5  # noqa: F401  (fixtures)
from .tuned_evaluation_support import check_scores, evaluate, launcher_config, read_lines

torch = require_module("torch")

TOKENS = 4
HEADS, HEAD = 4, 16
TEMPLATE = {
    "taskname": "colors",
    "prompt_template": "context: {context} question: {question} {answer}",
    "total_virtual_tokens": 0,
    "virtual_token_splits": [],
    "truncate_field": "context",
    "answer_field": "answer",
    "answer_only_loss": True,
}
VIRTUAL = dict(
    TEMPLATE,
    prompt_template="<|VIRTUAL_PROMPT_0|> " + TEMPLATE["prompt_template"],
    total_virtual_tokens=3,
    virtual_token_splits=[3],
)


def _base(path):
    from nemo_launcher.jobs.t5.standalone import load_t5_from_nemo

    return load_t5_from_nemo(path)


@pytest.fixture(scope="module")
def test_lines(tmp_path_factory):
    return prompt_lines(tmp_path_factory.mktemp("lines") / "colors_test.jsonl", "colors", count=7)


@pytest.fixture(scope="module")
def result_files(tmp_path_factory, sharp_t5):  # noqa: F811
    """Result files as the tuning stages write them, with tensors far enough from their start to change answers."""
    from nemo_launcher.contract.schemas.gpt_prompt_learning import AdapterSection
    from nemo_launcher.jobs.tuning.layer_adapters import add_houlsby, add_ia3
    from nemo_launcher.jobs.tuning.peft_methods import save_method_file

    folder = tmp_path_factory.mktemp("results")
    generator = torch.Generator().manual_seed(3)
    files = {}
    model, tokenizer = _base(sharp_t5)
    adapter = {"adapter_dim": 8, "adapter_dropout": 0.1, "norm_position": "pre"}
    params = add_houlsby(model, AdapterSection(**adapter), seed=1)
    state = {name: torch.randn(p.shape, generator=generator) * 0.5 for name, p in params.items()}
    files["adapter"] = folder / "megatron_t5_adapter.nemo"
    save_method_file(
        files["adapter"],
        {"method": "adapter", "tasks": {"colors": TEMPLATE}, "adapter_tuning": adapter},
        state,
        sharp_t5,
        "adapter_learning",
    )
    model, _ = _base(sharp_t5)
    params = add_ia3(model)
    state = {name: 1.0 + torch.randn(p.shape, generator=generator) for name, p in params.items()}
    files["ia3"] = folder / "megatron_t5_ia3.nemo"
    save_method_file(files["ia3"], {"method": "ia3", "tasks": {"colors": TEMPLATE}}, state, sharp_t5, "ia3_learning")
    # Virtual tokens: random ones, and the placeholder token's own embedding (replacing it by itself changes nothing).
    tables = {
        "prompt": torch.randn(3, 64, generator=generator),
        "neutral": model.embedding.word_embeddings.weight[tokenizer.eod].detach().repeat(3, 1),
    }
    for name, table in tables.items():
        files[name] = folder / f"megatron_t5_{name}.nemo"
        save_method_file(
            files[name],
            {"method": "prompt", "virtual_prompt_style": "p-tuning", "tasks": {"colors": VIRTUAL}},
            {"prompt_table.colors": table},
            sharp_t5,
            "prompt_learning",
        )
    return {name: str(path) for name, path in files.items()}


def _launcher_config(tmp_path, choice, *overrides):
    return launcher_config(tmp_path, choice, TOKENS, "evaluation.model.data.num_workers=0", *overrides)


def _evaluate(config: Path, processes: int = 1, test_name: str = "colors_test"):
    return evaluate(config, "nemo_launcher.jobs.t5.evaluate_tuned", processes, test_name)[1:]


def _sources(tokenizer, lines, virtual=0):
    """Each line's encoder input as training lays it out: the virtual positions (placeholder ids), each literal piece
    and each field value of the template tokenized on its own, then eos."""
    sources = []
    for line in lines:
        pieces = ["context: ", line["context"], " question: ", line["question"]]
        sources.append(
            [tokenizer.eod] * virtual + [t for piece in pieces for t in tokenizer.encode(piece)] + [tokenizer.eos]
        )
    return sources


def _answers(model, tokenizer, sources):
    from nemo_launcher.jobs.t5.generate import greedy_answers

    return [tokenizer.decode(ids).strip() for ids in greedy_answers(model, sources, tokenizer, TOKENS)]


def test_ia3_answers_equal_the_base_with_the_vectors_folded_into_its_weights(
    tmp_path, sharp_t5, result_files, test_lines
):  # noqa: F811
    from nemo_launcher.jobs.tuning.peft_methods import load_method_file

    config, section = _launcher_config(
        tmp_path,
        "ia3_t5/squad",
        f"evaluation.model.language_model_path={sharp_t5}",
        f"evaluation.model.adapter_model_file={result_files['ia3']}",
        f"evaluation.model.data.test_ds=[{test_lines}]",
        "evaluation.model.data.micro_batch_size=3",
        "evaluation.model.data.global_batch_size=3",
    )
    assert section["run"]["name"] == "eval_squad_t5_220m"
    predictions, metrics = _evaluate(config)
    lines = read_lines(test_lines)
    check_scores(predictions, metrics, lines)

    # IA3 scales the key and value rows of each self-attention's qkv and cross-attention's kv, and fc2's input
    # columns: the same function as scaled weights.
    model, tokenizer = _base(sharp_t5)
    _, vectors = load_method_file(result_files["ia3"], "ia3")
    plain = _answers(model, tokenizer, _sources(tokenizer, lines))
    with torch.no_grad():
        for stack in ("encoder", "decoder"):
            for index, layer in enumerate(getattr(model, stack).layers):
                prefix = f"{stack}.layers.{index}"
                for path, queries in (
                    ("self_attention.linear_qkv", [torch.ones(HEADS, HEAD)]),
                    ("cross_attention.linear_kv", []),
                ):
                    if f"{prefix}.{path}.ia3.key" not in vectors:
                        continue
                    keys, values = (
                        vectors[f"{prefix}.{path}.ia3.{kind}"].view(HEADS, HEAD) for kind in ("key", "value")
                    )
                    scale = torch.cat(queries + [keys, values], dim=1).reshape(-1)
                    linear = layer.get_submodule(path)
                    linear.weight.mul_(scale[:, None])
                    linear.bias.mul_(scale)
                layer.mlp.linear_fc2.weight.mul_(vectors[f"{prefix}.mlp.linear_fc2.ia3_ffn"][None, :])
    expected = _answers(model, tokenizer, _sources(tokenizer, lines))
    assert [p["prediction"] for p in predictions] == expected
    assert plain != expected, "the vectors change the answers, so the comparison means something"

    # Two tensor-parallel ranks, each with its slice of the vectors (cut from the whole file), answer the same.
    section["model"]["tensor_model_parallel_size"] = section["model"]["model_parallel_size"] = 2
    section["run"].update(ntasks_per_node=2, results_dir=str(tmp_path / "tp2"))
    tp2 = tmp_path / "tp2.yaml"
    tp2.write_text(yaml.safe_dump(section))
    two, metrics_two = _evaluate(tp2, processes=2)
    assert [p["prediction"] for p in two] == expected and metrics_two == metrics


def test_adapter_answers_equal_one_line_at_a_time(tmp_path, sharp_t5, result_files, test_lines):  # noqa: F811
    from nemo_launcher.jobs.tuning.peft_methods import restore_result

    config, _ = _launcher_config(
        tmp_path,
        "adapter_t5/squad",
        f"evaluation.model.language_model_path={sharp_t5}",
        f"evaluation.model.adapter_model_file={result_files['adapter']}",
        f"evaluation.model.data.test_ds=[{test_lines}]",
        "evaluation.model.data.num_workers=1",
        "evaluation.model.data.micro_batch_size=4",
        "evaluation.model.data.global_batch_size=4",
    )
    predictions, metrics = _evaluate(config)
    lines = read_lines(test_lines)
    check_scores(predictions, metrics, lines)
    model, tokenizer = _base(sharp_t5)
    restore_result(model, result_files["adapter"], ("adapter",))
    expected = [_answers(model, tokenizer, [source])[0] for source in _sources(tokenizer, lines)]
    assert [p["prediction"] for p in predictions] == expected
    assert predictions[0]["prompt"] == f"context: {lines[0]['context']} question: {lines[0]['question']}"


def test_virtual_tokens_replace_the_encoders_placeholders(tmp_path, sharp_t5, result_files, test_lines):  # noqa: F811
    """Virtual tokens equal to the placeholder's embedding give the base's answers to the placeholder ids; random
    ones give other answers (so they do reach the encoder)."""
    lines = read_lines(test_lines)
    found = {}
    for name in ("neutral", "prompt"):
        config, _ = _launcher_config(
            tmp_path / name,
            "prompt_t5/squad",
            f"evaluation.model.language_model_path={sharp_t5}",
            f"evaluation.model.virtual_prompt_model_file={result_files[name]}",
            f"evaluation.model.data.test_ds=[{test_lines}]",
            "evaluation.model.data.micro_batch_size=4",
            "evaluation.model.data.global_batch_size=4",
        )
        found[name], metrics = _evaluate(config)
        check_scores(found[name], metrics, lines)
    model, tokenizer = _base(sharp_t5)
    base = _answers(model, tokenizer, _sources(tokenizer, lines, virtual=3))
    assert [p["prediction"] for p in found["neutral"]] == base
    assert [p["prediction"] for p in found["prompt"]] != base


def test_an_mt5_with_a_sentencepiece_vocabulary_is_p_tuned_and_evaluated(tmp_path, sharp_mt5):  # noqa: F811
    """prompt_learning=mt5/squad (prompt tuning) and evaluation=prompt_mt5/squad as the launcher writes them, on an
    mT5-shaped base whose vocabulary is a SentencePiece model: the loss falls and the result file's virtual tokens
    answer the test."""
    from nemo_launcher.jobs.tuning.peft_methods import load_method_file
    from nemo_launcher.launch.stage_config import write_stage_config

    data = prompt_lines(tmp_path / "squad_train.jsonl", "squad", count=32)
    test = prompt_lines(tmp_path / "squad_test.jsonl", "squad", count=6)
    overrides = [
        "run.model_train_name=mt5_tiny",
        f"model.language_model_path={sharp_mt5}",
        "squad_preparation=null",
        f"model.data.train_ds=[{data}]",
        f"model.data.validation_ds=[{data}]",
        "model.data.num_workers=0",
        "trainer.devices=1",
        "trainer.accelerator=cpu",
        "trainer.precision=32",
        "trainer.max_steps=16",
        "trainer.log_every_n_steps=1",
        "trainer.val_check_interval=16",
        "trainer.limit_val_batches=1",
        "exp_manager.checkpoint_callback_params.every_n_train_steps=16",
        "model.global_batch_size=8",
        "model.virtual_prompt_style=prompt-tuning",
        "model.micro_batch_size=4",
        "model.encoder_seq_length=48",
        "model.p_tuning.encoder_hidden=32",
        "model.optim.name=adamw",
        "model.optim.lr=2.0e-2",
        "model.optim.sched.warmup_steps=2",
        "model.optim.sched.constant_steps=0",
        "model.optim.sched.min_lr=1.0e-4",
    ]
    config = write_stage_config(
        tmp_path / "prompt_learning.yaml",
        "prompt_learning",
        "mt5/squad",
        data_dir=tmp_path / "data",
        base_results_dir=tmp_path / "results",
        overrides=overrides,
    )
    stdout = run_training(config, timeout=600, program=("nemo_launcher.jobs.t5.prompt_learning",)).stdout
    curve = losses(stdout)
    assert sorted(curve) == list(range(1, 17))
    # About 1 nat lower on average after 16 steps here (the falls of each method are test_t5_prompt_learning's).
    assert sum(curve[s] for s in (14, 15, 16)) < sum(curve[s] for s in (1, 2, 3)) - 1.5, curve
    result = tmp_path / "results" / "mt5_tiny" / "prompt_learning_squad" / "results" / "megatron_mt5_prompt.nemo"
    settings, state = load_method_file(result, "prompt")
    assert state["prompt_table.squad"].shape == (10, 64) and list(settings["tasks"]) == ["squad"]

    eval_config, section = _launcher_config(
        tmp_path / "eval",
        "prompt_mt5/squad",
        "evaluation.run.model_train_name=mt5_tiny",
        f"evaluation.model.language_model_path={sharp_mt5}",
        f"evaluation.model.data.test_ds=[{test}]",
        f"evaluation.run.prompt_learning_dir={tmp_path / 'results' / 'mt5_tiny' / 'prompt_learning_squad'}",
    )
    assert section["model"]["virtual_prompt_model_file"] == str(result)
    predictions, metrics = _evaluate(eval_config, test_name="squad_test")
    check_scores(predictions, metrics, read_lines(test), name="squad_test")
