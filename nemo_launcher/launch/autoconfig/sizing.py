"""Model size from a compute budget, and the days a size takes: the AutoConfigurator's first step.

    recommend_size("gpt3", gpus=160, days=5, tokens_in_b=300, tflops_per_gpu=140)  # -> SizeAdvice(budget 5.38B, 5B)
    days_to_train("gpt3", size_in_b=5, gpus=160, tokens_in_b=300, tflops_per_gpu=140)  # -> 4.65

Training costs 6 FLOPs per parameter per token (forward 2, backward 4: Kaplan et al. 2020, "Scaling Laws", 2.1).
The reference tool counts 8 (full recomputation); the seed's search and its predefined configs use selective
recomputation, whose extra FLOPs are a few percent, and with 8 the seed's own example (20 nodes of 8 GPUs, 5 days,
300B tokens, 140 TFLOPS) would buy 4.03B parameters, not the 5B model the seed says it recommends. The budget is
then rounded down to the largest size the family's predefined search configs offer, because those are the shapes
whose candidate grids were checked; `budget_in_b` keeps the unrounded figure. mT5's larger vocabulary and
multilingual data train more slowly: the seed's penalty shrinks the size by 0.87 and stretches the days by 1.15.
"""

from dataclasses import dataclass

FLOPS_PER_PARAMETER_TOKEN = 6
SECONDS_PER_DAY = 86_400
# (size factor, days factor) per family; 1.0 where the seed names none.
PENALTIES = {"mt5": (0.87, 1.15)}
# The sizes (billions of parameters) of each family's predefined search configs, ascending.
PREDEFINED_SIZES = {
    "gpt3": (0.126, 0.843, 2.0, 5.0, 8.0, 20.0, 43.0, 175.0),
    "t5": (0.22, 2.8, 11.0, 23.5, 41.2),
    "mt5": (0.17, 0.39, 3.2, 11.9, 24.65, 42.54),
    "bert": (0.11, 4.0, 20.0, 100.0),
}


@dataclass(frozen=True)
class SizeAdvice:
    budget_in_b: float  # parameters the budget can train, in billions, unrounded (mT5 penalty included)
    size_in_b: float  # the recommendation: the largest predefined size within the budget (the smallest if none is)


def trainable_parameters(family: str, gpus: int, days: float, tokens_in_b: float, tflops_per_gpu: float) -> float:
    """Billions of parameters that `gpus` GPUs at `tflops_per_gpu` train on `tokens_in_b` billion tokens in `days`."""
    flops = days * SECONDS_PER_DAY * gpus * tflops_per_gpu * 1e12
    size_factor, _ = PENALTIES.get(family, (1.0, 1.0))
    return size_factor * flops / (FLOPS_PER_PARAMETER_TOKEN * tokens_in_b * 1e9) / 1e9


def recommend_size(family: str, gpus: int, days: float, tokens_in_b: float, tflops_per_gpu: float) -> SizeAdvice:
    budget = trainable_parameters(family, gpus, days, tokens_in_b, tflops_per_gpu)
    sizes = PREDEFINED_SIZES[family]
    within = [size for size in sizes if size <= budget]
    return SizeAdvice(round(budget, 2), within[-1] if within else sizes[0])


def days_to_train(family: str, size_in_b: float, gpus: int, tokens_in_b: float, tflops_per_gpu: float) -> float:
    """Days to train `size_in_b` billion parameters on `tokens_in_b` billion tokens: the inverse of the above."""
    _, days_factor = PENALTIES.get(family, (1.0, 1.0))
    flops = FLOPS_PER_PARAMETER_TOKEN * size_in_b * 1e9 * tokens_in_b * 1e9
    return days_factor * flops / (SECONDS_PER_DAY * gpus * tflops_per_gpu * 1e12)
