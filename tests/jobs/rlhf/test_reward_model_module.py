"""The shared scalar-head model (jobs/rlhf/reward_model.py): built from a plain GPT `.nemo` with a seeded fresh head,
scores that ignore right padding, a `.nemo` that round-trips with its head, and TP=2 (torchrun, 2 processes) giving
TP=1's scores and writing a sharded archive that loads back at TP=1.

    OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/jobs/rlhf/test_reward_model_module.py -q
"""

import json
import subprocess
import sys

import pytest
import torch

from ..data_support import tiny_bpe_files  # noqa: F401  (fixture)
from ..gpt_train_support import REPO, environment
from ..sft_support import tiny_nemo  # noqa: F401  (fixture)

ROWS = [[5, 17, 300, 41, 9, 1023, 77], [8, 8, 2000], [100, 200, 300, 400, 500]]


def _padded(rows, width=None, pad=0):
    width = width or max(len(row) for row in rows)
    return torch.tensor([row + [pad] * (width - len(row)) for row in rows]), torch.tensor([len(r) for r in rows])


def _load(path):
    from nemo_launcher.jobs.gpt.converter import GPT
    from nemo_launcher.jobs.rlhf.reward_model import load_scalar_model

    return load_scalar_model(GPT, path, tp=1, precision="fp32", on_gpu=False)


@pytest.fixture(scope="module")
def fresh(tiny_nemo):  # noqa: F811
    return _load(tiny_nemo)


def test_a_plain_gpt_gets_a_seeded_scalar_head_in_place_of_its_output_layer(fresh, tiny_nemo):  # noqa: F811
    from nemo_launcher.jobs.rlhf.reward_model import CONFIG_KEY, HEAD, HEAD_KEYS

    model, tokenizer, config = fresh
    keys = set(model.state_dict())
    assert set(HEAD_KEYS) <= keys and "output_layer.weight" not in keys
    assert model.reward_head.weight.shape == (1, 64) and model.reward_head.bias.shape == (1,)
    assert config[CONFIG_KEY] == HEAD and tokenizer.vocab_size == 2048
    again, _, _ = _load(tiny_nemo)  # the same seed gives the same head on every load (and every rank)
    assert torch.equal(again.reward_head.weight, model.reward_head.weight)
    assert model.reward_head.weight.abs().max() > 0


def test_scores_ignore_right_padding_and_last_token_scores_read_the_last_real_position(fresh):
    from nemo_launcher.jobs.rlhf.reward_model import last_token_scores, scores

    model, _, _ = fresh
    tokens, lengths = _padded(ROWS)
    with torch.no_grad():
        batch = scores(model, tokens, lengths)
        wide = scores(model, *_padded(ROWS, width=12, pad=1999))  # other padding, longer
        alone = [scores(model, *_padded([row]))[0] for row in ROWS]
        last = last_token_scores(model, tokens, lengths)
    assert batch.shape == (3, 7) and batch.dtype == torch.float32
    for index, row in enumerate(ROWS):
        n = len(row)
        torch.testing.assert_close(batch[index, :n], alone[index], atol=1e-5, rtol=0)
        torch.testing.assert_close(wide[index, :n], alone[index], atol=1e-5, rtol=0)
        assert torch.all(batch[index, n:] == 0) and torch.all(wide[index, n:] == 0)
        assert last[index] == batch[index, n - 1]
    assert len({round(v, 6) for v in last.tolist()}) == 3  # different inputs, different rewards
    with pytest.raises(ValueError, match="within 1..7"):
        scores(model, tokens, torch.tensor([8, 1, 1]))


def test_the_head_takes_gradients_with_the_transformer(fresh):
    from nemo_launcher.jobs.rlhf.reward_model import last_token_scores

    model, _, _ = fresh
    tokens, lengths = _padded(ROWS)
    model.zero_grad()
    last_token_scores(model, tokens, lengths).sum().backward()
    assert model.reward_head.weight.grad.abs().sum() > 0
    assert model.decoder.layers[0].self_attention.linear_qkv.weight.grad.abs().sum() > 0
    model.zero_grad()


def test_the_reward_model_nemo_round_trips_with_its_head(fresh, tmp_path):
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.core.nemo_archive import load_nemo, read_nemo_config
    from nemo_launcher.jobs.rlhf.reward_model import last_token_scores, save_scalar_model

    model, _, config = fresh
    with torch.no_grad():  # a head that is not the fresh one, so a reload that made a new head would differ
        model.reward_head.weight.mul_(3.0)
        model.reward_head.bias.fill_(0.25)
    path = tmp_path / "rm.nemo"
    save_scalar_model(model, config, str(path), "rlhf_rm", placement_from_env())
    stored, weights = load_nemo(path)
    assert stored["reward_model"] == {"head": "scalar"} and "output_layer.weight" not in weights
    assert weights["reward_head.bias"].item() == 0.25
    assert read_nemo_config(path)["tokenizer"]["vocab_file"]
    loaded, _, _ = _load(str(path))
    tokens, lengths = _padded(ROWS)
    with torch.no_grad():
        assert torch.equal(last_token_scores(loaded, tokens, lengths), last_token_scores(model, tokens, lengths))


def test_an_unknown_head_kind_is_refused():
    from nemo_launcher.jobs.common.config import JobConfigError
    from nemo_launcher.jobs.rlhf.reward_model import is_scalar_model

    assert not is_scalar_model({"hidden_size": 64})
    with pytest.raises(JobConfigError, match="reward_model=.*only"):
        is_scalar_model({"reward_model": {"head": "vector"}})


def test_tp2_gives_tp1_scores_and_writes_a_sharded_archive_that_loads_at_tp1(fresh, tmp_path):
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.core.nemo_archive import read_nemo_config
    from nemo_launcher.jobs.rlhf.reward_model import save_scalar_model, scores

    model, _, config = fresh
    source = tmp_path / "rm_tp1.nemo"
    save_scalar_model(model, config, str(source), "rlhf_rm", placement_from_env())
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps(ROWS))
    out, sharded = tmp_path / "tp2_scores.json", tmp_path / "rm_tp2.nemo"
    worker = "tests.jobs.rlhf.scalar_model_worker"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", worker]
    result = subprocess.run(
        [*command, str(source), str(rows), str(out), str(sharded)],
        cwd=REPO,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    tokens, lengths = _padded(ROWS)
    with torch.no_grad():
        expected = scores(model, tokens, lengths)
    torch.testing.assert_close(torch.tensor(json.loads(out.read_text())), expected, atol=1e-4, rtol=0)
    assert read_nemo_config(sharded)["tensor_model_parallel_size"] == 2
    reloaded, _, _ = _load(str(sharded))
    with torch.no_grad():
        torch.testing.assert_close(scores(reloaded, tokens, lengths), expected, atol=1e-4, rtol=0)


def test_an_untied_gpt_loses_its_output_layer_and_keeps_every_other_weight(tmp_path, tiny_bpe_files):  # noqa: F811
    from nemo_launcher.jobs.core.nemo_archive import save_nemo
    from nemo_launcher.jobs.rlhf.reward_model import HEAD_KEYS

    from ..gpt_models import model_section, random_model

    section = model_section("improved", *tiny_bpe_files)
    gpt = random_model(section, 2048).state_dict()
    path = tmp_path / "improved.nemo"
    save_nemo(path, section, gpt)
    model, _, _ = _load(str(path))
    ours = {key: value for key, value in model.state_dict().items() if not key.endswith("._extra_state")}
    theirs = {key: value for key, value in gpt.items() if not key.endswith("._extra_state")}
    assert set(ours) == (set(theirs) - {"output_layer.weight"}) | set(HEAD_KEYS)
    assert all(torch.equal(ours[key], theirs[key]) for key in ours if key not in HEAD_KEYS)
