"""Input files are checked at launch (from this host): data prefixes, tokenizer files, checkpoints, .nemo files and
task data must exist unless an earlier stage of the same pipeline writes them. A real run refuses, a dry run
warns."""

from .test_submission import _fake_slurm, fake_path  # noqa: F401  (fixture)

ON = ["check_inputs=true"]


def _submit(launch, fake_path, tmp_path, overrides):  # noqa: F811
    _fake_slurm(fake_path, 'echo "$((700 + n))"')
    results = tmp_path / "results"
    code, out, err = launch(ON + [f"data_dir={tmp_path}/data", *overrides], debug=False, results=results)
    return code, out, err, results


def test_training_without_its_data_is_refused_naming_the_key(launch, fake_path, tmp_path):  # noqa: F811
    code, out, err, results = _submit(launch, fake_path, tmp_path, ["stages=[training]", "training=gpt3/tiny"])
    assert code == 2, (out, err)
    assert err.count("\n") == 1
    assert f"training.model.tokenizer.vocab_file='{tmp_path}/data/bpe/vocab.json'" in err
    assert (
        "no earlier stage of this pipeline writes it" in err and "check_inputs=false" in err and "more input(s)" in err
    )
    assert not results.exists()


def test_inputs_written_by_an_earlier_stage_are_accepted(launch, fake_path, tmp_path):  # noqa: F811
    code, out, err, _ = _submit(
        launch,
        fake_path,
        tmp_path,
        [
            "stages=[data_preparation,training,conversion,evaluation,export]",
            "data_preparation=gpt3/tiny_pile",
            "training=gpt3/tiny",
            "evaluation=gpt3/evaluate_lambada",
            "evaluation.run.prepare_sample_data=true",
        ],
    )
    assert code == 0, err


def test_a_later_stage_alone_needs_what_the_earlier_one_would_have_written(launch, fake_path, tmp_path):  # noqa: F811
    code, _, err, _ = _submit(launch, fake_path, tmp_path, ["stages=[conversion]", "training=gpt3/tiny"])
    assert code == 2 and "conversion.model.checkpoint_folder=" in err and "gpt3_tiny/results/checkpoints" in err
    code, _, err, _ = _submit(launch, fake_path, tmp_path, ["stages=[evaluation]", "evaluation=gpt3/evaluate_lambada"])
    assert code == 2 and "evaluation.model.nemo_model=" in err
    code, _, err, _ = _submit(launch, fake_path, tmp_path, ["stages=[export]"])
    assert code == 2 and "export.model.checkpoint_path=" in err


def test_task_data_and_local_shards_are_inputs_too(launch, fake_path, tmp_path):  # noqa: F811
    code, _, err, _ = _submit(
        launch,
        fake_path,
        tmp_path,
        ["stages=[conversion,evaluation]", "training=gpt3/tiny", "evaluation=gpt3/evaluate_lambada"],
    )
    assert code == 2 and "conversion.model.checkpoint_folder=" in err and "2 more input(s)" in err  # hparams, task data
    code, _, err, _ = _submit(
        launch,
        fake_path,
        tmp_path,
        [
            "stages=[data_preparation]",
            "data_preparation=gpt3/tiny_pile",
            f"data_preparation.the_pile_url=file://{tmp_path}/nowhere/",
        ],
    )
    assert code == 2 and "data_preparation.the_pile_url=" in err and "nowhere/00.jsonl.zst" in err


def test_dry_run_warns_and_the_check_can_be_turned_off(launch, fake_path, tmp_path):  # noqa: F811
    code, out, err = launch(ON + [f"data_dir={tmp_path}/data", "stages=[training]", "training=gpt3/tiny"], debug=True)
    assert code == 0 and err.count("Warning: a real run would refuse training.") == 3, err
    code, out, err, _ = _submit(
        launch, fake_path, tmp_path, ["stages=[training]", "training=gpt3/tiny", "check_inputs=false"]
    )
    assert code == 0, err


def test_a_data_prefix_whose_bin_is_empty_is_refused(launch, fake_path, tmp_path):  # noqa: F811
    # The tokenizer files exist, so the one refusal left is the dataset with no document (what a preprocess run with
    # allow_empty_shards=true writes for an empty input): megatron-core would fail on it after the queue wait.
    (tmp_path / "data" / "bpe").mkdir(parents=True)
    for name in ("vocab.json", "merges.txt"):
        (tmp_path / "data" / "bpe" / name).write_text("{}")
    prefix = tmp_path / "data" / "empty_text_document"
    (tmp_path / "data" / "empty_text_document.bin").write_bytes(b"")
    (tmp_path / "data" / "empty_text_document.idx").write_bytes(b"MMIDIDX\x00\x00")
    typed = ["stages=[training]", "training=gpt3/tiny", f"training.model.data.data_prefix=[1.0,{prefix}]"]
    code, out, err, results = _submit(launch, fake_path, tmp_path, typed)
    assert code == 2, (out, err)
    assert err == (
        f"Error: training.model.data.data_prefix='{prefix}': {prefix}.bin is empty (0 bytes), a dataset with no "
        "document (training job gpt3_tiny); rerun the data preparation that wrote it on input that holds documents, "
        "or leave this prefix out of the blend\n"
    )
    assert not results.exists()
    code, _, err = launch(ON + [f"data_dir={tmp_path}/data", *typed], debug=True)
    assert code == 0 and err.count(f"Warning: a real run would refuse training.model.data.data_prefix='{prefix}'") == 1
