"""Logits of GPT `.nemo` files at the tensor-parallel size they were written with (each rank loads its own shard),
and whether the distributed checkpoint written beside each holds the same weights.

    torchrun --standalone --nproc_per_node=2 -m tests.jobs.nemo_logits <tp> <tokens.pt> <a.nemo> <a_ckpt|-> <a.pt> ...

Rank 0 writes, per archive, the logits over the full padded vocabulary (gathered from the tensor-parallel ranks) and
the names of the checkpoint tensors (any rank's) that differ from the archive's: {"logits": tensor, "differ": [...]}.
"""

import sys

import torch


def main(tp: str, tokens_path: str, *triples: str) -> None:
    from megatron.core import dist_checkpointing, parallel_state

    from nemo_launcher.jobs.gpt.inference import load_gpt_from_nemo

    tokens = torch.load(tokens_path)
    positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
    for index in range(0, len(triples), 3):
        nemo, checkpoint, out_path = triples[index : index + 3]
        model, _ = load_gpt_from_nemo(nemo, tensor_parallel=int(tp))
        with torch.no_grad():
            local = model(tokens, positions, None).float().contiguous()
        group = parallel_state.get_tensor_model_parallel_group()
        pieces = [torch.empty_like(local) for _ in range(int(tp))]
        torch.distributed.all_gather(pieces, local, group=group)
        differ = []
        if checkpoint != "-":
            sharded = {k: v for k, v in model.sharded_state_dict().items() if not k.endswith("._extra_state")}
            loaded = dist_checkpointing.load(sharded, checkpoint)
            state = model.state_dict()
            differ = [key for key, value in loaded.items() if not torch.equal(value, state[key])]
        every = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every, differ)
        if torch.distributed.get_rank() == 0:
            differ = sorted({key for share in every for key in share})
            torch.save({"logits": torch.cat(pieces, dim=-1), "differ": differ}, out_path)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
