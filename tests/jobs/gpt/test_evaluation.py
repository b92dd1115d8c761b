"""Evaluation: the lm-eval adapter's numbers against direct computations, and the evaluation job on the
tiny pipeline's converted model with task files written here in lm-eval's formats (no network)."""

import json
import math
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_module

torch = require_module("torch")
require_module("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from nemo_launcher.jobs.common.config import JobConfigError  # noqa: E402
from nemo_launcher.jobs.gpt.lm_adapter import MegatronGPTLM  # noqa: E402
from tests.jobs.gpt_models import megatron_logits, model_section, random_model  # noqa: E402
from tests.jobs.pipeline_support import TINY_VOCAB_DIVISOR, padded_vocab, run_job  # noqa: E402

MAX_LENGTH = 32
LICENSE_WORDS = (
    "Permission is hereby granted free of charge to any person obtaining a copy of this software and "
    "associated documentation files to deal in the Software without restriction including without "
    "limitation the rights to use copy modify merge publish distribute sublicense and sell copies"
).split()


def _requests(kind, arguments):
    return [Instance(request_type=kind, doc={}, arguments=args, idx=0) for args in arguments]


@pytest.fixture(scope="module")
def bpe():
    """The tiny BPE's (vocab.json, merges.txt): the adapter needs a GPT tokenizer, not GPT-2's 50,257 tokens."""
    from nemo_launcher.jobs.common.sample_data import tiny_bpe_files

    return tuple(str(path) for path in tiny_bpe_files())


def _tokenizer_and_padded_vocab(bpe):
    """The tokenizer, and the model's vocabulary rows: padded as the tiny pipeline pads them (2,112 for 2,048
    tokens), so the scores run over padding rows past the tokenizer's ids as they did with GPT-2's files."""
    from nemo_launcher.jobs.common.tokenizer import load_tokenizer

    tokenizer = load_tokenizer("megatron", "GPT2BPETokenizer", vocab_file=bpe[0], merge_file=bpe[1])
    padded = padded_vocab(tokenizer.vocab_size, TINY_VOCAB_DIVISOR)
    assert padded > tokenizer.vocab_size
    return tokenizer, padded


@pytest.fixture(scope="module")
def tiny(bpe):
    tokenizer, padded = _tokenizer_and_padded_vocab(bpe)
    return random_model(model_section("classic", *bpe, init_method_std=0.05), vocab_size=padded), tokenizer


def _direct_loglikelihood(model, tokenizer, context: str, continuation: str):
    """What the adapter must compute, written out: context ids, then the continuation's ids as they come out
    of tokenizing the whole text, scored from the logits of one unpadded forward pass."""
    context_ids = tokenizer.encode(context) if context else [tokenizer.eod]
    whole = tokenizer.encode(context + continuation) if context else [tokenizer.eod] + tokenizer.encode(continuation)
    target = whole[len(context_ids) :]
    sequence = context_ids + target
    log_probs = torch.log_softmax(megatron_logits(model, torch.tensor([sequence[:-1]]))[0], dim=-1)
    picked = log_probs[len(sequence) - 1 - len(target) :]
    total = sum(picked[i, t].item() for i, t in enumerate(target))
    return total, all(picked[i].argmax().item() == t for i, t in enumerate(target))


def test_loglikelihood_matches_direct_computation_in_mixed_batches(tiny):
    model, tokenizer = tiny
    pairs = [
        ("Permission is hereby granted", " free"),
        ("to any person obtaining a copy of this software and", " associated"),
        ("", "Hello world"),
        ("the rights to use, copy, modify,", " merge, publish"),
        ("x", " y"),
    ]
    lm = MegatronGPTLM(model, tokenizer, max_length=MAX_LENGTH, batch_size=3)
    got = lm.loglikelihood(_requests("loglikelihood", pairs), disable_tqdm=True)
    for (context, continuation), (log_prob, greedy) in zip(pairs, got):
        expected, expected_greedy = _direct_loglikelihood(model, tokenizer, context, continuation)
        assert log_prob == pytest.approx(expected, abs=1e-4), (context, continuation)
        assert greedy == expected_greedy


def test_rolling_equals_loglikelihood_of_short_text_and_windows_long_text(tiny):
    model, tokenizer = tiny
    lm = MegatronGPTLM(model, tokenizer, max_length=MAX_LENGTH, batch_size=4)
    short = "Permission is hereby granted, free of charge."
    (rolling,) = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", [(short,)]), disable_tqdm=True)
    ((direct, _),) = lm.loglikelihood(_requests("loglikelihood", [("", short)]), disable_tqdm=True)
    assert rolling == pytest.approx(direct, abs=1e-4)
    # A text longer than the model's window is scored in disjoint windows: every token exactly once.
    long_text = " ".join(LICENSE_WORDS * 2)
    assert len(tokenizer.encode(long_text)) > 2 * MAX_LENGTH
    (value,) = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", [(long_text,)]), disable_tqdm=True)
    assert math.isfinite(value) and value < direct


def test_uniform_model_gives_the_analytic_log_likelihood(bpe):
    tokenizer, padded = _tokenizer_and_padded_vocab(bpe)
    model = random_model(model_section("classic", *bpe), vocab_size=padded)
    with torch.no_grad():
        model.embedding.word_embeddings.weight.zero_()  # tied: every logit is 0, a uniform distribution
    lm = MegatronGPTLM(model, tokenizer, max_length=MAX_LENGTH)
    text = " ".join(LICENSE_WORDS)
    (value,) = lm.loglikelihood_rolling(_requests("loglikelihood_rolling", [(text,)]), disable_tqdm=True)
    # Uniform over every row, padding included (ln 2112, not ln 2048: 0.4% apart, far beyond rel=1e-6).
    assert value == pytest.approx(-len(tokenizer.encode(text)) * math.log(padded), rel=1e-6)


def test_greedy_generation_stops_at_the_stop_string(tiny):
    model, tokenizer = tiny
    lm = MegatronGPTLM(model, tokenizer, max_length=MAX_LENGTH)
    context = "Permission is hereby granted"
    ids = tokenizer.encode(context)
    expected = []
    for _ in range(6):
        logits = megatron_logits(model, torch.tensor([ids + expected]))[0, -1, : tokenizer.vocab_size]
        expected.append(int(logits.argmax()))
    full = tokenizer.decode(expected)
    (free,) = lm.generate_until(_requests("generate_until", [(context, {"until": [], "max_gen_toks": 6})]))
    assert free == full
    stop = full[len(full) // 2 :][:2] or full
    (cut,) = lm.generate_until(_requests("generate_until", [(context, {"until": [stop], "max_gen_toks": 6})]))
    assert cut == full.split(stop)[0]
    with pytest.raises(ValueError, match="greedily only"):
        lm.generate_until(_requests("generate_until", [(context, {"do_sample": True})]))


# ---- the job ---------------------------------------------------------------------------------------------


def _lambada_docs(count: int):
    """lambada_openai rows: a passage whose last word is the target."""
    return [{"text": " ".join(LICENSE_WORDS[i : i + 12])} for i in range(count)]


def _write_task_files(root, lambada):
    def write(relative, rows):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    write("lambada/test.jsonl", lambada)
    write(
        "piqa/validation.jsonl",
        [
            {
                "goal": "To keep the software free",
                "sol1": "publish it with the license",
                "sol2": "sell it in a box",
                "label": 0,
            },
            {"goal": "To copy the software", "sol1": "remove the notice", "sol2": "keep the notice intact", "label": 1},
            {"goal": "To merge the code", "sol1": "follow the terms", "sol2": "ignore the terms", "label": 0},
        ],
    )
    write(
        "wikitext2/test.jsonl",
        [
            {"page": " = Licenses = \n " + " ".join(LICENSE_WORDS) + " \n"},
            {"page": " = Notice = \n The above copyright notice shall be included . \n"},
        ],
    )


def test_evaluation_job_on_the_converted_model(tiny_pipeline):
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo

    run, _ = tiny_pipeline
    config_file = run.configs["evaluation"]
    config = yaml.safe_load(config_file.read_text())
    lambada = _lambada_docs(10)
    _write_task_files(Path(config["run"]["task_data_dir"]), lambada)

    output = run_job(config_file, "nemo_launcher.jobs.gpt.evaluate").stdout
    results_file = Path(config["run"]["results_dir"]) / "results" / "lm_eval_results.json"
    results = json.loads(results_file.read_text())["results"]
    assert "|lambada" in output and "perplexity" in output  # lm-eval's table

    # The job's lambada numbers are those of the .nemo model computed directly here.
    model, tokenizer = load_gpt_from_nemo(config["model"]["nemo_model"])
    # lm-eval's lambada prompt: all words but the last; the target: a space and the last word.
    splits = [doc["text"].rsplit(" ", 1) for doc in lambada]
    scores = [_direct_loglikelihood(model, tokenizer, context, " " + last) for context, last in splits]
    assert results["lambada"]["perplexity,none"] == pytest.approx(
        math.exp(-sum(s for s, _ in scores) / len(scores)), rel=1e-4
    )
    assert results["lambada"]["acc,none"] == pytest.approx(sum(g for _, g in scores) / len(scores))
    assert 0.0 <= results["piqa"]["acc,none"] <= 1.0 and 0.0 <= results["piqa"]["acc_norm,none"] <= 1.0
    assert (
        math.isfinite(results["wikitext2"]["word_perplexity,none"]) and results["wikitext2"]["word_perplexity,none"] > 1
    )

    # Tensor parallel: the TP=1 archive resharded on load, logits gathered over the two ranks: same numbers.
    config["model"].update(tensor_model_parallel_size=2, model_parallel_size=2)
    config["run"].update(results_dir=config["run"]["results_dir"] + "_tp2", ntasks_per_node=2)
    tp2_file = config_file.with_name("eval_tp2_hydra.yaml")
    tp2_file.write_text(yaml.safe_dump(config))
    run_job(tp2_file, "nemo_launcher.jobs.gpt.evaluate", processes=2)
    tp2 = json.loads((Path(config["run"]["results_dir"]) / "results" / "lm_eval_results.json").read_text())["results"]
    for task, metric in (
        ("lambada", "perplexity,none"),
        ("lambada", "acc,none"),
        ("piqa", "acc_norm,none"),
        ("wikitext2", "word_perplexity,none"),
    ):
        assert tp2[task][metric] == pytest.approx(results[task][metric], rel=1e-5), (task, metric)


def test_standard_errors_are_bootstrapped_without_forking_workers(tiny_pipeline, tmp_path, monkeypatch):
    """lm-eval forks a Pool of os.cpu_count() workers from the process holding the model unless told not to; the job
    tells it (a forked worker once hung a CI run's evaluation job)."""
    import multiprocessing.pool

    from nemo_launcher.jobs.gpt.evaluate import EvaluationConfig, evaluate

    run, _ = tiny_pipeline
    config = yaml.safe_load(run.configs["evaluation"].read_text())
    _write_task_files(tmp_path / "tasks", _lambada_docs(10))
    config["run"].update(task_data_dir=str(tmp_path / "tasks"), tasks="lambada", results_dir=str(tmp_path / "r"))
    config["model"]["bootstrap_iters"] = 200  # perplexity's standard error is a bootstrap one
    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_CACHE"):
        monkeypatch.setenv(name, "1" if "OFFLINE" in name else str(tmp_path / "cache"))
    monkeypatch.delenv("DISABLE_MULTIPROC", raising=False)  # restored after the test, whatever the job sets

    def no_pool(*args, **kwargs):
        raise AssertionError("the evaluation started a multiprocessing Pool")

    monkeypatch.setattr(multiprocessing.pool.Pool, "__init__", no_pool)
    results = evaluate(EvaluationConfig.from_dict(config))
    stderr = results["results"]["lambada"]["perplexity_stderr,none"]
    assert math.isfinite(stderr) and stderr > 0, results["results"]["lambada"]


def test_missing_task_file_names_the_path_and_fields(tiny_pipeline, tmp_path, monkeypatch):
    from nemo_launcher.jobs.gpt.evaluate import EvaluationConfig, evaluate

    run, _ = tiny_pipeline
    config = yaml.safe_load(run.configs["evaluation"].read_text())
    config["run"].update(task_data_dir=str(tmp_path / "empty"), tasks="boolq", results_dir=str(tmp_path / "r"))
    for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "HF_DATASETS_CACHE"):
        monkeypatch.setenv(name, "1" if "OFFLINE" in name else str(tmp_path / "cache"))
    with pytest.raises(
        JobConfigError,
        match=r"task boolq reads .*empty/boolq/validation.jsonl, which does not exist; .*passage, question, label",
    ):
        evaluate(EvaluationConfig.from_dict(config))
    with pytest.raises(JobConfigError, match="run.tasks='mmlu': unknown task 'mmlu'"):
        EvaluationConfig.from_dict({**config, "run": {**config["run"], "tasks": "mmlu"}})


def test_sample_eval_data_has_the_fields_lm_eval_tasks_read(tmp_path):
    from nemo_launcher.jobs.gpt.lm_eval_tasks import local_task_configs
    from nemo_launcher.jobs.gpt.sample_eval_data import write_sample_eval_data

    root = write_sample_eval_data(tmp_path, lambada_count=5, wikitext_count=2)
    configs = local_task_configs(["lambada", "wikitext2", "wikitext103"], str(root))
    assert [c["task"] for c in configs] == ["lambada", "wikitext2", "wikitext103"]
    rows = [json.loads(line) for line in (root / "lambada" / "test.jsonl").read_text().splitlines()]
    assert len(rows) == 5 and all(len(row["text"].split()) == 24 for row in rows)


def test_evaluation_of_a_training_checkpoint_converts_it_in_the_same_job(tiny_pipeline, tmp_path):
    """The seed's BCP evaluation names a training checkpoint and tokenizer files, no .nemo
    (evaluation.model.checkpoint_folder, vocab_file, merge_file): the launcher puts the family's conversion program
    before the evaluation in the one job, and the evaluation scores the .nemo it wrote, the same model the
    pipeline's own conversion stage wrote."""
    from nemo_launcher.jobs.core.nemo_archive import load_nemo_shard, read_nemo_config
    from tests.jobs.pipeline_support import plan_pipeline

    run, _ = tiny_pipeline
    conversion = yaml.safe_load(run.configs["conversion"].read_text())
    tokenizer = yaml.safe_load(run.configs["training"].read_text())["model"]["tokenizer"]
    _write_task_files(tmp_path / "tasks", _lambada_docs(4))
    planned = plan_pipeline(
        tmp_path,
        [
            "stages=[evaluation]",
            f"evaluation.model.checkpoint_folder={conversion['model']['checkpoint_folder']}",
            f"evaluation.model.vocab_file={tokenizer['vocab_file']}",
            f"evaluation.model.merge_file={tokenizer['merge_file']}",
            f"evaluation.run.results_dir={tmp_path / 'evaluation'}",
            f"evaluation.run.task_data_dir={tmp_path / 'tasks'}",
            "evaluation.run.tasks=lambada",
            "evaluation.model.bootstrap_iters=0",
        ],
        run.data_dir,
    )
    script = next((tmp_path / "evaluation").glob("*_submission.sh")).read_text()
    assert script.index("nemo_launcher.jobs.gpt.convert") < script.index("nemo_launcher.jobs.gpt.evaluate")
    converted_config = next((tmp_path / "evaluation" / "converted").glob("*_hydra.yaml"))
    run_job(converted_config, "nemo_launcher.jobs.gpt.convert")
    run_job(planned.configs["evaluation"], "nemo_launcher.jobs.gpt.evaluate")

    converted = tmp_path / "evaluation" / "converted" / "results" / "megatron_gpt.nemo"
    results = json.loads((tmp_path / "evaluation" / "results" / "lm_eval_results.json").read_text())
    assert results["model"] == str(converted)
    assert math.isfinite(results["results"]["lambada"]["perplexity,none"])
    pipeline_nemo = Path(conversion["run"]["results_dir"]) / "results" / conversion["run"]["nemo_file_name"]
    assert read_nemo_config(converted)["num_layers"] == read_nemo_config(pipeline_nemo)["num_layers"]
    ours, theirs = load_nemo_shard(converted, 0, 0), load_nemo_shard(pipeline_nemo, 0, 0)
    assert ours.keys() == theirs.keys()
    tensors = [name for name in ours if isinstance(ours[name], torch.Tensor)]
    assert len(tensors) > 10 and all(torch.equal(ours[name], theirs[name]) for name in tensors)
