"""Export of a GPT `.nemo` converted at TP=2 x PP=2, as the seed's `export.model.tensor_model_parallel_size=2` asks:
the job gathers the four shards into one model, PyTriton serves it, and a batch of prompts gets the answers the
unsharded (TP=1) model gives in this process. A stated layout the archive does not have stops the job with one
line and exit 2, before anything is written.

The sharded archive is cut from tests/jobs/sft_support.py's tiny_nemo by our split rules (jobs/gpt/shards.py), which
tests/jobs/gpt/test_conversion.py holds equal to the shards megatron-core itself writes at TP=2.
"""

import shutil
import signal
import sys

import pytest

from tests.conftest import require_module

torch = require_module("torch")
require_module("pytriton")

from tests.jobs.gpt.test_deployment import _answers_ready, _start  # noqa: E402
from tests.jobs.gpt_train_support import run_training  # noqa: E402
from tests.jobs.server_ports import server_ports  # noqa: E402
from tests.jobs.sft_support import tiny_bpe_files, tiny_nemo  # noqa: E402, F401  (fixtures)

MODEL = "gpt3_tiny"
PROMPTS = ("The license grants you the right to", "Copyright holders may")
MAX_TOKENS = 5
SHARDED = ["model.tensor_model_parallel_size=2", "triton_deployment.pipeline_model_parallel_size=2"]


@pytest.fixture(scope="module")
def sharded_nemo(tmp_path_factory, tiny_nemo):  # noqa: F811
    """tiny_nemo written as a TP=2 x PP=2 archive: four tp_rank_XX_pp_rank_YYY shards."""
    from nemo_launcher.jobs.core.nemo_archive import layout_of, load_nemo, write_nemo
    from nemo_launcher.jobs.core.shards import split_state_dict
    from nemo_launcher.jobs.gpt.shards import gpt_shard_layout

    folder = tmp_path_factory.mktemp("tp2_pp2")
    config, full = load_nemo(tiny_nemo, folder / "tokenizer")
    layout = gpt_shard_layout(config, 2, 2)
    shards = {}
    for tp_rank in range(2):
        for pp_rank in range(2):
            shards[(tp_rank, pp_rank)] = folder / f"shard_{tp_rank}_{pp_rank}.pt"
            torch.save(split_state_dict(full, layout, tp_rank, pp_rank), shards[(tp_rank, pp_rank)])
    path = write_nemo(
        folder / "megatron_gpt_tp2_pp2.nemo",
        dict(config, tensor_model_parallel_size=2, pipeline_model_parallel_size=2),
        shards,
    )
    assert layout_of(load_nemo_config(path)) == (2, 2)
    return path


def load_nemo_config(path):
    from nemo_launcher.jobs.core.nemo_archive import read_nemo_config

    return read_nemo_config(path)


def export_config(folder, checkpoint, overrides):
    """The config the launcher writes for `stages=[export] export=gpt3/export_gpt3` with these overrides."""
    from nemo_launcher.launch.stage_config import write_stage_config

    return write_stage_config(
        folder / "export.yaml",
        "export",
        "gpt3/export_gpt3",
        data_dir=folder / "data",
        base_results_dir=folder / "results",
        overrides=[
            f"run.model_train_name={MODEL}",
            f"model.checkpoint_path={checkpoint}",
            "model.weight_data_type=fp32",
            "triton_deployment.data_type=fp32",
            "triton_deployment.max_batch_size=2",
            "triton_deployment.instance_kind=KIND_CPU",
            *overrides,
        ],
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory, sharded_nemo):
    folder = tmp_path_factory.mktemp("export_tp2_pp2")
    result = run_training(
        export_config(folder, sharded_nemo, SHARDED), program=("nemo_launcher.jobs.gpt.export",), timeout=300
    )
    assert "warning" not in (result.stdout + result.stderr).lower()
    assert "TP(2) x PP(2) shards into one TP=1 PP=1 model" in result.stdout
    # The results folder is named by the stated layout, as the seed's tp<TP>_pp<PP>_<weights>_<compute>.
    model_repo = folder / "results" / MODEL / "export_tp2_pp2_fp32_fp32" / "model_repo"
    assert (model_repo / MODEL / "1" / "model.nemo").is_file()
    return model_repo


@pytest.fixture(scope="module")
def unsharded_answers(tiny_nemo):  # noqa: F811
    """The tokens the TP=1 model generates for each prompt in this process, without any server."""
    from nemo_launcher.jobs.gpt.generate import greedy_generate
    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo

    model, tokenizer = load_gpt_from_nemo(tiny_nemo)
    answers = [
        greedy_generate(model, tokenizer.encode(prompt), MAX_TOKENS, tokenizer.eod, tokenizer.vocab_size, 64)
        for prompt in PROMPTS
    ]
    assert all(len(ids) == MAX_TOKENS for ids in answers), "an answer that stops early would weaken the comparison"
    assert answers[0] != answers[1], "the prompts must lead to different answers"
    return answers


def test_the_repository_holds_the_gathered_model(repository, tiny_nemo):  # noqa: F811
    from nemo_launcher.jobs.core.nemo_archive import layout_of, load_nemo

    served = repository / MODEL / "1" / "model.nemo"
    assert layout_of(load_nemo_config(served)) == (1, 1)
    gathered, original = load_nemo(served)[1], load_nemo(tiny_nemo)[1]
    assert gathered.keys() == original.keys()
    assert all(torch.equal(gathered[key], original[key]) for key in original)


def test_pytriton_serves_the_sharded_model_as_the_unsharded_one_answers(repository, unsharded_answers, tmp_path):
    import numpy as np
    from pytriton.client import ModelClient

    from nemo_launcher.jobs.serving.text import strip_padding

    http, grpc = server_ports(2)
    log = tmp_path / "serve.log"
    server = _start(
        [
            sys.executable,
            "deployment/serve_pytriton.py",
            "--model-repository",
            str(repository),
            "--http-port",
            str(http),
            "--grpc-port",
            str(grpc),
        ],
        log,
        ready=lambda text: "ready: model '" in text,  # anywhere: tritonserver may not have ended its line
    )
    try:
        _answers_ready(http, server, log)
        with ModelClient(f"http://127.0.0.1:{http}", MODEL, init_timeout_s=120, inference_timeout_s=120) as client:
            result = client.infer_batch(
                prompt=np.array([[prompt.encode()] for prompt in PROMPTS], dtype=np.object_),
                max_tokens=np.full((len(PROMPTS), 1), MAX_TOKENS, dtype=np.int32),
            )
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=120)
    assert code == 0, log.read_text()[-3000:]
    assert [strip_padding(row) for row in result["output_ids"]] == unsharded_answers


def test_a_layout_the_archive_does_not_have_stops_the_job(tmp_path, sharded_nemo):
    """The launcher could not check it (no .nemo there yet when it wrote the config); the job does, first thing."""
    checkpoint = tmp_path / "convert_nemo" / "megatron_gpt.nemo"
    config = export_config(tmp_path, checkpoint, [])
    checkpoint.parent.mkdir()
    shutil.copyfile(sharded_nemo, checkpoint)
    result = run_training(config, program=("nemo_launcher.jobs.gpt.export",), expect_rc=2)
    assert result.stderr.splitlines() == [
        f"Error: export.model.tensor_model_parallel_size=1: {checkpoint} (its model_config.yaml) has TP(2) x PP(2) "
        "shards: set 2 (the export gathers them into one model)"
    ]
    assert not list((tmp_path / "results").rglob("model_repo")), "nothing is exported"
