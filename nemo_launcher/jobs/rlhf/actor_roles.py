"""What the PPO actor asks of the other roles, over the protocol of remote.py (or, for the reference log-probabilities,
of a frozen copy of the policy in the actor itself when initial_policy.serve is false).

    roles = ActorRoles(reward=client, initial_policy=client_or_None, critic=client, local_reference=fn_or_None)
    roles.wait_ready(deadline_s)
    scores = roles.rewards(tokens)           # [rollouts]
    ref = roles.reference_logprobs(tokens)   # per rollout, entry t = log p_ref(tokens[t+1] | tokens[:t+1])

A client that fails raises remote.RoleError naming its role, its address and the cause: the actor stops with it
(exit 1). The reward model may be the critic's own server (critic.trainer.ppo.combine_rm_and_critic_server): the
actor then holds the same address twice and asks it for /rewards and /values alike.
"""

from collections.abc import Callable
from dataclasses import dataclass

from .remote import RoleClient, RoleError

Tokens = list[list[int]]


@dataclass
class ActorRoles:
    reward: RoleClient
    critic: RoleClient
    initial_policy: RoleClient | None  # None: local_reference answers instead
    local_reference: Callable[[Tokens], list[list[float]]] | None = None

    def servers(self) -> list[RoleClient]:
        """Each distinct server once (the critic may host the reward model)."""
        seen, out = set(), []
        for client in (self.reward, self.initial_policy, self.critic):
            if client is not None and client.address not in seen:
                seen.add(client.address)
                out.append(client)
        return out

    def wait_ready(self, deadline_s: float) -> None:
        for client in self.servers():
            client.wait_ready(deadline_s)

    def rewards(self, tokens: Tokens) -> list[float]:
        answer = _field(self.reward, "rewards", {"tokens": tokens}, "rewards")
        _check_rows(self.reward, "rewards", answer, len(tokens))
        return [float(value) for value in answer]

    def reference_logprobs(self, tokens: Tokens) -> list[list[float]]:
        if self.initial_policy is None:
            return self.local_reference(tokens)
        answer = _field(self.initial_policy, "logprobs", {"tokens": tokens}, "logprobs")
        _check_rows(self.initial_policy, "logprobs", answer, len(tokens))
        return answer

    def values(self, tokens: Tokens) -> list[list[float]]:
        answer = _field(self.critic, "values", {"tokens": tokens}, "values")
        _check_rows(self.critic, "values", answer, len(tokens))
        return answer

    def train_critic(
        self,
        tokens: Tokens,
        response_start: list[int],
        returns: list[list[float]],
        old_values: list[list[float]],
        step: int,
    ) -> dict:
        payload = {
            "tokens": tokens,
            "response_start": response_start,
            "returns": returns,
            "old_values": old_values,
            "step": step,
        }
        return self.critic.call("train", payload)

    def save_critic(self, step: int) -> str:
        return str(_field(self.critic, "save", {"step": step}, "saved"))

    def load_critic(self, step: int) -> str:
        return str(_field(self.critic, "load", {"step": step}, "loaded"))

    def shutdown(self) -> None:
        """Every server's /shutdown (each writes what it trained, then exits 0)."""
        for client in self.servers():
            client.call("shutdown", {})


def _field(client: RoleClient, endpoint: str, payload: dict, key: str):
    answer = client.call(endpoint, payload)
    if key not in answer:
        raise RoleError(f"the {client.name} role at {client.address} answered /{endpoint} without {key!r}: {answer}")
    return answer[key]


def _check_rows(client: RoleClient, endpoint: str, rows, expected: int) -> None:
    if not isinstance(rows, list) or len(rows) != expected:
        count = len(rows) if isinstance(rows, list) else type(rows).__name__
        raise RoleError(
            f"the {client.name} role at {client.address} answered /{endpoint} with {count} rows for "
            f"{expected} sequences"
        )


def local_reference_logprobs(reference, pad_id: int, micro_batch: int) -> Callable[[Tokens], list[list[float]]]:
    """The initial policy's /logprobs answered by a frozen copy held in the actor (initial_policy.serve false):
    entry t of a row is log p_ref(tokens[t+1] | tokens[:t+1]), as the server gives it."""
    import torch

    from .ppo import token_logprobs
    from .rollouts import RolloutBatch, forward_logits

    reference.eval()

    @torch.no_grad()
    def answer(tokens: Tokens) -> list[list[float]]:
        out: list[list[float]] = []
        device = next(reference.parameters()).device
        for first in range(0, len(tokens), micro_batch):
            rows = tokens[first : first + micro_batch]
            padded = RolloutBatch(rows, [0] * len(rows)).padded(pad_id, device)
            logp = token_logprobs(forward_logits(reference, padded), padded).cpu()
            out += [logp[i, : len(row) - 1].tolist() for i, row in enumerate(rows)]
        return out

    return answer
