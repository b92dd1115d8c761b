"""The Llama quick start end to end on this CPU, every path at its default: python3 main.py
--config-name=quickstart_llama makes a tiny Hugging Face Llama, imports it, LoRA-tunes it on generated SQuAD-format
questions with the adapters merged, exports the merged model back to Hugging Face and scores it with lm-eval.
Judged by its files: the exported folder loads in `transformers` as a Llama whose attention weights are the tuned
ones (LoRA on q/k/v moved them away from the model it started from) and whose MLP weights are untouched."""

import json
import os
import subprocess
import sys

from nemo_launcher.launch.resolvers import REPO_ROOT
from tests.conftest import require_module

transformers = require_module("transformers")
torch = require_module("torch")


def test_the_llama_quick_start_goes_from_hugging_face_back_to_hugging_face(tmp_path):
    results, data = tmp_path / "results", tmp_path / "data"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("NEMO_LAUNCHER_DEBUG", None)
    run = subprocess.run(
        [sys.executable, "main.py", "--config-name=quickstart_llama", f"base_results_dir={results}"]
        + [f"data_dir={data}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    train = results / "tiny_llama"
    assert (train / "convert_hf_llama2_to_nemo" / "results" / "tiny_llama.nemo").is_file()
    assert (train / "convert_hf_llama2_to_nemo" / "results" / "checkpoints" / "step-0" / "COMPLETE").is_file()
    merged = train / "peft_squad" / "results" / "checkpoints" / "megatron_llama_peft_lora_merged.nemo"
    assert merged.is_file()
    # The results' folders are printed, the exported one among them.
    assert f"conversion_nemo2hf: {train / 'nemo_to_hf'}" in run.stdout

    exported = train / "nemo_to_hf" / "results" / "hf"
    assert json.loads((exported / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    tuned = transformers.AutoModelForCausalLM.from_pretrained(exported).state_dict()
    start = transformers.AutoModelForCausalLM.from_pretrained(data / "tiny_hf_llama").state_dict()
    assert tuned.keys() == start.keys()
    layer = "model.layers.0"
    assert not torch.equal(tuned[f"{layer}.self_attn.q_proj.weight"], start[f"{layer}.self_attn.q_proj.weight"])
    assert torch.equal(tuned[f"{layer}.mlp.down_proj.weight"], start[f"{layer}.mlp.down_proj.weight"])

    scores = json.loads((train / "eval_lambada" / "results" / "lm_eval_results.json").read_text())
    assert "lambada" in json.dumps(scores)
    logs = {path: path.read_text() for path in sorted(results.rglob("log-*.out"))}
    assert len(logs) == 5, sorted(logs)  # the model, the import, LoRA, the export, the evaluation
    for path, text in logs.items():
        assert "Warning" not in text and "Traceback" not in text, (path, text[-2000:])
