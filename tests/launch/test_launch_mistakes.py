"""Mistakes that used to pass the dry run and fail on the compute node after the queue wait (issue 23, item 6):
each is refused at launch with exit 2, one line naming the key, the value and the fix, and nothing written.

The table runs the launcher in-process as `python3 main.py <overrides>` with NEMO_LAUNCHER_DEBUG=1; the checks that
only a real run makes (GPUs on this machine) and the conversions the launcher makes instead of refusing (a registry
image given to pyxis with its `#`) have their own tests below.
"""

import pytest

from nemo_launcher.launch.container_image import pyxis_image
from nemo_launcher.launch.errors import ConfigError
from nemo_launcher.launch.local_gpus import visible_gpu_count

GPT = ["stages=[training]", "training=gpt3/5b"]
GPT_TINY_HERE = ["stages=[training]", "training=gpt3/tiny", "cluster_type=interactive"]
T5 = ["stages=[training]", "training=t5/220m"]
BERT = ["stages=[training]", "training=bert/110m"]
SFT = ["stages=[fine_tuning]", "fine_tuning=gpt3/squad"]
PILE = ["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile"]
BERT_PILE = ["stages=[data_preparation]", "data_preparation=bert/download_bert_pile"]
MC4 = ["stages=[data_preparation]", "data_preparation=mt5/download_mc4"]
BCP = ["cluster_type=bcp"]
HERE = ["cluster_type=interactive"]
LONG = "r" * 230  # a run name whose log file names pass the 255-byte limit of a file name

# (base, overrides, words the one-line message must contain)
CASES = [
    # durations that stop a job as it starts
    (GPT, ["training.trainer.max_time=00:00:00:00"], ["training.trainer.max_time='00:00:00:00'", "first step"]),
    (T5 + BCP, ["training.trainer.max_time=0:00:00:00"], ["training.trainer.max_time='0:00:00:00'", "first step"]),
    (
        GPT,
        ["training.run.time_limit=5"],
        ["training.run.time_limit='0:05:00'", "300 s before its time limit", "above 0:05:00"],
    ),
    (
        SFT,
        ["fine_tuning.run.time_limit=0:04:00", "cluster.signal_seconds_before_limit=600"],
        ["fine_tuning.run.time_limit='0:04:00'", "above 0:10:00", "cluster.signal_seconds_before_limit"],
    ),
    (BERT, ["training.run.time_limit='00:03:00'"], ["training.run.time_limit='0:03:00'", "above 0:05:00"]),
    # container images pyxis cannot open
    (GPT, ["container=./nemo.sqsh"], ["container='./nemo.sqsh'", "absolute path", "compute node"]),
    (SFT, ["container=nemo_training.sqsh"], ["container='nemo_training.sqsh'", "container=/path/to/nemo_training"]),
    # inputs relative to the launch directory, data prefixes with their suffix
    (
        GPT,
        ["training.model.data.data_prefix=[data/my_text_document]"],
        ["training.model.data.data_prefix='data/my_text_document'", "absolute path", "not in the directory"],
    ),
    (GPT, ["training.model.tokenizer.vocab_file=bpe/vocab.json"], ["training.model.tokenizer.vocab_file='bpe/vocab"]),
    (T5 + BCP, ["training.model.tokenizer.vocab_file=vocab.txt"], ["tokenizer.vocab_file='vocab.txt'", "absolute"]),
    (SFT, ["fine_tuning.model.restore_from_path=gpt3.nemo"], ["restore_from_path='gpt3.nemo'", "absolute path"]),
    (GPT, ["training.exp_manager.explicit_log_dir=logs/5b"], ["explicit_log_dir='logs/5b'", "would write there"]),
    (
        PILE + BCP,
        ["data_preparation.preprocessed_dir=pile/preprocessed"],
        ["data_preparation.preprocessed_dir='pile/preprocessed'", "where no later stage looks"],
    ),
    (
        GPT,
        ["training.model.data.data_prefix=[/data/my_text_document.bin]"],
        ["data_prefix='/data/my_text_document.bin'", "without .bin/.idx: /data/my_text_document"],
    ),
    (
        BERT + BCP,
        ["training.model.data.data_prefix=[0.5,/data/a_text_sentence,0.5,/data/b_text_sentence.idx]"],
        ["data_prefix='/data/b_text_sentence.idx'", "both files are read"],
    ),
    # split strings that leave no training data
    (T5, ["training.model.data.splits_string='0,50,50'"], ["splits_string='0,50,50'", "no training data"]),
    (GPT_TINY_HERE, ["training.model.data.splits_string='0/99/1'"], ["splits_string='0/99/1'", "training share"]),
    # data sources the downloader cannot read, file ranges beyond the data set
    (PILE, ["data_preparation.file_numbers=0-31"], ["data_preparation.file_numbers='0-31'", "30 shards (0-29)"]),
    (
        PILE,
        ["data_preparation.the_pile_url=https://mystic.the-eye.eu/public/AI/pile/train"],
        ["data_preparation.the_pile_url=", "end it with /"],
    ),
    (PILE + HERE, ["data_preparation.the_pile_url=s3://bucket/pile/"], ["the_pile_url='s3://bucket/pile/'", "http"]),
    (BERT_PILE + BCP, ["data_preparation.the_pile_url=file://data/pile/"], ["the_pile_url=", "file:///path"]),
    (
        PILE,
        ["data_preparation.download_vocab_url=gpt2/vocab.json"],
        ["download_vocab_url='gpt2/vocab.json'", "absolute"],
    ),
    (
        MC4,
        ["data_preparation.mc4_repo_url=allenai/c4"],
        ["data_preparation.mc4_repo_url='allenai/c4'", "https://huggingface.co/datasets/allenai/c4"],
    ),
    (MC4 + BCP, ["data_preparation.mc4_repo_url=https://huggingface.co/allenai/c4"], ["mc4_repo_url=", "/datasets/"]),
    (
        MC4,
        ["data_preparation.download_tokenizer_url=gs://t5-data/vocabs/mc4.model"],
        ["download_tokenizer_url='gs://t5-data/vocabs/mc4.model'", "http://, https://, file://, package://"],
    ),
    # settings Transformer Engine refuses
    (GPT_TINY_HERE, ["training.model.fp8=true"], ["training.model.fp8=True", "trainer.accelerator: gpu"]),
    (GPT, ["training.model.fp8=true", "training.model.transformer_engine=false"], ["model.transformer_engine: true"]),
    (
        GPT,
        ["training.model.fp8=true", "training.model.hidden_size=4104", "training.model.num_attention_heads=36"],
        ["training.model.hidden_size=4104", "multiple of 16"],
    ),
    (
        GPT + BCP,
        ["training.model.fp8=true", "training.model.ffn_hidden_size=16392"],
        ["training.model.ffn_hidden_size=16392", "ffn_hidden_size / TP (16392)", "multiple of 16"],
    ),
    (
        GPT,
        [
            "training.model.fp8=true",
            "training.model.micro_batch_size=1",
            "training.model.global_batch_size=128",
            "training.model.encoder_seq_length=2047",
            "training.model.max_position_embeddings=2047",
            "training.model.data.seq_length=2047",
        ],
        ["training.model.micro_batch_size=1", "tokens (2047)", "multiple of 8"],
    ),
    # secrets under names (or with values) the old patterns missed
    (
        GPT,
        ["+env_vars.AZURE_STORAGE_CONNECTION_STRING='DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc'"],
        ["env_vars.AZURE_STORAGE_CONNECTION_STRING='<hidden>'", "secret_files.AZURE_STORAGE_CONNECTION_STRING"],
    ),
    (GPT + BCP, ["+env_vars.AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE"], ["env_vars.AWS_ACCESS_KEY_ID='<hidden>'"]),
    (GPT_TINY_HERE, ["+env_vars.AZURE_STORAGE_KEY=c2VjcmV0"], ["env_vars.AZURE_STORAGE_KEY='<hidden>'"]),
    (SFT, ["+env_vars.MODEL_SOURCE=hf_abcdefghijklmnopqrstuvwxyz012345"], ["env_vars.MODEL_SOURCE='<hidden>'"]),
    (
        GPT,
        ["+training.run.env_vars.GOOGLE_APPLICATION_CREDENTIALS_JSON='{}'"],
        ["training.run.env_vars.GOOGLE_APPLICATION_CREDENTIALS_JSON='<hidden>'"],
    ),
    # run names too long for a file name
    (GPT, [f"training.run.name={LONG}"], ["training.run.name=", "255 bytes", "at most 197 bytes", "job_name_prefix"]),
    (PILE + HERE, [f"data_preparation.run.name={LONG}"], ["_preprocess_<YYYYmmdd_HHMMSS>", "at most 200 bytes"]),
    (T5 + BCP, [f"training.run.name={LONG}"], ["training.run.name=", "log-<run.name>_<YYYYmmdd_HHMMSS>.out"]),
]


@pytest.mark.parametrize("base,overrides,words", CASES, ids=[" ".join(c[0][1:] + c[1])[:90] for c in CASES])
def test_mistake_is_refused_at_launch(base, overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(base + overrides, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not results.exists(), "nothing may be written when validation fails"


def test_the_table_spans_families_stages_and_cluster_types():
    assert len({tuple(base + overrides) for base, overrides, _ in CASES}) >= 25
    everything = {word for base, overrides, _ in CASES for word in base + overrides}
    assert {"cluster_type=bcp", "cluster_type=interactive"} <= everything
    assert {"training=gpt3/5b", "training=t5/220m", "training=bert/110m", "fine_tuning=gpt3/squad"} <= everything
    assert {"data_preparation=gpt3/download_gpt3_pile", "data_preparation=mt5/download_mc4"} <= everything


def test_a_gpu_job_is_refused_here_when_this_machine_shows_fewer_gpus(launch, tmp_path, monkeypatch):
    """A real interactive run (nothing is started: the refusal comes first). CUDA_VISIBLE_DEVICES="" hides every
    GPU, as on a machine without any."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    results = tmp_path / "results"
    overrides = GPT_TINY_HERE + ["training.trainer.accelerator=gpu", "training.trainer.precision=bf16"]
    code, out, err = launch(overrides, debug=False, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: training.trainer.devices=1: ") and err.count("\n") == 1, err
    assert "shows no GPU" in err and "set training.trainer.accelerator=cpu" in err, err
    assert not results.exists()
    # The dry run of the same command says nothing: it is often made on another machine than the run.
    code, out, err = launch(overrides, debug=True, results=tmp_path / "dry")
    assert code == 0 and "GPU" not in err, err


def test_gpus_are_counted_from_the_driver_files_and_cuda_visible_devices(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia3"):
        (dev / name).touch()
    assert visible_gpu_count({}, str(dev)) == 3
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "1"}, str(dev)) == 1
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "0,-1,2"}, str(dev)) == 1  # CUDA stops at the first bad entry
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": ""}, str(dev)) == 0
    assert visible_gpu_count({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}, str(dev)) == 3
    assert visible_gpu_count({}, str(tmp_path / "no_dev")) == 0


@pytest.mark.parametrize(
    "written,given",
    [
        ("nvcr.io/nvidia/nemo:24.01", "nvcr.io#nvidia/nemo:24.01"),
        ("nvcr.io/ea-bignlp/nemofw-training:23.07-py3", "nvcr.io#ea-bignlp/nemofw-training:23.07-py3"),
        ("localhost:5000/team/image:1", "localhost:5000#team/image:1"),
        ("me@nvcr.io/nvidia/nemo:24.01", "me@nvcr.io#nvidia/nemo:24.01"),
        ("nvcr.io#nvidia/nemo:24.01", "nvcr.io#nvidia/nemo:24.01"),
        ("ubuntu:22.04", "ubuntu:22.04"),
        ("nvidia/cuda:12.4.1-base-ubuntu22.04", "nvidia/cuda:12.4.1-base-ubuntu22.04"),
        ("/lustre/images/nemo.sqsh", "/lustre/images/nemo.sqsh"),
    ],
)
def test_a_registry_image_reaches_pyxis_with_its_hash(written, given):
    assert pyxis_image(written) == given


def test_the_rendered_srun_line_carries_the_pyxis_form(launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(GPT + ["container=nvcr.io/nvidia/nemo:24.01"], results=results)
    assert code == 0, err
    (script,) = results.rglob("*_submission.sh")
    assert "--container-image='nvcr.io#nvidia/nemo:24.01' " in script.read_text()


@pytest.mark.parametrize("path", ["../images/nemo.sqsh", "~/nemo.sqsh", "images/nemo.squashfs"])
def test_a_relative_container_file_is_refused(path):
    with pytest.raises(ConfigError, match="absolute path"):
        pyxis_image(path)


def test_a_container_file_this_host_cannot_see_is_refused_like_a_missing_input(launch, tmp_path):
    results = tmp_path / "results"
    missing = tmp_path / "images" / "nemo.sqsh"
    overrides = GPT + [f"container={missing}", "check_inputs=true"]
    code, out, err = launch(overrides, debug=False, results=results)
    assert code == 2 and err == f"Error: container='{missing}': no such file on this host, " + (
        "and pyxis opens it on the compute nodes: fix the path, or set check_inputs=false if only the compute nodes "
        "mount it\n"
    ), err
    assert not results.exists()
    code, out, err = launch(overrides, debug=True, results=results)
    assert code == 0 and err.startswith(f"Warning: a real run would refuse container='{missing}'"), err
    missing.parent.mkdir()
    missing.write_bytes(b"hsqs")
    code, out, err = launch(GPT + [f"container={missing}", "check_inputs=true"], debug=True, results=results)
    assert code == 0 and "container" not in err, err
