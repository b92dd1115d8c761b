"""The critic's value loss and its /train payload checks (jobs/rlhf/critic.py), on hand-worked numbers."""

import pytest
import torch

from nemo_launcher.jobs.rlhf.critic import TrainBatch, train_batch, value_loss_sum
from nemo_launcher.jobs.rlhf.remote import RequestError

# Row 0: 4 tokens, response from position 2: its 2 generated tokens were chosen in the states at positions 1 and 2.
BATCH = TrainBatch(
    rows=[[1, 2, 3, 4], [5, 6, 7]],
    response_start=[2, 1],
    returns=[[1.0, 1.0], [0.0, -1.0]],
    old_values=[[0.0, 1.5], [0.1, -1.0]],
    step=1,
)
VALUES = torch.tensor([[0.0, 0.5, 2.0, 9.9], [0.3, 0.1, -0.5, 7.7]])  # position 3 of row 0 and 2 of row 1: unused


def test_the_loss_reads_the_value_of_the_state_before_each_generated_token():
    # Row 0: (0.5-1)^2 + (2-1)^2 = 1.25; row 1 (positions 0, 1): (0.3-0)^2 + (0.1+1)^2 = 0.09 + 1.21 = 1.3.
    total, count = value_loss_sum(VALUES, BATCH, [0, 1], loss_clip=0.0)
    assert count == 4
    torch.testing.assert_close(total, torch.tensor(0.5 * (1.25 + 1.3)))


def test_value_clipping_takes_the_larger_error_of_the_clipped_value():
    # Row 0, clip 0.2: V=0.5 from old 0 -> 0.2: max(0.25, 0.64) = 0.64; V=2 from old 1.5 -> 1.7: max(1, 0.49) = 1.
    # Row 1: V=0.3 from old 0.1 -> 0.3 (within): 0.09; V=0.1 from old -1 -> -0.8: max(1.21, 0.04) = 1.21.
    total, _ = value_loss_sum(VALUES, BATCH, [0, 1], loss_clip=0.2)
    torch.testing.assert_close(total, torch.tensor(0.5 * (0.64 + 1.0 + 0.09 + 1.21)))
    only_second, count = value_loss_sum(VALUES[1:], BATCH, [1], loss_clip=0.2)
    assert count == 2
    torch.testing.assert_close(only_second, torch.tensor(0.5 * (0.09 + 1.21)))


def test_gradients_flow_to_the_values_read_and_no_others():
    values = VALUES.clone().requires_grad_(True)
    total, _ = value_loss_sum(values, BATCH, [0, 1], loss_clip=0.0)
    total.backward()
    expected = torch.tensor([[0.0, -0.5, 1.0, 0.0], [0.3, 1.1, 0.0, 0.0]])  # d/dV 0.5 (V - R)^2 = V - R
    torch.testing.assert_close(values.grad, expected)


def _payload(**changes):
    payload = {
        "tokens": [[1, 2, 3, 4]],
        "response_start": [2],
        "returns": [[1.0, 1.0]],
        "old_values": [[0.0, 0.0]],
        "step": 3,
    }
    payload.update(changes)
    return payload


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"step": 0}, r"'step' must be the actor's PPO step \(an integer >= 1\), got 0"),
        ({"response_start": [2, 2]}, r"'response_start' must hold one entry per row \(1\)"),
        ({"response_start": [0]}, r"response_start\[0\]=0 must be in \[1, 3\] for a row of 4"),
        ({"response_start": [4]}, r"response_start\[0\]=4 must be in \[1, 3\]"),
        ({"returns": [[1.0]]}, r"returns\[0\] must hold 2 numbers, one per generated token"),
        ({"old_values": [[0.0, float("nan")]]}, r"old_values\[0\] must hold finite numbers"),
        ({"tokens": [[1, 2, 3, 5000]]}, r"tokens\[0\] holds an id outside \[0, 2048\)"),
        ({"tokens": [[1, 2, 3, 4, 5, 6, 7, 8, 9]], "response_start": [2]}, r"more than the model's 8 positions"),
    ],
)
def test_a_train_payload_that_does_not_fit_is_refused(changes, message):
    with pytest.raises(RequestError, match=message):
        train_batch(_payload(**changes), vocab_size=2048, max_length=8)


def test_a_fitting_payload_binds():
    batch = train_batch(_payload(), vocab_size=2048, max_length=8)
    assert (batch.rows, batch.response_start, batch.step) == ([[1, 2, 3, 4]], [2], 3)
