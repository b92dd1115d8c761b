"""The data the tiny searches' candidates train on."""

import pytest

from tests.jobs.pipeline_support import build_data


@pytest.fixture(scope="session")
def tiny_search_data(tmp_path_factory):
    """A data_dir holding what search_config=gpt3/tiny's candidates (training=gpt3/tiny) read: the 2,048-token BPE
    and a small indexed corpus under tiny_pile/preprocessed (the search config's vocab_size is that BPE's)."""
    directory = tmp_path_factory.mktemp("tiny_search_data")
    build_data(directory)
    return directory
