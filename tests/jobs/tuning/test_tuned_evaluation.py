"""Evaluation of a GPT tuned by prompt learning, adapters or IA3 (evaluation=prompt_gpt3|adapter_gpt3|ia3_gpt3/squad):
the launcher writes the config, the program answers every test line with the base .nemo and the result file, and
its predictions are checked against independent computations: IA3 folded into the base's weights, virtual tokens fed
as the decoder's input embeddings, and one-line-at-a-time generation; the scores are SQuAD's on those predictions."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_module
from tests.jobs.gpt_train_support import REPO, command, environment
from tests.jobs.sft_support import COLORS, sharp_nemo, tiny_bpe_files  # noqa: F401  (fixtures)

from .tuned_evaluation_support import check_scores, evaluate, launcher_config, read_lines

torch = require_module("torch")

TOKENS = 4
TEMPLATE = {
    "taskname": "colors",
    "prompt_template": "Context: {context} Question: {question} Answer: {answer}",
    "total_virtual_tokens": 0,
    "virtual_token_splits": [],
    "truncate_field": "context",
    "answer_field": "answer",
    "answer_only_loss": True,
}
VIRTUAL = dict(
    TEMPLATE,
    prompt_template="<|VIRTUAL_PROMPT_0|>" + TEMPLATE["prompt_template"],
    total_virtual_tokens=3,
    virtual_token_splits=[3],
)


@pytest.fixture(scope="module")
def test_lines(tmp_path_factory):
    path = tmp_path_factory.mktemp("lines") / "colors_test.jsonl"
    with open(path, "w") as handle:
        for i in range(7):
            color = COLORS[i % len(COLORS)]
            handle.write(
                json.dumps(
                    {
                        "taskname": "colors",
                        "context": f"In picture {i} the sky is {color}.",
                        "question": "What color is the sky?",
                        "answer": color,
                        "answers": [color, f"{color} sky"],
                    }
                )
                + "\n"
            )
    return str(path)


def _base():
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo

    return load_gpt_from_nemo


@pytest.fixture(scope="module")
def result_files(tmp_path_factory, sharp_nemo):  # noqa: F811
    """Result files as the tuning stages write them, with tensors far enough from their start to change answers."""
    from nemo_launcher.contract.schemas.gpt_prompt_learning import AdapterSection
    from nemo_launcher.jobs.tuning.layer_adapters import add_houlsby, add_ia3
    from nemo_launcher.jobs.tuning.peft_methods import save_method_file

    folder = tmp_path_factory.mktemp("results")
    generator = torch.Generator().manual_seed(3)
    files = {}
    model, _ = _base()(sharp_nemo)
    adapter = {"adapter_dim": 8, "adapter_dropout": 0.1, "norm_position": "pre"}
    params = add_houlsby(model, AdapterSection(**adapter), seed=1)
    state = {name: torch.randn(p.shape, generator=generator) * 0.5 for name, p in params.items()}
    files["adapter"] = folder / "megatron_gpt_adapter.nemo"
    save_method_file(
        files["adapter"],
        {"method": "adapter", "tasks": {"colors": TEMPLATE}, "adapter_tuning": adapter},
        state,
        sharp_nemo,
        "adapter_learning",
    )
    model, _ = _base()(sharp_nemo)
    params = add_ia3(model)
    state = {name: 1.0 + torch.randn(p.shape, generator=generator) for name, p in params.items()}
    files["ia3"] = folder / "megatron_gpt_ia3.nemo"
    save_method_file(files["ia3"], {"method": "ia3", "tasks": {"colors": TEMPLATE}}, state, sharp_nemo, "ia3_learning")
    files["prompt"] = folder / "megatron_gpt_prompt.nemo"
    save_method_file(
        files["prompt"],
        {"method": "prompt", "virtual_prompt_style": "p-tuning", "tasks": {"colors": VIRTUAL}},
        {"prompt_table.colors": torch.randn(3, 64, generator=generator)},
        sharp_nemo,
        "prompt_learning",
    )
    return {name: str(path) for name, path in files.items()}


def _launcher_config(tmp_path, choice, *overrides):
    return launcher_config(tmp_path, choice, TOKENS, *overrides)


def _evaluate(config: Path, processes: int = 1):
    return evaluate(config, "nemo_launcher.jobs.gpt.evaluate_tuned", processes)


def _prompts(tokenizer, lines, virtual=0):
    """Each test line's prompt ids as training lays them out: the template without its answer, each literal piece
    and each field value tokenized on its own, after the virtual positions."""
    ids = []
    for line in lines:
        pieces = ["Context: ", line["context"], " Question: ", line["question"], " Answer:"]
        ids.append([tokenizer.eod] * virtual + [token for piece in pieces for token in tokenizer.encode(piece)])
    return ids


def _greedy(step, prompt, tokenizer):
    """Greedy decoding written out: `step(ids)` gives the logits of a [1, n] sequence."""
    ids, new = list(prompt), []
    for _ in range(TOKENS):
        token = int(step(torch.tensor([ids]))[0, -1, : tokenizer.vocab_size].argmax())
        if token == tokenizer.eod:
            break
        ids.append(token)
        new.append(token)
    return tokenizer.decode(new).strip()


def test_ia3_answers_equal_the_base_with_the_vectors_folded_into_its_weights(
    tmp_path, sharp_nemo, result_files, test_lines
):  # noqa: F811
    from nemo_launcher.jobs.tuning.peft_methods import load_method_file

    config, section = _launcher_config(
        tmp_path,
        "ia3_gpt3/squad",
        f"evaluation.model.language_model_path={sharp_nemo}",
        f"evaluation.model.adapter_model_file={result_files['ia3']}",
        f"evaluation.model.data.test_ds=[{test_lines}]",
        "evaluation.model.data.num_workers=0",
        "evaluation.model.data.micro_batch_size=3",
        "evaluation.model.data.global_batch_size=3",
    )
    assert section["run"]["name"] == "eval_ia3_squad_gpt3_5b" and section["run"]["tasks"] == "adapter"
    stdout, predictions, metrics = _evaluate(config)
    lines = read_lines(test_lines)
    check_scores(predictions, metrics, lines)
    assert "exact_match" in stdout

    # IA3 scales qkv's key and value rows and fc2's input columns: the same function as scaled weights.
    model, tokenizer = _base()(sharp_nemo)
    _, vectors = load_method_file(result_files["ia3"], "ia3")
    heads, head = 4, 16
    with torch.no_grad():
        for index, layer in enumerate(model.decoder.layers):
            prefix = f"decoder.layers.{index}"
            scale = torch.cat(
                [
                    torch.ones(heads, head),
                    vectors[f"{prefix}.self_attention.linear_qkv.ia3.key"].view(heads, head),
                    vectors[f"{prefix}.self_attention.linear_qkv.ia3.value"].view(heads, head),
                ],
                dim=1,
            ).reshape(-1)
            qkv = layer.self_attention.linear_qkv
            qkv.weight.mul_(scale[:, None])
            qkv.bias.mul_(scale)
            layer.mlp.linear_fc2.weight.mul_(vectors[f"{prefix}.mlp.linear_fc2.ia3_ffn"][None, :])

    def step(ids):
        return model(ids, torch.arange(ids.shape[1]).unsqueeze(0), None)

    expected = [_greedy(step, prompt, tokenizer) for prompt in _prompts(tokenizer, lines)]
    assert [p["prediction"] for p in predictions] == expected
    base, _ = _base()(sharp_nemo)
    plain = [
        _greedy(lambda ids: base(ids, torch.arange(ids.shape[1]).unsqueeze(0), None), prompt, tokenizer)
        for prompt in _prompts(tokenizer, lines)
    ]
    assert plain != expected, "the vectors change the answers, so the comparison means something"

    # Two tensor-parallel ranks, each with its slice of the vectors (cut from the whole file), answer the same.
    section["model"]["tensor_model_parallel_size"] = section["model"]["model_parallel_size"] = 2
    section["run"].update(ntasks_per_node=2, results_dir=str(tmp_path / "tp2"))
    tp2 = tmp_path / "tp2.yaml"
    tp2.write_text(yaml.safe_dump(section))
    _, two, metrics_two = _evaluate(tp2, processes=2)
    assert [p["prediction"] for p in two] == expected and metrics_two == metrics


def test_adapter_answers_equal_one_line_at_a_time(tmp_path, sharp_nemo, result_files, test_lines):  # noqa: F811
    from nemo_launcher.jobs.gpt.generate import greedy_generate
    from nemo_launcher.jobs.tuning.peft_methods import restore_result

    config, _ = _launcher_config(
        tmp_path,
        "adapter_gpt3/squad",
        f"evaluation.model.language_model_path={sharp_nemo}",
        f"evaluation.model.adapter_model_file={result_files['adapter']}",
        f"evaluation.model.data.test_ds=[{test_lines}]",
        "evaluation.model.data.num_workers=1",
        "evaluation.model.data.micro_batch_size=4",
        "evaluation.model.data.global_batch_size=4",
    )
    _, predictions, metrics = _evaluate(config)
    lines = read_lines(test_lines)
    check_scores(predictions, metrics, lines)
    model, tokenizer = _base()(sharp_nemo)
    restore_result(model, result_files["adapter"], ("adapter",))
    expected = [
        tokenizer.decode(greedy_generate(model, ids, TOKENS, tokenizer.eod, tokenizer.vocab_size, 64)).strip()
        for ids in _prompts(tokenizer, lines)
    ]
    assert [p["prediction"] for p in predictions] == expected
    assert predictions[0]["prompt"] == f"Context: {lines[0]['context']} Question: What color is the sky? Answer:"


def test_virtual_tokens_enter_as_the_decoders_input_and_can_be_left_out(tmp_path, sharp_nemo, result_files, test_lines):  # noqa: F811
    from nemo_launcher.jobs.tuning.peft_methods import load_method_file

    config, section = _launcher_config(
        tmp_path,
        "prompt_gpt3/squad",
        f"evaluation.model.language_model_path={sharp_nemo}",
        f"evaluation.model.nemo_model={result_files['prompt']}",
        f"evaluation.model.prompt_dataset_paths={test_lines}",
        "evaluation.model.tensor_model_parallel_size=1",
        "evaluation.model.eval_batch_size=5",
    )
    assert (section["run"]["name"], section["model"]["model_type"]) == ("eval_prompt_squad_gpt3_5b", "nemo-gpt3-prompt")
    _, predictions, metrics = _evaluate(config)
    lines = read_lines(test_lines)
    check_scores(predictions, metrics, lines)

    model, tokenizer = _base()(sharp_nemo)
    _, state = load_method_file(result_files["prompt"], "prompt")
    table = state["prompt_table.colors"]

    def step(ids):  # word embeddings with the table over the first 3 positions, then megatron's own position embeddings
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        words = model.embedding.word_embeddings(ids)
        words = torch.cat([table.unsqueeze(0).to(words.dtype), words[:, 3:]], dim=1)
        embedded = (words + model.embedding.position_embeddings(positions)).transpose(0, 1).contiguous()
        return model(ids, positions, None, decoder_input=embedded)

    expected = [_greedy(step, prompt, tokenizer) for prompt in _prompts(tokenizer, lines, virtual=3)]
    assert [p["prediction"] for p in predictions] == expected

    # disable_special_tokens: the base model's answers to the prompts without the virtual positions.
    section["model"]["disable_special_tokens"] = True
    section["run"]["results_dir"] = str(tmp_path / "plain")
    plain_config = tmp_path / "plain.yaml"
    plain_config.write_text(yaml.safe_dump(section))
    _, plain, _ = _evaluate(plain_config)
    base = [
        _greedy(lambda ids: model(ids, torch.arange(ids.shape[1]).unsqueeze(0), None), prompt, tokenizer)
        for prompt in _prompts(tokenizer, lines)
    ]
    assert [p["prediction"] for p in plain] == base != expected


def test_a_result_file_of_another_method_is_refused_in_one_line(tmp_path, sharp_nemo, result_files, test_lines):  # noqa: F811
    config, _ = _launcher_config(
        tmp_path,
        "adapter_gpt3/squad",
        f"evaluation.model.language_model_path={sharp_nemo}",
        f"evaluation.model.adapter_model_file={result_files['prompt']}",
        f"evaluation.model.data.test_ds=[{test_lines}]",
        "evaluation.model.data.num_workers=0",
    )
    done = subprocess.run(
        command(config, 1, ("nemo_launcher.jobs.gpt.evaluate_tuned",)),
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    error = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert (
        len(error) == 1 and "not a result of adapter or ia3 learning" in error[0] and "it holds prompt" in error[0]
    ), done.stderr[-2000:]
    assert os.path.basename(result_files["prompt"]) in error[0]
