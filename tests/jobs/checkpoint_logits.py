"""The reference the conversion tests compare against: logits of a training checkpoint, computed with the
trainer's own code (its process setup, its model parts at the training layout, its checkpoint structure
and strict loading, as the core's TrainingModule.load_model_state does), none of the conversion code.

    python -m tests.jobs.checkpoint_logits <training hydra.yaml> <step folder> <inputs.pt> <out.pt> [gpt|bert|t5]
    torchrun --standalone --nproc_per_node=2 -m tests.jobs.checkpoint_logits ...         (a TP=2 run)

inputs.pt: GPT, a [b, s] token tensor; BERT, {"tokens", "types", "padding_mask"} ([b, s] each); T5 (and mT5),
{"encoder", "decoder", "encoder_mask"} ([b, s_enc], [b, s_dec], [b, s_enc]).
Rank 0 writes the logits over the full padded vocabulary, gathered from the tensor-parallel ranks: GPT, the
tensor (T5: the decoder's); BERT, {"lm": masked-LM logits, "binary": the sentence-order head's logits or None}.
"""

import sys

import torch


def _gpt(config):
    from nemo_launcher.contract.schemas.gpt_training import TrainingConfig
    from nemo_launcher.jobs.gpt.recipe import GPT

    cfg = TrainingConfig.from_dict(config)

    def forward(model, tokens):
        positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        return model(tokens, positions, None), None

    return cfg, GPT, forward


def _bert(config):
    from nemo_launcher.contract.schemas.bert_training import BertTrainingConfig
    from nemo_launcher.jobs.bert.recipe import bert_recipe

    cfg = BertTrainingConfig.from_dict(config)

    def forward(model, inputs):
        types = inputs["types"] if cfg.model.bert_binary_head else None
        return model(inputs["tokens"], inputs["padding_mask"], tokentype_ids=types)

    return cfg, bert_recipe(cfg), forward


def _t5(config):
    from nemo_launcher.contract.schemas.t5_training import T5TrainingConfig
    from nemo_launcher.jobs.t5.recipe import T5, attention_masks

    cfg = T5TrainingConfig.from_dict(config)

    def forward(model, inputs):
        batch = {"enc_mask": inputs["encoder_mask"], "dec_mask": torch.ones_like(inputs["decoder"])}
        masks = attention_masks(batch, transformer_engine=False)
        return model(inputs["encoder"], inputs["decoder"], *masks), None

    return cfg, T5, forward


def main(config_path: str, checkpoint: str, inputs_path: str, out_path: str, family: str = "gpt") -> None:
    from megatron.core import dist_checkpointing, parallel_state

    from nemo_launcher.jobs.common.config import load_resolved_config
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.core.parts import build_parts, init_processes, shutdown

    cfg, recipe, forward = {"gpt": _gpt, "bert": _bert, "t5": _t5}[family](load_resolved_config(config_path))
    placement = placement_from_env()
    on_gpu = init_processes(recipe, cfg, placement)
    parts = build_parts(recipe, cfg, placement, on_gpu)
    assert parts.layout["pp"] == 1, "the reference handles tensor parallelism only"
    template = {"state_dict": {f"model{i}": chunk.sharded_state_dict() for i, chunk in enumerate(parts.bare_chunks)}}
    loaded = dist_checkpointing.load(template, checkpoint)
    for i, chunk in enumerate(parts.bare_chunks):
        chunk.load_state_dict(loaded["state_dict"][f"model{i}"], strict=True)
    model = parts.bare_chunks[0].eval()
    with torch.no_grad():
        local, binary = forward(model, torch.load(inputs_path))
    local = local.float().contiguous()
    tp = parallel_state.get_tensor_model_parallel_world_size()
    if tp > 1:  # each rank holds a slice of the vocabulary
        pieces = [torch.empty_like(local) for _ in range(tp)]
        torch.distributed.all_gather(pieces, local, group=parallel_state.get_tensor_model_parallel_group())
        local = torch.cat(pieces, dim=-1)
    if placement.rank == 0:
        torch.save({"lm": local, "binary": binary} if family == "bert" else local, out_path)
    shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:6])
