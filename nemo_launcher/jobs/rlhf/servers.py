"""What the PPO server programs share (jobs/gpt/rlhf_ppo_{reward_model,initial_policy,critic}.py): the start of a
role, the token rows of a request, and a model's answer per row computed over the role's data-parallel ranks.

    return run_role(argv, PROG, "reward_model", build)        # build(cfg, placement, server) -> on_shutdown or None
    server.handlers["rewards"] = rewards_handler(model, vocab_size, max_length, micro_batch)

run_role binds the whole rlhf_ppo section (contract/schemas/rlhf_ppo.py), refuses a role the layout does not start
and a process count its trainer section does not ask for, listens on the role's port before the model loads (a port
in use fails at once, naming its key), and serves until the actor's /shutdown. A role of several processes gets
every request on every rank (remote.py's broadcast); the rows are then split over the data-parallel ranks, each
rank runs its share in micro-batches of the role's inference_micro_batch_size with its tensor-parallel peers, and the
answers are gathered in row order. Padding is on the right and attention causal, so a row's answer does not depend on
the rows batched with it.
"""

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from ...contract.rlhf_roles import CRITIC, INITIAL_POLICY, REWARD_MODEL
from ..common.config import JobConfigError, config_path_from_argv, load_resolved_config
from ..common.distributed import Placement, placement_from_env
from ..common.quiet import start_job
from ..common.report import JobFault, print_error
from .remote import RequestError, RoleServer, broadcast_share

Rows = list[list[int]]
# build(cfg, placement, server): loads the role's model, fills server.handlers (and server.info); returns the work to
# do at /shutdown (returning a dict merged into its answer) or None.
Build = Callable[[object, Placement, RoleServer], Callable[[], dict] | None]

_ROLE_PORT_KEYS = {
    REWARD_MODEL: "reward_model.port",
    INITIAL_POLICY: "initial_policy.port",
    CRITIC: "critic.trainer.ppo.port",
}


def run_role(argv, prog: str, role: str, build: Build, run_dir: Callable[[object], str] | None = None) -> int:
    """A server role's main: the exit status (0 after /shutdown; 2 a configuration error; a fault's own code).
    run_dir(cfg): a directory the role writes, claimed for the run (common/run_directory.py) while it serves."""
    from ...contract.schemas.rlhf_ppo import STAGE, PpoConfig
    from ..common.run_directory import claimed
    from ..core.parts import shutdown

    try:
        path = config_path_from_argv(argv, prog=prog)
        placement = placement_from_env()
        start_job(placement.rank)
        cfg = PpoConfig.from_dict(load_resolved_config(path))
        if role not in [r.name for r in cfg.roles()]:
            why = (
                "critic.trainer.ppo.combine_rm_and_critic_server is true: the critic serves the rewards"
                if role == REWARD_MODEL
                else "initial_policy.serve is false: the actor keeps the reference itself"
            )
            raise JobConfigError(f"the {role} role is not part of this layout ({why}); do not start {prog}")
        cfg.role_data_parallel_size(role, placement.world_size)
        port_key = _ROLE_PORT_KEYS[role]
        port = cfg.critic.trainer.ppo.port if role == CRITIC else getattr(cfg, role).port
        server = RoleServer(
            role,
            port,
            {},
            share=broadcast_share() if placement.world_size > 1 else None,
            rank=placement.rank,
            port_key=f"{STAGE}.{port_key}",
        )
        try:
            if run_dir is None:
                server.serve(build(cfg, placement, server))
            else:
                Path(run_dir(cfg)).mkdir(parents=True, exist_ok=True)
                with claimed(Path(run_dir(cfg)), placement.rank, placement.world_size):
                    server.serve(build(cfg, placement, server))
        finally:
            shutdown()
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0


def token_rows(payload: dict, vocab_size: int, max_length: int, field: str = "tokens") -> Rows:
    """The request's token lists, each non-empty, of ids in [0, vocab_size), at most max_length long."""
    rows = payload.get(field)
    if not isinstance(rows, list) or not rows:
        raise RequestError(f"'{field}' must be a non-empty list of token lists")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or not row:
            raise RequestError(f"{field}[{i}] must be a non-empty list of token ids")
        if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in row):
            raise RequestError(f"{field}[{i}] holds an id outside [0, {vocab_size}): the actor's tokenizer differs")
        if len(row) > max_length:
            raise RequestError(f"{field}[{i}] has {len(row)} tokens, more than the model's {max_length} positions")
    return rows


def padded(rows: Sequence[Sequence[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [rows, longest] right-padded with id 0, lengths [rows]) on `device`."""
    width = max(len(row) for row in rows)
    tokens = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    return tokens.to(device), lengths.to(device)


def data_parallel_rows(count: int) -> range:
    """The rows this rank's data-parallel group answers: contiguous shares, the last ones possibly shorter."""
    from megatron.core import parallel_state

    size, rank = parallel_state.get_data_parallel_world_size(), parallel_state.get_data_parallel_rank()
    per_rank = math.ceil(count / size)
    first = min(count, rank * per_rank)
    return range(first, min(count, first + per_rank))


def gather_data_parallel(local: list) -> list:
    """Every data-parallel rank's list, concatenated in rank order (the rows' order)."""
    from megatron.core import parallel_state

    size = parallel_state.get_data_parallel_world_size()
    if size == 1:
        return local
    shares: list = [None] * size
    torch.distributed.all_gather_object(shares, local, group=parallel_state.get_data_parallel_group())
    return [item for share in shares for item in share]


def answer_rows(rows: Rows, micro_batch: int, compute: Callable[[Rows], list]) -> list:
    """compute(micro-batch of rows) -> one answer per row, over this rank's share in micro-batches; all rows'
    answers, in order, on every rank."""
    share = data_parallel_rows(len(rows))
    local: list = []
    with torch.no_grad():
        for first in range(share.start, share.stop, micro_batch):
            local += compute(rows[first : min(first + micro_batch, share.stop)])
    return gather_data_parallel(local)


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def max_positions(model: torch.nn.Module) -> int:
    """The longest sequence the model takes (its position embedding's size)."""
    return int(model.max_sequence_length)


def rewards_handler(
    model: torch.nn.Module, vocab_size: int, micro_batch: int, shift: float = 0.0, scale: float = 1.0
) -> Callable[[dict], dict]:
    """POST /rewards {"tokens": [[int]]} -> {"rewards": [float]}: (the scalar head at each row's last token - shift)
    / scale (reward_model.model.reward_standardization)."""
    from .reward_model import last_token_scores

    def compute(rows: Rows) -> list[float]:
        tokens, lengths = padded(rows, model_device(model))
        return ((last_token_scores(model, tokens, lengths) - shift) / scale).tolist()

    def rewards(payload: dict) -> dict:
        rows = token_rows(payload, vocab_size, max_positions(model))
        return {"rewards": answer_rows(rows, micro_batch, compute)}

    return rewards


def values_handler(model: torch.nn.Module, vocab_size: int, micro_batch: int) -> Callable[[dict], dict]:
    """POST /values {"tokens": [[int]]} -> {"values": [[float]]}: entry t of row i is the head at position t."""
    from .reward_model import scores

    def compute(rows: Rows) -> list[list[float]]:
        tokens, lengths = padded(rows, model_device(model))
        per_position = scores(model, tokens, lengths).tolist()
        return [values[: len(row)] for values, row in zip(per_position, rows, strict=True)]

    def values(payload: dict) -> dict:
        rows = token_rows(payload, vocab_size, max_positions(model))
        return {"values": answer_rows(rows, micro_batch, compute)}

    return values


def logprobs_handler(model: torch.nn.Module, vocab_size: int, micro_batch: int) -> Callable[[dict], dict]:
    """POST /logprobs {"tokens": [[int]]} -> {"logprobs": [[float]]}: entry t of row i is log p(tokens[t+1] |
    tokens[:t+1]) (len - 1 entries), scored as the actor scores its own tokens (jobs/rlhf/ppo.py token_logprobs over
    the full-vocabulary logits of rollouts.forward_logits)."""
    from .ppo import token_logprobs
    from .rollouts import forward_logits

    def compute(rows: Rows) -> list[list[float]]:
        tokens, _ = padded(rows, model_device(model))
        per_position = token_logprobs(forward_logits(model, tokens), tokens).tolist()
        return [logprobs[: len(row) - 1] for logprobs, row in zip(per_position, rows, strict=True)]

    def logprobs(payload: dict) -> dict:
        rows = token_rows(payload, vocab_size, max_positions(model))
        return {"logprobs": answer_rows(rows, micro_batch, compute)}

    return logprobs
