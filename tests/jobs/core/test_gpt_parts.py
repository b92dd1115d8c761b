"""The trainer's pieces that need no model: config checks, step arithmetic, samplers, checkpoint folders,
data blends, process placement, tokenizers and the FLOPs count. In-process and fast."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
from nemo_launcher.jobs.common.config import JobConfigError
from nemo_launcher.jobs.common.data_blend import auto_blend
from nemo_launcher.jobs.common.distributed import placement_from_env
from nemo_launcher.jobs.core.checkpoints import MARKER, CheckpointFolder
from nemo_launcher.jobs.core.schedule import BatchSchedule, CosineSchedule
from nemo_launcher.launch.stage_config import stage_config, write_stage_config

REPO = Path(__file__).resolve().parents[3]


def training_config(tmp_path, size: str = "tiny") -> dict:
    """The training section the launcher writes for conf/training/gpt3/<size>.yaml."""
    return stage_config("training", f"gpt3/{size}", tmp_path / "data", tmp_path / "results")


def tiny(tmp_path, *overrides) -> dict:
    """The tiny section as the launcher writes it, then edited by hand (`key=yaml value`): bad values reach the
    job's own binding, as they would in a file edited after launch."""
    import yaml

    section = training_config(tmp_path)
    for override in overrides:
        dotted, text = override.split("=", 1)
        *parents, leaf = dotted.split(".")
        node = section
        for part in parents:
            node = node[part]
        node[leaf] = yaml.safe_load(text)
    return section


# ---- config -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "size", ["tiny", "126m", "400m_improved", "1b_improved", "5b", "7b_improved", "20b", "40b", "40b_improved", "175b"]
)
def test_every_predefined_config_binds(tmp_path, size):
    cfg = TrainingConfig.from_dict(training_config(tmp_path, size))
    world = cfg.trainer.num_nodes * cfg.trainer.devices
    assert cfg.data_parallel_size(world) >= 1


@pytest.mark.parametrize(
    "override,message",
    [
        (
            "trainer.max_epochs=3",
            "training.trainer.max_epochs=3: a run is sized in optimizer steps (trainer.max_steps)",
        ),
        (
            "trainer.max_epoch=3",
            (
                "training.trainer.max_epoch: unknown key; did you mean max_epochs or max_steps? "
                "valid keys under training.trainer: num_nodes,"
            ),
        ),
        ("trainer.precision=bf17", "training.trainer.precision='bf17': choose one of bf16, bf16-mixed"),
        ("trainer.precision=bf16", "training.trainer.precision='bf16': needs accelerator gpu"),
        ("trainer.max_time='1:00:00'", "training.trainer.max_time='1:00:00': use \"DD:HH:MM:SS\""),
        ("trainer.accumulate_grad_batches=2", "training.trainer.accumulate_grad_batches=2: must be 1"),
        ("model.activation=relu", "training.model.activation='relu': choose one of gelu, fast-swiglu, squared-relu"),
        ("model.optim.name=sgd", "training.model.optim.name='sgd': choose one of"),
        ("model.optim.sched.name=Linear", "training.model.optim.sched.name='Linear': choose one of CosineAnnealing"),
        (
            "model.data.seq_length=64",
            "training.model.data.seq_length=64: must equal training.model.encoder_seq_length (128)",
        ),
        (
            "model.rampup_batch_size=[4,3,100]",
            "training.model.rampup_batch_size=[4, 3, 100]: global_batch_size(8) must be start(4) + k x increment(3)",
        ),
        (
            "model.data.data_prefix=[0.5,a,b]",
            "training.model.data.data_prefix=[0.5, 'a', 'b']: expected [weight, prefix",
        ),
        ("exp_manager.checkpoint_callback_params.save_top_k=0", "save_top_k=0: must be >= 1 or -1"),
        (
            "model.overlap_p2p_comm=true",
            "training.model.overlap_p2p_comm=True: only works with the interleaved schedule",
        ),
        (
            "trainer.devices=4",
            (
                "training.model.global_batch_size=8: must be a multiple of micro_batch_size(4) "
                "x data-parallel size(4) = 16"
            ),
        ),
        ("model.tensor_model_parallel_size=3", "TP(3) x PP(1) x CP(1) = 3 does not divide nodes(1) x devices(1) = 1"),
        (
            "model.optim.sched.constant_steps=35",
            "training.model.optim.sched.warmup_steps=5: warmup_steps(5) + constant_steps(35) "
            "must be below trainer.max_steps(40)",
        ),
    ],
)
def test_bad_values_name_the_key(tmp_path, override, message):
    with pytest.raises(JobConfigError) as error:
        TrainingConfig.from_dict(tiny(tmp_path, override))
    assert message in str(error.value)


def test_layout_checks_show_every_factor(tmp_path):
    cfg = TrainingConfig.from_dict(tiny(tmp_path))
    with pytest.raises(JobConfigError, match=r"trainer.num_nodes\(1\) x trainer.devices\(1\) = 1, but 2 processes"):
        cfg.data_parallel_size(2)
    with pytest.raises(JobConfigError, match=r"microbatches \(4 / 4 = 1\) must be a multiple of PP\(2\)"):
        TrainingConfig.from_dict(
            tiny(
                tmp_path,
                "trainer.devices=2",
                "model.pipeline_model_parallel_size=2",
                "model.virtual_pipeline_model_parallel_size=2",
                "model.num_layers=4",
                "model.global_batch_size=4",
            )
        )


def test_max_time_is_days_hours_minutes_seconds(tmp_path):
    cfg = TrainingConfig.from_dict(tiny(tmp_path, "trainer.max_time='01:02:03:04'"))
    assert cfg.trainer.max_time_seconds() == ((24 + 2) * 60 + 3) * 60 + 4
    assert TrainingConfig.from_dict(tiny(tmp_path, "trainer.max_time=null")).trainer.max_time_seconds() is None


def test_program_reports_a_config_error_in_one_line_and_exits_2(tmp_path):
    section = tiny(tmp_path)
    section["trainer"]["val_check_interval"] = 0
    from omegaconf import OmegaConf

    OmegaConf.save(OmegaConf.create(section), tmp_path / "bad.yaml")
    result = subprocess.run(
        [sys.executable, "-m", "nemo_launcher.jobs.gpt.train", "--config", str(tmp_path / "bad.yaml")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "Error: training.trainer.val_check_interval=0: must be a positive integer"


# ---- step arithmetic ----------------------------------------------------------------------------------
def test_cosine_schedule_warms_up_decays_and_holds():
    schedule = CosineSchedule(lr=1.0, min_lr=0.1, warmup_steps=4, constant_steps=2, max_steps=14)
    assert [schedule(s) for s in range(4)] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert schedule(4) == pytest.approx(1.0)
    assert schedule(8) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert schedule(12) == schedule(13) == pytest.approx(0.1)
    # One step of decay is the least the schema lets through (common_training.check_schedule).
    shortest = CosineSchedule(lr=1.0, min_lr=0.1, warmup_steps=10, constant_steps=4, max_steps=15)
    assert shortest(10) == pytest.approx(1.0) and shortest(11) == pytest.approx(0.1)


def test_batch_ramp_up_follows_megatron():
    # [start 256, increment 128, 1000 samples] to 512: two increments, one every 500 samples.
    ramp = BatchSchedule(512, micro_batch_size=4, data_parallel_size=8, rampup=[256, 128, 1000])
    assert [ramp.batch_size(c) for c in (0, 499, 500, 999, 1000, 10**9)] == [256, 256, 384, 384, 512, 512]
    assert ramp.microbatches(0) == 8 and ramp.microbatches(1000) == 16
    # consumed_samples(step) is the sum of the batches taken, also past the end of the ramp
    consumed, sizes = 0, []
    for step in range(10):
        assert ramp.consumed_samples(step) == consumed
        sizes.append(ramp.batch_size(consumed))
        consumed += sizes[-1]
    assert sizes == [256, 256, 384, 384, 512, 512, 512, 512, 512, 512]
    assert BatchSchedule(64, 4, 2).consumed_samples(7) == 7 * 64


def test_step_sampler_resumes_where_an_uninterrupted_run_is():
    from nemo_launcher.jobs.core.samplers import StepBatchSampler

    batches = BatchSchedule(8, micro_batch_size=2, data_parallel_size=2, rampup=[4, 4, 12])
    for seed in (None, 5):  # "single" order and "cyclic" (reshuffled each pass over 30 samples)

        def run(start, rank, seed=seed):
            return list(
                StepBatchSampler(30, batches, max_steps=9, start_step=lambda: start, dp_rank=rank, shuffle_seed=seed)
            )

        full = run(0, 0)
        assert len(full) == 9 and run(4, 0) == full[4:]
        if seed is None:
            # the data-parallel ranks split every global batch, in Megatron's order
            assert full[0] == [0, 1] and run(0, 1)[0] == [2, 3]
            assert full[3] == [12, 13, 16, 17] and run(0, 1)[3] == [14, 15, 18, 19]


def test_eval_sampler_reads_the_same_batches_every_time():
    from nemo_launcher.jobs.core.samplers import EvalBatchSampler

    sampler = EvalBatchSampler(100, global_batch_size=8, micro_batch_size=2, dp_rank=1, dp_size=2, limit=3)
    assert list(sampler) == list(sampler) == [[2, 3, 6, 7], [10, 11, 14, 15], [18, 19, 22, 23]]
    assert len(EvalBatchSampler(20, 8, 2, 0, 2, limit=50)) == 2


def test_split_document_counts_round_like_megatron():
    from nemo_launcher.jobs.core.datasets import split_document_counts

    assert split_document_counts("99990,8,2", 862) == [862, 0, 0]
    assert split_document_counts("90,5,5", 862) == [776, 43, 43]
    assert sum(split_document_counts("1,1,1", 10)) == 10


# ---- checkpoint folders -------------------------------------------------------------------------------
def test_only_complete_checkpoints_count_and_prune_keeps_the_newest(tmp_path):
    folder = CheckpointFolder(tmp_path / "checkpoints")
    assert folder.newest_complete() is None
    for step in (10, 20, 30, 40):
        folder.prepare(step)
        (folder.path(step) / "__0_0.distcp").write_text("x")
        if step != 40:  # step 40: a save that died before its marker
            folder.mark_complete(step, {"step": step})
    assert folder.newest_complete() == folder.path(30)
    assert folder.read_info(folder.path(30)) == {"step": 30}
    folder.prepare(5)  # an older failed save
    removed = folder.prune(keep=2)
    assert sorted(p.name for p in removed) == ["step-10", "step-5"]
    assert folder.steps() == [20, 30] and folder.path(40).exists()  # newer than the newest complete: kept
    folder.prepare(40)  # a new save of step 40 starts from an empty folder
    assert list(folder.path(40).iterdir()) == []
    assert not (folder.path(40) / MARKER).exists()
    assert folder.prune(keep=-1) == []


# ---- data blend ---------------------------------------------------------------------------------------
def test_auto_blend_weighs_files_by_size_to_the_alpha(tmp_path):
    for name, size in (("b_text_document", 400), ("a_text_document", 100), ("orphan", 50)):
        (tmp_path / f"{name}.bin").write_bytes(b"\0" * size)
        if name != "orphan":
            (tmp_path / f"{name}.idx").write_bytes(b"\0")
    blend = auto_blend(tmp_path, alpha=0.5)
    assert blend[1::2] == [str(tmp_path / "a_text_document"), str(tmp_path / "b_text_document")]
    assert blend[0::2] == pytest.approx([10 / 30, 20 / 30])
    assert auto_blend(tmp_path, alpha=0.0)[0::2] == pytest.approx([0.5, 0.5])
    assert auto_blend(tmp_path, alpha=1.0)[0::2] == pytest.approx([0.2, 0.8])
    with pytest.raises(FileNotFoundError, match="no such directory"):
        auto_blend(tmp_path / "missing", 0.7)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no .bin/.idx pair"):
        auto_blend(tmp_path / "empty", 0.7)


# ---- processes ----------------------------------------------------------------------------------------
def test_placement_from_torchrun_slurm_or_nothing():
    torchrun = placement_from_env(
        {
            "RANK": "3",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "MASTER_ADDR": "n1",
            "MASTER_PORT": "6000",
            "SLURM_PROCID": "0",
            "SLURM_NTASKS": "1",
        }
    )
    assert (torchrun.rank, torchrun.world_size, torchrun.local_rank, torchrun.source) == (3, 4, 1, "torchrun")
    slurm = placement_from_env(
        {"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "MASTER_ADDR": "n0", "MASTER_PORT": "6001"}
    )
    assert (slurm.rank, slurm.world_size, slurm.local_rank, slurm.master_addr, slurm.source) == (
        9,
        16,
        1,
        "n0",
        "slurm",
    )
    single = placement_from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"})
    assert (single.rank, single.world_size, single.source) == (0, 1, "single") and single.master_port > 0
    with pytest.raises(JobConfigError, match="MASTER_ADDR is not set"):
        placement_from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"})


def test_a_single_process_joins_its_group_without_binding_a_port():
    """Its store is in the process: a port that another process took after free_port() saw it free (a busy CI
    run hit EADDRINUSE this way) does not stop it. In a fresh process: this one's group belongs to other tests."""
    code = (
        "import dataclasses, socket, sys\n"
        "import torch.distributed as dist\n"
        "from nemo_launcher.jobs.common.distributed import init_process_group, placement_from_env\n"
        "with socket.socket() as taken:\n"
        "    taken.bind(('127.0.0.1', 0))\n"
        "    taken.listen()\n"
        "    single = dataclasses.replace(placement_from_env({}), master_port=taken.getsockname()[1])\n"
        "    init_process_group(single, 'gloo', timeout_minutes=1)\n"
        "    print(single.source, dist.get_world_size())\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["single", "1"]


# ---- tokenizers ---------------------------------------------------------------------------------------
def test_gpt2_tokenizer_from_files_gives_gpt2_ids(tmp_path):
    from nemo_launcher.jobs.common.sample_data import gpt2_bpe_files
    from nemo_launcher.jobs.common.tokenizer import load_tokenizer

    vocab, merges = gpt2_bpe_files()
    tok = load_tokenizer("megatron", "GPT2BPETokenizer", vocab_file=str(vocab), merge_file=str(merges))
    assert tok.encode("Hello world, the quick brown fox.") == [15496, 995, 11, 262, 2068, 7586, 21831, 13]
    assert (tok.eod, tok.vocab_size) == (50256, 50257)
    assert tok.decode(tok.encode("a b  c")) == "a b  c"
    with pytest.raises(JobConfigError, match="model.tokenizer.library: 'tiktoken' is not one of"):
        load_tokenizer("tiktoken")
    with pytest.raises(JobConfigError, match=r"model.tokenizer.model: .*nope.model does not exist"):
        load_tokenizer("sentencepiece", model=str(tmp_path / "nope.model"))


def test_huggingface_and_sentencepiece_tokenizers_load(tmp_path):
    import sentencepiece
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from nemo_launcher.jobs.common.tokenizer import load_tokenizer

    text = tmp_path / "corpus.txt"
    text.write_text(
        "\n".join(
            Path(p).read_text(errors="replace") for p in sorted(Path("/usr/share/common-licenses").glob("GPL-*"))[:1]
        )
    )
    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel()
    hf.train(
        [str(text)],
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    hf.save(str(tmp_path / "tokenizer.json"))
    tok = load_tokenizer("huggingface", model=str(tmp_path / "tokenizer.json"))
    assert tok.eod == 0 and tok.vocab_size == hf.get_vocab_size() and tok.encode("license")
    sentencepiece.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(tmp_path / "sp"), vocab_size=300, minloglevel=2
    )
    sp = load_tokenizer("sentencepiece", model=str(tmp_path / "sp.model"))
    assert sp.eod == 2 and sp.vocab_size == 300 and sp.decode(sp.encode("the license")) == "the license"


# ---- FLOPs --------------------------------------------------------------------------------------------
def test_model_flops_per_token_is_6n_plus_attention(tmp_path):
    from nemo_launcher.jobs.core.flops import peak_bf16_flops
    from nemo_launcher.jobs.gpt.flops import model_flops_per_token

    model = TrainingConfig.from_dict(training_config(tmp_path, "126m")).model
    h, layers, seq, vocab = 768, 12, 2048, 50304
    n = layers * 12 * h * h + vocab * h  # qkv 3h^2 + proj h^2 + mlp 8h^2 per layer, plus the output layer
    assert model_flops_per_token(model, vocab) == 6 * n + 12 * layers * seq * h
    assert peak_bf16_flops("NVIDIA H100 80GB HBM3") == 989e12 and peak_bf16_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_bf16_flops("Tesla T4") is None


def test_stage_config_writes_what_the_program_reads(tmp_path):
    from nemo_launcher.jobs.common.config import load_resolved_config

    path = write_stage_config(
        tmp_path / "cfg.yaml",
        "training",
        "gpt3/tiny",
        tmp_path / "data",
        tmp_path / "results",
        overrides=["trainer.max_steps=3", "model.optim.sched.warmup_steps=1"],
    )
    cfg = TrainingConfig.from_dict(load_resolved_config(path))
    assert cfg.trainer.max_steps == 3 and cfg.run.preprocessed_dir == str(
        tmp_path / "data" / "tiny_pile" / "preprocessed"
    )
    assert cfg.exp_manager.explicit_log_dir == str(tmp_path / "results" / "gpt3_tiny" / "results")
