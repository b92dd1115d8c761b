"""The tiny BERT LDDL pipeline on the real Slurm, as a user submits it: `data_preparation=bert/tiny_pile_lddl`
(download, extract and lddl_bin as array jobs over the three shards, aftercorr, with the tokenizer job between),
training with dataloader_type LDDL on the folders the preparation writes, and conversion to a .nemo. Short: 4
training steps, one checkpoint; the CPU tests (tests/jobs/bert/test_lddl_pipeline.py) check what the runs mean."""

from .slurm_pipelines import submit_and_wait

FOLDERS = (
    "[" + ",".join(f"${{data_dir}}/tiny_pile_bert/lddl/{split}" for split in ("train", "validation", "test")) + "]"
)
PIPELINE = [
    "stages=[data_preparation,training,conversion]",
    "data_preparation=bert/tiny_pile_lddl",
    "training=bert/tiny",
    "conversion=bert/convert_bert",
    "training.model.data.dataloader_type=LDDL",
    f"training.model.data.data_prefix={FOLDERS}",
    "training.trainer.max_steps=4",
    "training.trainer.val_check_interval=4",
    "training.trainer.limit_val_batches=1",
    "training.trainer.limit_test_batches=0",
    "training.exp_manager.checkpoint_callback_params.every_n_train_steps=4",
    "training.model.optim.sched.warmup_steps=1",
]


def test_tiny_bert_lddl_pipeline_on_slurm(slurm_cluster, tmp_path):
    run = submit_and_wait(slurm_cluster, PIPELINE, tmp_path / "results", tmp_path / "data")
    jobs = [row[1] for row in run.rows]
    assert any(job.endswith("tiny_pile_bert_lddl_lddl_bin") for job in jobs), jobs
    binning = next(row for row in run.rows if row[1].endswith("_lddl_bin"))
    # An array over the shards; it waits for the whole tokenizer job before it, which reads every shard.
    assert binning[7] != "-" and binning[3].startswith("afterok:"), binning
    assert run.stages[-2:] == ["training", "conversion"] and run.states == ["COMPLETED", "COMPLETED"], run.states
    lddl = run.data / "tiny_pile_bert" / "lddl"
    assert sorted(p.name for p in lddl.glob(".shard-*.done.json")) == [f".shard-{n}.done.json" for n in (0, 1, 2)]
    train_dir = run.results / "bert_tiny"
    (log,) = train_dir.glob("log-*_attempt0.out")
    assert "data: LDDL bins: " in log.read_text()
    assert (train_dir / "results" / "checkpoints" / "step-4" / "COMPLETE").is_file()
    assert (train_dir / "convert_nemo" / "results" / "megatron_bert.nemo").is_file()
