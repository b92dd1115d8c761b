"""Session fixtures for the job tests that need a real tiny pipeline run (conversion, evaluation)."""

import pytest

from .pipeline_support import SHORT_TRAINING, TINY_VOCAB_DIVISOR, build_data, plan_pipeline, prepare_data, run_job


@pytest.fixture(scope="session")
def sample_data_dir(tmp_path_factory):
    """The tiny BPE's files and a small indexed corpus, as data preparation's sample data writes them
    (pipeline_support.build_data)."""
    path = tmp_path_factory.mktemp("data")
    build_data(path)
    return path


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """tiny_data(choice) -> the data_dir that `data_preparation=<choice>` (e.g. bert/tiny_pile) filled, run by the
    launcher here once per session for every module that trains on it; tests only read it."""
    prepared = {}

    def data_dir(choice: str):
        if choice not in prepared:
            prepared[choice] = prepare_data(choice, tmp_path_factory.mktemp(choice.replace("/", "_")))
        return prepared[choice]

    return data_dir


@pytest.fixture(scope="session")
def tiny_pipeline(tmp_path_factory, sample_data_dir):
    """`stages=[training,conversion,evaluation] training=gpt3/tiny` planned by the launcher with default paths
    (evaluation reads lambada, piqa and wikitext2 from <work>/eval_data, which the test writes); training (4 steps)
    and conversion have run.
    Returns (PlannedRun, conversion stdout)."""
    work = tmp_path_factory.mktemp("tiny_pipeline")
    run = plan_pipeline(
        work,
        [
            "stages=[training,conversion,evaluation]",
            "training=gpt3/tiny",
            *SHORT_TRAINING,
            # The tiny BPE's 2,048 tokens are a multiple of the default 128; padded to 2,112 rows instead, so that
            # conversion and evaluation still meet embedding rows past the tokenizer's last id, as GPT-2's do.
            f"training.model.make_vocab_size_divisible_by={TINY_VOCAB_DIVISOR}",
            f"evaluation.run.task_data_dir={work / 'eval_data'}",
            "evaluation.model.bootstrap_iters=0",
            "evaluation.run.tasks=[lambada,piqa,wikitext2]",
        ],
        sample_data_dir,
    )
    run_job(run.configs["training"], "nemo_launcher.jobs.gpt.train")
    log = run_job(run.configs["conversion"], "nemo_launcher.jobs.gpt.convert").stdout
    return run, log
