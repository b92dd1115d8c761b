"""The base training config of a size: a valid, trainable, not yet tuned config, written as conf/training/ holds its
configs (a defaults line naming the predefined config it starts from, then only what differs).

    base = base_config("gpt3", 5.0, settings)   # BaseConfig(start="gpt3/5b", overrides={"model.num_layers": 24, ...})
    base.text()                                  # the YAML of <logs>/base_cfg_5b.yaml

Where the shape comes from:
- GPT: the seed's size bands (seed-llm-inventory 6.4.2) give hidden size, heads and learning rate; the layer count
  is what makes 12*L*h^2*(1 + 13/(12h) + (V+s)/(12*L*h)) parameters reach the size (the reference's own count); the
  global batch, TP and PP start from the seed's table for 80 GB at sequence 2048.
- T5, mT5, BERT: the family's predefined training config nearest in size, as it is (their shapes are not a smooth
  function of the size in the seed either).
- `base_training` (e.g. gpt3/tiny): that config as it is, with the search's nodes and processes.
Every base config runs `train_settings.num_tokens_in_b` tokens in `max_training_days` at most.
"""

import math
from dataclasses import dataclass, field

import yaml

from .settings import TrainSettings

# (largest size in B, hidden size, attention heads, learning rate): the seed's GPT bands.
_GPT_SHAPES = (
    (0.25, 768, 12, 6e-4),
    (0.5, 1024, 16, 3e-4),
    (1, 1536, 16, 2.5e-4),
    (2, 2048, 16, 2e-4),
    (3, 2560, 32, 1.6e-4),
    (4.5, 3072, 32, 1.4e-4),
    (8, 4096, 32, 1.2e-4),
    (15, 5120, 40, 1e-4),
    (25, 6144, 48, 1e-4),
    (52, 8192, 64, 8e-5),
    (105, 10240, 80, 7e-5),
    (205, 12288, 96, 6e-5),
    (405, 20480, 128, 5e-5),
    (805, 20480, 128, 4e-5),
    (1105, 25600, 160, 3e-5),
)
# (largest size in B, global batch, TP, PP): the seed's starting layout for GPT, 80 GB, sequence 2048.
_GPT_LAYOUTS = (
    (1, 256, 1, 1),
    (4, 1024, 1, 1),
    (8, 2048, 2, 1),
    (13, 2048, 4, 1),
    (20.6, 2048, 8, 1),
    (45.6, 2048, 8, 2),
    (123.6, 2048, 8, 4),
    (196.6, 2048, 8, 8),
    (392.2, 2048, 8, 16),
    (735, 2048, 8, 32),
    (1100, 2048, 8, 64),
)
# Each family's predefined training configs and their sizes in B: where a base config starts.
PREDEFINED_TRAINING = {
    "gpt3": ((0.126, "gpt3/126m"), (5.0, "gpt3/5b"), (20.0, "gpt3/20b"), (40.0, "gpt3/40b"), (175.0, "gpt3/175b")),
    "t5": ((0.22, "t5/220m"), (3.0, "t5/3b"), (11.0, "t5/11b"), (23.0, "t5/23b"), (41.0, "t5/41b")),
    "mt5": ((0.17, "mt5/170m"), (0.39, "mt5/390m"), (3.0, "mt5/3b"), (11.0, "mt5/11b"), (23.0, "mt5/23b")),
    "bert": ((0.11, "bert/110m"), (4.0, "bert/4b"), (20.0, "bert/20b"), (100.0, "bert/100b")),
}
MAX_GPT_SIZE_IN_B = 1100


@dataclass(frozen=True)
class BaseConfig:
    family: str
    size_in_b: float
    start: str  # the training config it starts from (family/name)
    overrides: dict = field(default_factory=dict)  # dotted key under `training` -> value

    @property
    def label(self) -> str:
        return size_label(self.size_in_b)

    @property
    def config_name(self) -> str:
        """Its name in the training group, once <logs>/conf is on Hydra's search path."""
        return f"{self.family}/base_cfg_{self.label}"

    def text(self, header: str) -> str:
        nested: dict = {}
        for key, value in self.overrides.items():
            *parents, leaf = key.split(".")
            node = nested
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        body = {"defaults": [f"/training/{self.start}@_here_", "_self_"], **nested}
        return header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=120)


def size_label(size_in_b: float) -> str:
    """5.0 -> '5b', 0.126 -> '0.126b', 0.000263 -> '0.000263b'."""
    return f"{float(f'{size_in_b:.3g}'):g}b"


def gpt_parameters_in_b(layers: int, hidden: int, vocab: int, seq: int) -> float:
    return 12 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (vocab + seq) / (12 * layers * hidden)) / 1e9


def _nearest(family: str, size_in_b: float) -> str:
    return min(PREDEFINED_TRAINING[family], key=lambda item: abs(math.log(item[0] / size_in_b)))[1]


def _run_overrides(family: str, label: str, settings: TrainSettings, global_batch: int | None) -> dict:
    overrides = {
        "run.name": f"{family}_{label}",
        "run.time_limit": _clock(settings.max_training_days),
        "trainer.num_nodes": settings.num_nodes,
        "trainer.devices": settings.gpus_per_node,
        "trainer.max_time": _max_time(settings.max_training_days),
    }
    if global_batch is not None:
        tokens = settings.num_tokens_in_b * 1e9
        overrides["trainer.max_steps"] = max(1, math.ceil(tokens / (global_batch * settings.seq_length)))
    return overrides


def _clock(days: float) -> str:
    """Slurm's D-HH:MM:SS for the days plus the half hour the trainer's max_time leaves for its last save."""
    minutes = math.ceil(days * 24 * 60) + 30
    return f"{minutes // 1440}-{minutes // 60 % 24:02d}:{minutes % 60:02d}:00"


def _max_time(days: float) -> str:
    minutes = math.ceil(days * 24 * 60)
    return f"{minutes // 1440:02d}:{minutes // 60 % 24:02d}:{minutes % 60:02d}:00"


def gpt_base(size_in_b: float, settings: TrainSettings) -> BaseConfig:
    _, hidden, heads, lr = next(band for band in _GPT_SHAPES if size_in_b < band[0])
    vocab, seq = settings.vocab_size, settings.seq_length
    layers = max(1, round((size_in_b * 1e9 - (vocab + seq) * hidden) / (12 * hidden**2 + 13 * hidden)))
    if layers >= 16:  # a multiple of 4, so that pipelines of 2 and 4 stages split it (the seed's 20B: 44 layers)
        layers = 4 * round(layers / 4)
    _, batch, tp, pp = next(row for row in _GPT_LAYOUTS if size_in_b <= row[0])
    batch = settings.global_batch_size or batch
    while layers % pp:  # the starting PP must split the layers; a smaller one still trains
        pp //= 2
    data_parallel = max(1, settings.gpus // (tp * pp))
    if settings.global_batch_size is None and batch % (4 * data_parallel):
        # The table's batch does not split over this many GPUs (2048 on 20 nodes at TP 2: DP 80): the nearest
        # multiple of 4 x DP, so that micro-batches of 1, 2 and 4 all split it (the seed's own 20-node run used 1440).
        step = 4 * data_parallel
        batch = max(step, round(batch / step) * step)
    overrides = _run_overrides("gpt3", size_label(size_in_b), settings, batch)
    overrides.update(
        {
            "model.num_layers": layers,
            "model.hidden_size": hidden,
            "model.num_attention_heads": heads,
            "model.encoder_seq_length": seq,
            "model.global_batch_size": batch,
            "model.micro_batch_size": 1,
            "model.tensor_model_parallel_size": tp,
            "model.pipeline_model_parallel_size": pp,
            "model.sequence_parallel": tp > 1,
            "model.optim.lr": lr,
            "model.optim.sched.min_lr": lr / 10,
        }
    )
    return BaseConfig("gpt3", size_in_b, _nearest("gpt3", size_in_b), overrides)


def base_config(family: str, size_in_b: float, settings: TrainSettings, start_shape=None) -> BaseConfig:
    """`start_shape`: for `base_training`, the (global batch) of that config, which sets the step count."""
    if settings.base_training is not None:
        overrides = _run_overrides(family, size_label(size_in_b), settings, settings.global_batch_size or start_shape)
        if settings.global_batch_size is not None:
            overrides["model.global_batch_size"] = settings.global_batch_size
        return BaseConfig(family, size_in_b, settings.base_training, overrides)
    if family == "gpt3":
        return gpt_base(size_in_b, settings)
    start = _nearest(family, size_in_b)
    overrides = _run_overrides(family, size_label(size_in_b), settings, settings.global_batch_size)
    if settings.global_batch_size is not None:
        overrides["model.global_batch_size"] = settings.global_batch_size
    return BaseConfig(family, size_in_b, start, overrides)
