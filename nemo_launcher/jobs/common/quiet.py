"""Readable job logs: the first call of every job program.

    from ..common.quiet import start_job
    start_job(rank)                      # collective jobs (train, convert, evaluate, ...): rank 0 speaks
    start_job(accelerators=False)        # a process that works alone (data steps)

It hides the warnings and log records we know to be noise, and nothing else: each entry below names the
category, the message and the package that emits it, so our own warnings and any new problem still show.
Job logs then say what the job does, how fast, and what it produced.

Standard library only: it runs before torch is imported, and in spawned helper processes.
"""

import dataclasses
import importlib.util
import logging
import os
import re
import sys
import warnings

CHILD_WARNINGS_ENV = "PYTHONWARNINGS"


@dataclasses.dataclass(frozen=True)
class NoisyWarning:
    category: type  # a built-in class, so the entry can be passed to child processes in PYTHONWARNINGS
    message: str  # how the message starts (literal text, case-insensitive, no ',' or ':')
    package: str  # the module (prefix) the warning is attributed to, e.g. "megatron.core"


NOISY_WARNINGS: tuple[NoisyWarning, ...] = (
    # megatron-core falls back to PyTorch kernels without Transformer Engine or Apex and says so from half a
    # dozen modules at import; report_absent_accelerators says it once, in one line.
    NoisyWarning(UserWarning, "Transformer Engine and Apex are not installed", "megatron.core"),
    NoisyWarning(UserWarning, "Apex is not installed", "megatron.core"),
    # We pad with the end-of-document id on purpose (GPT-2 has no pad token), as NeMo and Megatron-LM do.
    NoisyWarning(UserWarning, "The pad token id in the tokenizer collides", "megatron.core.datasets"),
    # Deprecations inside megatron-core, Lightning and torch themselves: nothing a job config can change.
    NoisyWarning(UserWarning, "full scope is deprecated", "megatron.core.transformer"),
    NoisyWarning(FutureWarning, "`load_state_dict` is deprecated", "megatron.core.dist_checkpointing"),
    NoisyWarning(FutureWarning, "Please use DTensor instead and we are deprecating ShardedTensor", "torch.distributed"),
    NoisyWarning(FutureWarning, "`isinstance(treespec", "torch.utils._pytree"),
    # megatron-core's vocabulary gather (greedy decoding at TP > 1) still calls the old collective's name.
    NoisyWarning(FutureWarning, "`torch.distributed.all_gather_into_tensor` is deprecated", "torch.distributed"),
    NoisyWarning(FutureWarning, "`isinstance(treespec", "pytorch_lightning.utilities"),
    NoisyWarning(DeprecationWarning, "", "megatron.core"),
    NoisyWarning(DeprecationWarning, "`torch.jit.script_method` is deprecated", "torch.jit"),
    # Lightning's hint to use srun: the launcher does, or runs us without Slurm on purpose.
    NoisyWarning(UserWarning, "The `srun` command is available on your system but is not used", "lightning_fabric"),
    # The sampler derives its position from the restored global step, so mid-epoch checkpoints resume
    # exactly although the DataLoader keeps no state of its own.
    NoisyWarning(
        UserWarning, "You're resuming from a checkpoint that ended before the epoch ended", "pytorch_lightning"
    ),
    # urllib3 (pulled in by lm-eval's datasets) offers SOCKS proxies only with PySocks; jobs use no proxy.
    NoisyWarning(Warning, "SOCKS support in urllib3 requires", "urllib3"),
)

# Messages with a count inside, as (category, regular expression, package), matched in the process that warns
# only (PYTHONWARNINGS takes literal text): Lightning's fit loop warns from the main process.
NOISY_WARNING_PATTERNS: tuple[tuple[type, str, str], ...] = (
    # Recipes freeze networks on purpose (the diffusion families' VAE and text encoder stay in eval mode); Lightning
    # counts modules in eval mode when training starts and asks whether that was meant.
    (UserWarning, r"Found \d+ module\(s\) in eval mode at the start of training", "pytorch_lightning"),
)

# Loggers that talk at INFO about what our own first lines already say (devices found, tips, every dataset
# index and optimizer group, lm-eval's per-task chatter): only their warnings and errors reach the log.
NOISY_LOGGERS = (
    "megatron",
    "pytorch_lightning",
    "lightning_fabric",
    "lightning",
    "lm_eval",
    "torch.distributed",
    "datasets",
    "urllib3",
    "filelock",
    "fsspec",
)

# Single records that are expected here: logger -> how the message starts.
NOISY_RECORDS: dict[str, tuple[str, ...]] = {
    # A blend's index is rebuilt in a second each run when model.data.index_mapping_dir is null (the default,
    # which keeps each dataset's own indexes beside the data); nothing is lost.
    "megatron.core.datasets.blended_dataset": ("Cannot save the BlendedDataset indexes because path_to_cache is None",),
}

# Optional packages megatron-core runs faster with: import name -> what it is.
OPTIONAL_ACCELERATORS = (("transformer_engine", "Transformer Engine"), ("apex", "Apex"))

_reported_accelerators = False


def start_job(rank: int | None = None, accelerators: bool = True) -> None:
    """Warning filters (here and in child processes), the log format, quiet third-party loggers, and with
    `accelerators` the one line naming the absent optional accelerators (rank 0 only).

    rank: this process's rank in a job whose processes work together (None: it works alone). Log lines
    carry it, and ranks other than 0 log warnings and errors only, so a 64-rank log stays readable.
    """
    install_warning_filters()
    pass_filters_to_children()
    setup_logging(rank)
    if accelerators and not rank:
        report_absent_accelerators()


def install_warning_filters() -> None:
    for entry in NOISY_WARNINGS:
        warnings.filterwarnings(
            "ignore",
            message=re.escape(entry.message),
            category=entry.category,
            module=re.escape(entry.package) + r"(\.|$)",
        )
    for category, pattern, package in NOISY_WARNING_PATTERNS:
        warnings.filterwarnings("ignore", message=pattern, category=category, module=re.escape(package) + r"(\.|$)")


def child_warning_options() -> list[str]:
    """NOISY_WARNINGS as PYTHONWARNINGS entries (`ignore:<message>:<category>`).

    A child process reads them before any import; they match on category and message only, since
    PYTHONWARNINGS compares the module name whole. Entries whose message cannot be written there are left out.
    """
    options = []
    for entry in NOISY_WARNINGS:
        if entry.message and not re.search(r"[,:]", entry.message) and entry.category.__module__ == "builtins":
            option = f"ignore:{entry.message}:{entry.category.__name__}"
            if option not in options:
                options.append(option)
    return options


def pass_filters_to_children(env=None) -> None:
    """DataLoader workers fork and inherit the filters; spawned processes (megatron's checkpoint helper,
    tokenizer pools) start a fresh interpreter and read PYTHONWARNINGS. A value the user set keeps priority:
    later entries win, so theirs come after ours."""
    env = os.environ if env is None else env
    ours = child_warning_options()
    theirs = [option for option in env.get(CHILD_WARNINGS_ENV, "").split(",") if option and option not in ours]
    env[CHILD_WARNINGS_ENV] = ",".join(ours + theirs)


class _DropNoise(logging.Filter):
    """On the log handler rather than on each logger: Lightning resets its loggers to INFO when imported."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = record.name
        if record.levelno < logging.WARNING and any(name == n or name.startswith(n + ".") for n in NOISY_LOGGERS):
            return False
        prefixes = NOISY_RECORDS.get(name)
        return not (prefixes and record.getMessage().startswith(prefixes))


def setup_logging(rank: int | None = None) -> None:
    """One format for every job program: time, rank (in collective jobs), level, logger, message; to stdout.

    Like logging.basicConfig, it leaves a root logger that already has handlers alone (a test runner, a
    program embedding the job), except for quieting the noisy loggers.
    """
    root = logging.getLogger()
    if not root.handlers:
        where = "" if rank is None else f" rank{rank}"
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter(f"%(asctime)s{where} %(levelname)s %(name)s: %(message)s"))
        handler.addFilter(_DropNoise())
        root.addHandler(handler)
        root.setLevel(logging.INFO if not rank else logging.WARNING)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def absent_accelerators() -> list[str]:
    """Import names of the optional accelerators this Python cannot find (nothing is imported)."""
    return [name for name, _ in OPTIONAL_ACCELERATORS if importlib.util.find_spec(name) is None]


def report_absent_accelerators(say=None) -> str | None:
    """Says once per process, in one line, which optional accelerators are missing; returns the line."""
    global _reported_accelerators
    absent = absent_accelerators()
    if _reported_accelerators or not absent:
        return None
    _reported_accelerators = True
    line = (
        f"optional accelerators absent: {', '.join(absent)} (megatron-core uses its PyTorch fallbacks and "
        "local layer specs; install them on GPU clusters for speed)"
    )
    (say or _print)(line)
    return line


def _print(line: str) -> None:
    print(line, flush=True)
