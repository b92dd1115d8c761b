"""Every shipped training config holds the values of a table that says where each row comes from, so that a later
edit to a YAML file (or to the family file under it) cannot change a size, a batch or a schedule silently.

    OMP_NUM_THREADS=1 python3 -m pytest -n 0 -p no:randomly tests/launch/test_training_values.py

The rule the configs follow: the seed's value where the seed prints one, else the reference launcher's, else ours
with a comment in the YAML that names the other value and why. Each row below cites its sources:
- `seed 001 l.1207`: line 1207 of seed 001 (the LLM launcher's README; 000 the multimodal one, 002 and 004 DiT);
- `ref gpt3/40b`: the reference launcher's `launcher_scripts/conf/training/gpt3/40b.yaml` (NVIDIA/NeMo-Megatron-
  Launcher: tag 23.07 for GPT, T5, mT5 and BERT, the seed's release; main for the files 23.07 does not have, such
  as the Llama-architecture families);
- `ours`: a value neither gives, or one we keep against them; the config's own comment says which and why.

Each config is composed and validated as the launcher does it (`stage_config`), so a row that the schema would
refuse fails here too. The tiny configs are left out: they are sized for a CPU and have no seed or reference row.
"""

from pathlib import Path

import pytest

from nemo_launcher.launch.resolvers import REPO_ROOT
from nemo_launcher.launch.stage_config import stage_config

TRAINING = REPO_ROOT / "conf" / "training"


def _common(c: dict) -> dict:
    model, sched = c["model"], c["model"]["optim"]["sched"]
    return {
        "nodes": c["trainer"]["num_nodes"],
        "tp": model["tensor_model_parallel_size"],
        "pp": model["pipeline_model_parallel_size"],
        "mbs": model["micro_batch_size"],
        "gbs": model["global_batch_size"],
        "lr": model["optim"]["lr"],
        "min_lr": sched["min_lr"],
        "warmup": sched["warmup_steps"],
        "constant": sched["constant_steps"],
    }


def _tower(section: dict, layers: str = "num_layers") -> dict:
    return {"layers": section[layers], "hidden": section["hidden_size"], "heads": section["num_attention_heads"]}


def _decoder_only(c: dict) -> dict:
    return {"seq": c["model"]["encoder_seq_length"], **_tower(c["model"])}


def _encoder_decoder(c: dict) -> dict:
    # T5 and mT5 configs give the encoder's depth; the decoder's follows it (the family file says so).
    return {"seq": c["model"]["encoder_seq_length"], **_tower(c["model"], "encoder_num_layers")}


def _vit(c: dict) -> dict:
    return {"image": c["model"]["img_h"], "patch": c["model"]["patch_dim"], **_tower(c["model"])}


def _clip(c: dict) -> dict:
    vision, text = c["model"]["vision"], c["model"]["text"]
    text_tower = {f"text_{name}": value for name, value in _tower(text).items()}
    return {
        "image": vision["img_h"],
        "patch": vision["patch_dim"],
        **_tower(vision),
        "text_seq": text["encoder_seq_length"],
        **text_tower,
    }


def _latent_diffusion(c: dict) -> dict:
    return {"latent": c["model"]["image_size"]}  # latent pixels per side: image pixels / 8


def _dit(c: dict) -> dict:
    return {"seq": c["model"]["data"]["seq_length"], **_tower(c["model"])}


# family -> the shape columns of its rows (every row also has the columns of _common)
SHAPE = {
    "gpt3": _decoder_only,
    "bert": _decoder_only,
    "t5": _encoder_decoder,
    "mt5": _encoder_decoder,
    "vit": _vit,
    "clip": _clip,
    "stable_diffusion": _latent_diffusion,
    "dreambooth": _latent_diffusion,
    "instruct_pix2pix": _latent_diffusion,
    "dit": _dit,
    **{family: _decoder_only for family in ("llama", "mistral", "qwen2", "mixtral", "nemotron")},
}

V = dict

# The reference's Stable Diffusion rate, held after the warm-up (its WarmupHoldPolicy)
SD_RATE = V(lr=8.192e-5, min_lr=8.192e-5, constant=0)

# config: (sources, values)
ROWS = {
    # GPT: sizes, TP/PP and nodes from the seed's paragraph for each size; batches, rates and schedules from ref.
    "gpt3/126m": (
        "seed 001 l.1207-1209; ref gpt3/126m",
        V(nodes=8, tp=1, pp=1, mbs=4, gbs=256, seq=2048, layers=12, hidden=768, heads=12)
        | V(lr=6e-4, min_lr=6e-5, warmup=636, constant=100000),
    ),
    "gpt3/400m_improved": (
        "seed 001 l.1197 (name only); ref gpt3/400m_improved",
        V(nodes=8, tp=1, pp=1, mbs=4, gbs=256, seq=2048, layers=24, hidden=1024, heads=16)
        | V(lr=2.5e-4, min_lr=2.5e-5, warmup=500, constant=0),
    ),
    "gpt3/1b_improved": (
        "seed 001 l.1197 (name only); ref gpt3/1b_improved",
        V(nodes=8, tp=1, pp=1, mbs=2, gbs=512, seq=2048, layers=24, hidden=2048, heads=16)
        | V(lr=2e-4, min_lr=2e-5, warmup=500, constant=0),
    ),
    "gpt3/5b": (
        "seed 001 l.1243-1246; ref gpt3/5b (batches: the seed's 1440 of l.5693 is a 20-node TP 2 run, see the YAML)",
        V(nodes=16, tp=1, pp=1, mbs=4, gbs=2048, seq=2048, layers=24, hidden=4096, heads=32)
        | V(lr=1.6e-4, min_lr=1.6e-5, warmup=115, constant=12500),
    ),
    "gpt3/7b_improved": (
        "seed 001 l.1197 (name only); ref gpt3/7b_improved",
        V(nodes=16, tp=2, pp=1, mbs=1, gbs=512, seq=2048, layers=32, hidden=4096, heads=32)
        | V(lr=1e-4, min_lr=1e-5, warmup=500, constant=0),
    ),
    "gpt3/20b": (
        "seed 001 l.1277-1280; ref gpt3/20b",
        V(nodes=64, tp=4, pp=1, mbs=4, gbs=2048, seq=2048, layers=44, hidden=6144, heads=48)
        | V(lr=1.4e-4, min_lr=1.4e-5, warmup=115, constant=12500),
    ),
    "gpt3/40b": (
        "seed 001 l.1310-1313; ref gpt3/40b",
        V(nodes=128, tp=8, pp=1, mbs=4, gbs=2048, seq=2048, layers=48, hidden=8192, heads=64)
        | V(lr=1.1e-4, min_lr=1.1e-5, warmup=115, constant=12500),
    ),
    "gpt3/40b_improved": (
        "seed 001 l.1198 (name only); ref gpt3/40b_improved",
        V(nodes=96, tp=8, pp=2, mbs=1, gbs=1536, seq=2048, layers=48, hidden=8192, heads=64)
        | V(lr=9e-5, min_lr=9e-5, warmup=500, constant=0),
    ),
    "gpt3/175b": (
        "seed 001 l.1343-1347 (TP 8, PP 16; ref 23.07 has TP 4, PP 8); ref gpt3/175b",
        V(nodes=128, tp=8, pp=16, mbs=1, gbs=2048, seq=2048, layers=96, hidden=12288, heads=96)
        | V(lr=0.9e-4, min_lr=0.9e-5, warmup=115, constant=12500),
    ),
    # The reference's long-context and FP8 runs (main; not in the seed). Ours warm up 10 steps with no constant
    # phase: the reference's 115 + 12500 would outlast their 100 steps.
    "gpt3/5b_16k": (
        "ref gpt3/5b_16k; ours: schedule",
        V(nodes=2, tp=4, pp=1, mbs=1, gbs=32, seq=16384, layers=24, hidden=4096, heads=32)
        | V(lr=1.6e-4, min_lr=1.6e-5, warmup=10, constant=0),
    ),
    "gpt3/5b_32k": (
        "ref gpt3/5b_32k; ours: schedule",
        V(nodes=2, tp=8, pp=1, mbs=1, gbs=32, seq=32768, layers=24, hidden=4096, heads=32)
        | V(lr=1.6e-4, min_lr=1.6e-5, warmup=10, constant=0),
    ),
    "gpt3/5b_64k": (
        "ref gpt3/5b_64k; ours: schedule",
        V(nodes=4, tp=8, pp=1, mbs=1, gbs=32, seq=65536, layers=24, hidden=4096, heads=32)
        | V(lr=1.6e-4, min_lr=1.6e-5, warmup=10, constant=0),
    ),
    "gpt3/40b_16k": (
        "ref gpt3/40b_16k; ours: schedule",
        V(nodes=16, tp=8, pp=4, mbs=1, gbs=32, seq=16384, layers=48, hidden=8192, heads=64)
        | V(lr=1.1e-4, min_lr=1.1e-5, warmup=10, constant=0),
    ),
    "gpt3/40b_32k": (
        "ref gpt3/40b_32k; ours: schedule",
        V(nodes=16, tp=8, pp=4, mbs=1, gbs=32, seq=32768, layers=48, hidden=8192, heads=64)
        | V(lr=1.1e-4, min_lr=1.1e-5, warmup=10, constant=0),
    ),
    "gpt3/40b_64k": (
        "ref gpt3/40b_64k; ours: schedule",
        V(nodes=16, tp=8, pp=4, mbs=1, gbs=32, seq=65536, layers=48, hidden=8192, heads=64)
        | V(lr=1.1e-4, min_lr=1.1e-5, warmup=10, constant=0),
    ),
    "gpt3/175b_16k": (
        "ref gpt3/175b_16k; ours: schedule",
        V(nodes=64, tp=8, pp=8, mbs=1, gbs=32, seq=16384, layers=96, hidden=12288, heads=96)
        | V(lr=0.9e-4, min_lr=0.9e-5, warmup=10, constant=0),
    ),
    "gpt3/175b_32k": (
        "ref gpt3/175b_32k; ours: schedule",
        V(nodes=64, tp=8, pp=4, mbs=1, gbs=32, seq=32768, layers=96, hidden=12288, heads=96)
        | V(lr=0.9e-4, min_lr=0.9e-5, warmup=10, constant=0),
    ),
    "gpt3/175b_fp8": (
        "ref gpt3/175b_fp8",
        V(nodes=128, tp=8, pp=8, mbs=2, gbs=2048, seq=2048, layers=96, hidden=12288, heads=96)
        | V(lr=0.9e-4, min_lr=0.9e-5, warmup=115, constant=12500),
    ),
    "gpt3/mlperf": (
        "ref gpt3/mlperf; ours: schedule (the reference's CosineAnnealingExp over 54300 steps)",
        V(nodes=1, tp=2, pp=4, mbs=1, gbs=8, seq=2048, layers=12, hidden=12288, heads=96)
        | V(lr=2e-5, min_lr=2e-6, warmup=10, constant=0),
    ),
    # BERT: sizes from the seed's paragraphs (4B's 40 heads; ref 32), layout, nodes and batches from its LDDL table.
    "bert/110m": (
        "seed 001 l.1716-1718, l.5972; ref bert/110m",
        V(nodes=8, tp=1, pp=1, mbs=4, gbs=256, seq=512, layers=12, hidden=768, heads=12)
        | V(lr=2e-4, min_lr=2e-5, warmup=20000, constant=2300000),
    ),
    "bert/4b": (
        "seed 001 l.1750-1752, l.5973; ref bert/4b",
        V(nodes=16, tp=1, pp=1, mbs=8, gbs=2048, seq=512, layers=48, hidden=2560, heads=40)
        | V(lr=1e-4, min_lr=2e-5, warmup=2600, constant=285000),
    ),
    "bert/20b": (
        "seed 001 l.1781-1783, l.5974; ref bert/20b",
        V(nodes=32, tp=4, pp=4, mbs=4, gbs=4096, seq=512, layers=48, hidden=6144, heads=96)
        | V(lr=1e-4, min_lr=2e-5, warmup=1300, constant=150000),
    ),
    "bert/100b": (
        "seed 001 l.1811-1813, l.5975; ref bert/100b",
        V(nodes=128, tp=4, pp=16, mbs=8, gbs=4096, seq=512, layers=96, hidden=9216, heads=96)
        | V(lr=1e-4, min_lr=2e-5, warmup=1300, constant=150000),
    ),
    # T5 and mT5: sizes, nodes and layouts from the seed's paragraphs; ours warm up 1% of the run with a cosine
    # decay where the reference has WarmupAnnealing with warmup_ratio 0.01 (the family file says why).
    "t5/220m": (
        "seed 001 l.1408-1411; ref t5/220m",
        V(nodes=4, tp=1, pp=1, mbs=64, gbs=2048, seq=512, layers=12, hidden=768, heads=12)
        | V(lr=1e-4, min_lr=1e-5, warmup=10000, constant=0),
    ),
    "t5/3b": (
        "seed 001 l.1443-1445, l.5781 (global batch 2160); ref t5/3b (TP 2)",
        V(nodes=20, tp=2, pp=1, mbs=27, gbs=2160, seq=512, layers=24, hidden=2048, heads=32)
        | V(lr=1e-4, min_lr=1e-5, warmup=9042, constant=0),
    ),
    "t5/11b": (
        "seed 001 l.1475-1478; ref t5/11b",
        V(nodes=20, tp=4, pp=1, mbs=24, gbs=1920, seq=512, layers=24, hidden=4096, heads=64)
        | V(lr=1e-4, min_lr=1e-5, warmup=10666, constant=0),
    ),
    "t5/23b": (
        "seed 001 l.1508-1511 (heads 64; PP 2: ours 1, megatron-core splits no T5 over stages); ref t5/23b",
        V(nodes=40, tp=4, pp=1, mbs=8, gbs=1920, seq=512, layers=36, hidden=5120, heads=64)
        | V(lr=1e-4, min_lr=1e-5, warmup=10666, constant=0),
    ),
    "t5/41b": (
        "seed 001 l.1540-1543 (36 layers; TP 4 x PP 2: ours TP 8, as t5/23b); ref t5/41b",
        V(nodes=40, tp=8, pp=1, mbs=6, gbs=1920, seq=512, layers=36, hidden=6144, heads=96)
        | V(lr=1e-4, min_lr=1e-5, warmup=10666, constant=0),
    ),
    "mt5/170m": (
        "seed 001 l.1584-1587; ref mt5/170m",
        V(nodes=4, tp=1, pp=1, mbs=64, gbs=2048, seq=512, layers=8, hidden=512, heads=6)
        | V(lr=1e-4, min_lr=1e-5, warmup=10000, constant=0),
    ),
    "mt5/390m": (
        "seed 001 l.1620-1623 (8 layers of 512; ref 12 of 768); ref mt5/390m",
        V(nodes=8, tp=1, pp=1, mbs=32, gbs=2048, seq=512, layers=8, hidden=512, heads=12)
        | V(lr=1e-4, min_lr=1e-5, warmup=10000, constant=0),
    ),
    "mt5/3b": (
        "seed 001 l.1651-1654; ref mt5/3b",
        V(nodes=20, tp=2, pp=1, mbs=24, gbs=1920, seq=512, layers=24, hidden=2048, heads=32)
        | V(lr=1e-4, min_lr=1e-5, warmup=10666, constant=0),
    ),
    "mt5/11b": (
        "ref mt5/11b",
        V(nodes=20, tp=4, pp=1, mbs=24, gbs=1920, seq=512, layers=24, hidden=4096, heads=64)
        | V(lr=1e-4, min_lr=1e-5, warmup=10666, constant=0),
    ),
    "mt5/23b": (
        "ref mt5/23b",
        V(nodes=40, tp=4, pp=1, mbs=8, gbs=1920, seq=512, layers=36, hidden=5120, heads=80)
        | V(lr=1e-4, min_lr=1e-5, warmup=10666, constant=0),
    ),
    # ViT: sizes and batches from the seed's table (B/16 on one node: 512 per GPU x 8 is the whole batch).
    "vit/B_16": (
        "seed 000 l.1109; ref vit/B_16",
        V(nodes=1, tp=1, pp=1, mbs=512, gbs=4096, image=224, patch=16, layers=12, hidden=768, heads=12)
        | V(lr=3e-3, min_lr=1e-5, warmup=10000, constant=0),
    ),
    "vit/L_16": (
        "seed 000 l.1110; ref vit/L_16",
        V(nodes=2, tp=1, pp=1, mbs=256, gbs=4096, image=224, patch=16, layers=24, hidden=1024, heads=16)
        | V(lr=3e-3, min_lr=1e-5, warmup=10000, constant=0),
    ),
    "vit/H_14": (
        "seed 000 l.1111; ref vit/H_14",
        V(nodes=4, tp=1, pp=1, mbs=128, gbs=4096, image=224, patch=14, layers=32, hidden=1280, heads=16)
        | V(lr=3e-3, min_lr=1e-5, warmup=10000, constant=0),
    ),
    "vit/g_14": (
        "seed 000 l.1112; ref vit/g_14",
        V(nodes=4, tp=1, pp=1, mbs=64, gbs=4096, image=224, patch=14, layers=40, hidden=1408, heads=16)
        | V(lr=3e-3, min_lr=1e-5, warmup=10000, constant=0),
    ),
    "vit/bigG_14": (
        "seed 000 l.1113 (32 per GPU; ref 64); ref vit/bigG_14",
        V(nodes=4, tp=1, pp=1, mbs=32, gbs=4096, image=224, patch=14, layers=48, hidden=1664, heads=16)
        | V(lr=3e-3, min_lr=1e-5, warmup=10000, constant=0),
    ),
    # CLIP: batches from the seed's table (no gradient accumulation, so they fix the nodes); image towers' 16
    # heads from the seed's ViT table; text length 80 from ref.
    "clip/vit_B_32": (
        "seed 000 l.1149; ref clip/vit_B_32",
        V(nodes=8, tp=1, pp=1, mbs=500, gbs=32000, image=224, patch=32, layers=12, hidden=768, heads=12)
        | V(text_seq=80, text_layers=12, text_hidden=512, text_heads=8)
        | V(lr=1e-3, min_lr=1e-5, warmup=2000, constant=0),
    ),
    "clip/vit_L_14": (
        "seed 000 l.1150, l.1110 (image tower); ours: text tower (OpenAI's L/14), lr (ref H/14's)",
        V(nodes=36, tp=1, pp=1, mbs=112, gbs=32256, image=224, patch=14, layers=24, hidden=1024, heads=16)
        | V(text_seq=80, text_layers=12, text_hidden=768, text_heads=12)
        | V(lr=5e-4, min_lr=1e-5, warmup=2000, constant=0),
    ),
    "clip/vit_H_14": (
        "seed 000 l.1151, l.1111 (16 heads; ref 20); ref clip/vit_H_14 (32 nodes, 128 x 256 = 32768)",
        V(nodes=50, tp=1, pp=1, mbs=80, gbs=32000, image=224, patch=14, layers=32, hidden=1280, heads=16)
        | V(text_seq=80, text_layers=24, text_hidden=1024, text_heads=16)
        | V(lr=5e-4, min_lr=1e-5, warmup=2000, constant=0),
    ),
    "clip/vit_g_14": (
        "seed 000 l.2079 (name), l.1112 (16 heads; ref 22); ref clip/vit_g_14",
        V(nodes=46, tp=1, pp=1, mbs=88, gbs=32384, image=224, patch=14, layers=40, hidden=1408, heads=16)
        | V(text_seq=80, text_layers=24, text_hidden=1024, text_heads=16)
        | V(lr=5e-4, min_lr=1e-5, warmup=2000, constant=0),
    ),
    # Stable Diffusion: batches from the seed's table; rate and warm-up from ref (held after the warm-up, as its
    # WarmupHoldPolicy); the stages that continue a trained UNet do not warm up again.
    "stable_diffusion/860m_res_256": (
        "seed 000 l.782, l.1204; ref stable_diffusion/860m_res_256_pretrain",
        V(nodes=8, tp=1, pp=1, mbs=128, gbs=8192, latent=32, warmup=10000) | SD_RATE,
    ),
    "stable_diffusion/860m_res_256_pretrain": (
        "seed 000 l.1204; ref stable_diffusion/860m_res_256_pretrain",
        V(nodes=8, tp=1, pp=1, mbs=128, gbs=8192, latent=32, warmup=10000) | SD_RATE,
    ),
    "stable_diffusion/860m_res_512_v1_1": (
        "seed 000 l.1205; ref stable_diffusion/860m_res_512_v1_1",
        V(nodes=32, tp=1, pp=1, mbs=32, gbs=8192, latent=64, warmup=10000) | SD_RATE,
    ),
    "stable_diffusion/860m_res_512_v1_2": (
        "seed 000 l.1206; ref stable_diffusion/860m_res_512_v1_2",
        V(nodes=32, tp=1, pp=1, mbs=32, gbs=8192, latent=64, warmup=0) | SD_RATE,
    ),
    "stable_diffusion/860m_res_512_v1_5": (
        "seed 000 l.1207; ref stable_diffusion/860m_res_512_v1_5",
        V(nodes=32, tp=1, pp=1, mbs=32, gbs=8192, latent=64, warmup=0) | SD_RATE,
    ),
    "stable_diffusion/860m_res_256_v2_0_pretrain": (
        "ref stable_diffusion/860m_res_256_v2_0_pretrain",
        V(nodes=8, tp=1, pp=1, mbs=128, gbs=8192, latent=32, warmup=10000) | SD_RATE,
    ),
    "stable_diffusion/860m_res_512_v2_0_base": (
        "ref stable_diffusion/860m_res_512_v2_0_base",
        V(nodes=32, tp=1, pp=1, mbs=32, gbs=8192, latent=64, warmup=0) | SD_RATE,
    ),
    "stable_diffusion/mlperf_sd_v2": (
        "seed 003 l.130 (DGXH100_08x08x32: 8 nodes, 32 per GPU); ours: rate and warm-up (the family's)",
        V(nodes=8, tp=1, pp=1, mbs=32, gbs=2048, latent=64, warmup=10000) | SD_RATE,
    ),
    "dreambooth/860m": (
        "seed 000 l.1284 (name); ref dreambooth/860m",
        V(nodes=1, tp=1, pp=1, mbs=2, gbs=2, latent=64) | V(lr=1e-6, min_lr=1e-6, warmup=1, constant=0),
    ),
    "instruct_pix2pix/860m_sd_edit": (
        "seed 000 l.1259 (name); ref instruct_pix2pix/860m_sd_edit",
        V(nodes=2, tp=1, pp=1, mbs=64, gbs=1024, latent=32) | V(lr=1e-4, min_lr=1e-4, warmup=100, constant=0),
    ),
    # DiT (no reference file): seed 002's commands; the shapes the seed leaves out are ours (the YAML says which).
    "dit/train_mock": (
        "seed 002 l.309; ours: heads",
        V(nodes=1, tp=1, pp=1, mbs=1, gbs=8, seq=1024, layers=1, hidden=1024, heads=16)
        | V(lr=1e-4, min_lr=1e-4, warmup=0, constant=0),
    ),
    "dit/mock_dit7b_8k": (
        "seed 002 l.623-633 (batches), l.640 (16 nodes), l.39-41 (TP 2 with SP at 8k); ours: the 7B shape",
        V(nodes=16, tp=2, pp=1, mbs=1, gbs=256, seq=8192, layers=28, hidden=3072, heads=24)
        | V(lr=1e-4, min_lr=1e-4, warmup=0, constant=0),
    ),
    "dit/pretrain_xl": (
        "seed 004 l.215 (one node of 8); ours: DiT-XL/2 of the paper the seed cites, its batch 256 and lr",
        V(nodes=1, tp=1, pp=1, mbs=32, gbs=256, seq=256, layers=28, hidden=1152, heads=16)
        | V(lr=1e-4, min_lr=1e-4, warmup=0, constant=0),
    ),
    # Llama-architecture families (llama, mistral, qwen2, mixtral, nemotron): the reference launcher's main.
    "llama/llama2_7b": (
        "ref llama/llama2_7b",
        V(nodes=16, tp=1, pp=1, mbs=1, gbs=2048, seq=4096, layers=32, hidden=4096, heads=32)
        | V(lr=0.0001, min_lr=1e-05, warmup=500, constant=0),
    ),
    "llama/llama2_13b": (
        "ref llama/llama2_13b",
        V(nodes=32, tp=1, pp=4, mbs=1, gbs=2048, seq=4096, layers=40, hidden=5120, heads=40)
        | V(lr=0.0001, min_lr=1e-05, warmup=107, constant=11873),
    ),
    "llama/llama2_70b": (
        "ref llama/llama2_70b",
        V(nodes=128, tp=4, pp=4, mbs=1, gbs=2048, seq=4096, layers=80, hidden=8192, heads=64)
        | V(lr=0.00015, min_lr=1e-05, warmup=2000, constant=11873),
    ),
    "llama/llama3_8b": (
        "ref llama/llama3_8b",
        V(nodes=16, tp=1, pp=1, mbs=1, gbs=2048, seq=8192, layers=32, hidden=4096, heads=32)
        | V(lr=0.0001, min_lr=1e-05, warmup=500, constant=0),
    ),
    "llama/llama3_70b": (
        "ref llama/llama3_70b",
        V(nodes=128, tp=4, pp=4, mbs=1, gbs=2048, seq=8192, layers=80, hidden=8192, heads=64)
        | V(lr=0.00015, min_lr=1e-05, warmup=2000, constant=11873),
    ),
    "mistral/mistral_7b": (
        "ref mistral/mistral_7b",
        V(nodes=16, tp=8, pp=1, mbs=1, gbs=32, seq=4096, layers=32, hidden=4096, heads=32)
        | V(lr=0.0001, min_lr=1e-05, warmup=107, constant=11873),
    ),
    "qwen2/qwen2_4b": (
        "ref qwen2/qwen2_4b",
        V(nodes=16, tp=2, pp=1, mbs=1, gbs=2048, seq=32768, layers=40, hidden=2560, heads=20)
        | V(lr=0.0001, min_lr=1e-05, warmup=500, constant=0),
    ),
    "qwen2/qwen2_7b": (
        "ref qwen2/qwen2_7b",
        V(nodes=16, tp=4, pp=1, mbs=1, gbs=2048, seq=32768, layers=32, hidden=4096, heads=32)
        | V(lr=0.0001, min_lr=1e-05, warmup=500, constant=0),
    ),
    "qwen2/qwen2_14b": (
        "ref qwen2/qwen2_14b",
        V(nodes=32, tp=2, pp=1, mbs=1, gbs=2048, seq=32768, layers=40, hidden=5120, heads=40)
        | V(lr=0.0001, min_lr=1e-05, warmup=107, constant=11873),
    ),
    "qwen2/qwen2_72b": (
        "ref qwen2/qwen2_72b",
        V(nodes=128, tp=4, pp=4, mbs=1, gbs=2048, seq=32768, layers=80, hidden=8192, heads=64)
        | V(lr=0.00015, min_lr=1e-05, warmup=2000, constant=11873),
    ),
    "mixtral/mixtral_8x3b": (
        "ref mixtral/mixtral_8x3b",
        V(nodes=2, tp=1, pp=1, mbs=1, gbs=128, seq=4096, layers=32, hidden=2560, heads=32)
        | V(lr=0.0001, min_lr=1e-05, warmup=107, constant=11873),
    ),
    "mixtral/mixtral_8x7b": (
        "ref mixtral/mixtral_8x7b",
        V(nodes=8, tp=1, pp=4, mbs=1, gbs=256, seq=4096, layers=32, hidden=4096, heads=32)
        | V(lr=0.0001, min_lr=1e-05, warmup=636, constant=11873),
    ),
    "mixtral/mixtral_8x22b": (
        "ref mixtral/mixtral_8x22b; ours: gbs (the reference's 1 cannot split over 24 data-parallel ranks)",
        V(nodes=48, tp=8, pp=2, mbs=1, gbs=24, seq=65536, layers=56, hidden=6144, heads=48)
        | V(lr=0.0001, min_lr=1e-05, warmup=107, constant=11873),
    ),
    "nemotron/nemotron_4b": (
        "ref nemotron/nemotron_4b",
        V(nodes=1, tp=2, pp=1, mbs=2, gbs=32, seq=4096, layers=32, hidden=3072, heads=24)
        | V(lr=0.0003, min_lr=3e-05, warmup=500, constant=0),
    ),
    "nemotron/nemotron_8b": (
        "ref nemotron/nemotron_8b",
        V(nodes=1, tp=2, pp=1, mbs=2, gbs=32, seq=4096, layers=32, hidden=4096, heads=32)
        | V(lr=0.0003, min_lr=3e-05, warmup=500, constant=0),
    ),
    "nemotron/nemotron_15b": (
        "ref nemotron/nemotron_15b",
        V(nodes=1, tp=4, pp=1, mbs=2, gbs=32, seq=4096, layers=32, hidden=6144, heads=48)
        | V(lr=4.5e-05, min_lr=4.5e-05, warmup=500, constant=0),
    ),
    "nemotron/nemotron_22b": (
        "ref nemotron/nemotron_22b",
        V(nodes=1, tp=2, pp=4, mbs=1, gbs=32, seq=4096, layers=40, hidden=6144, heads=48)
        | V(lr=0.0001, min_lr=1e-05, warmup=500, constant=0),
    ),
    "nemotron/nemotron_340b": (
        "ref nemotron/nemotron_340b",
        V(nodes=768, tp=8, pp=8, mbs=1, gbs=2304, seq=4096, layers=96, hidden=18432, heads=96)
        | V(lr=0.0001, min_lr=1e-05, warmup=500, constant=0),
    ),
}
ROWS["vit/vit_B_16"] = ROWS["vit/B_16"]  # the seed's other spelling of the same config

SHIPPED = sorted(str(p.relative_to(TRAINING).with_suffix("")) for p in TRAINING.rglob("*.yaml"))


def table_values(choice: str, config: dict) -> dict:
    return {**_common(config), **SHAPE[choice.split("/")[0]](config)}


def test_every_shipped_training_config_has_a_row():
    shipped = {choice for choice in SHIPPED if not choice.endswith("/tiny")}
    assert shipped == set(ROWS), (
        f"configs without a row: {sorted(shipped - set(ROWS))}; rows without a config: {sorted(set(ROWS) - shipped)}"
    )


@pytest.mark.parametrize("choice", sorted(ROWS))
def test_config_holds_its_rows_values(choice, tmp_path: Path):
    sources, expected = ROWS[choice]
    config = stage_config("training", choice, tmp_path / "data", tmp_path / "results")
    got = table_values(choice, config)
    assert set(expected) == set(got), f"{choice}: the row must give every column of its family: {sorted(got)}"
    drifted = {column: (got[column], value) for column, value in expected.items() if got[column] != value}
    assert not drifted, f"{choice} (row from {sources}): column: (config, table) {drifted}"
