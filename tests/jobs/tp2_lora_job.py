"""Run under torchrun with 2 processes by test_lora.py: builds a random TP=2 GPT (SwiGLU, RoPE, GQA), writes
it as a sharded .nemo, then trains LoRA adapters on it with TP=2.

    torchrun --nproc_per_node=2 -m tests.jobs.tp2_lora_job <work dir> <vocab.json> <merges.txt> <qa.jsonl>   (from the repository root)
"""
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def main(work: str, vocab: str, merges: str, data: str) -> None:
    import torch
    from megatron.core import parallel_state

    from .gpt_models import model_section
    from nemo_launcher.jobs.common.config import bind
    from nemo_launcher.jobs.common.distributed import placement_from_env
    from nemo_launcher.jobs.gpt import peft
    from nemo_launcher.jobs.gpt.config import ModelSection
    from nemo_launcher.jobs.gpt.nemo_archive import write_nemo
    from nemo_launcher.jobs.gpt.sft_config import SftConfig
    from nemo_launcher.jobs.gpt.standalone import build_inference_model, inference_section, start_model_parallel
    from .sft_support import lora_section

    section = model_section("improved", vocab, merges, tensor_model_parallel_size=2, encoder_seq_length=64,
                            max_position_embeddings=64, init_method_std=0.02, data={"seq_length": 64, "num_workers": 0})
    start_model_parallel(2, 1, seed=5)
    torch.manual_seed(5)  # use_cpu_initialization: every TP layout draws the same full weights
    model = build_inference_model(inference_section(bind(ModelSection, section, "model"), 2, 1), 50304, "fp32", initialize=True)
    rank = parallel_state.get_tensor_model_parallel_rank()
    shard = Path(work) / f"shard{rank}.pt"
    torch.save({k: v for k, v in model.state_dict().items() if not k.endswith("_extra_state")}, shard)
    torch.distributed.barrier()
    if rank == 0:
        write_nemo(Path(work) / "tp2.nemo", section, {(t, 0): Path(work) / f"shard{t}.pt" for t in range(2)})
    torch.distributed.barrier()

    config = lora_section(str(Path(work) / "tp2.nemo"), data, str(Path(work) / "lora_tp2"), target_modules=["all"])
    config["trainer"].update(devices=2, max_steps=8, val_check_interval=8)
    config["model"]["tensor_model_parallel_size"] = 2
    peft.lora_tune(SftConfig.from_dict(config, stage="peft"), placement_from_env())


if __name__ == "__main__":
    main(*sys.argv[1:5])
