"""The Lightning strategy: our process placement, megatron-core DDP, and distributed checkpoints.

    strategy = MegatronStrategy(placement, devices=cfg.trainer.devices, backend="nccl")
    Trainer(strategy=strategy, ...)

Lightning's DDPStrategy is kept for its process-group plumbing (barriers, broadcasts, rank bookkeeping)
with three changes:
- ranks come from `Placement` (torchrun or Slurm variables we parsed), and the process group already
  exists when the Trainer starts, so Lightning neither launches processes nor re-reads the environment;
- no torch DDP wrapper: the model chunks are inside megatron-core DDP already, which would otherwise
  all-reduce every gradient a second time;
- checkpoints are megatron-core dist_checkpointing folders written by every rank (Lightning's default
  writes one file from rank 0, which cannot hold tensor- or pipeline-parallel shards). What goes into
  them is the LightningModule's business (`sharded_*` methods); this class does the file I/O.
"""

import logging
from typing import Any

from lightning_fabric.plugins.environments import ClusterEnvironment
from pytorch_lightning.strategies import DDPStrategy

from ..common.distributed import Placement

log = logging.getLogger(__name__)


class PlacementEnvironment(ClusterEnvironment):
    """Lightning's view of the job, answered from the Placement we read; it never changes ranks."""

    def __init__(self, placement: Placement, devices: int):
        super().__init__()
        self.placement = placement
        self.devices = devices

    @property
    def creates_processes_externally(self) -> bool:
        return True  # torchrun, srun or the user started every process; Lightning must not spawn more

    @property
    def main_address(self) -> str:
        return self.placement.master_addr

    @property
    def main_port(self) -> int:
        return self.placement.master_port

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self.placement.world_size

    def set_world_size(self, size: int) -> None:
        if size != self.placement.world_size:
            raise RuntimeError(
                f"Lightning computed world size {size}, the launcher started {self.placement.world_size} processes"
            )

    def global_rank(self) -> int:
        return self.placement.rank

    def set_global_rank(self, rank: int) -> None:
        if rank != self.placement.rank:
            raise RuntimeError(
                f"Lightning computed rank {rank} for the process the launcher started as rank "
                f"{self.placement.rank}; ranks must be placed node by node (block distribution)"
            )

    def local_rank(self) -> int:
        return self.placement.local_rank

    def node_rank(self) -> int:
        return (self.placement.rank - self.placement.local_rank) // self.devices


class MegatronStrategy(DDPStrategy):
    strategy_name = "nemo_launcher_megatron"

    def __init__(self, placement: Placement, devices: int, backend: str, save_parallel: bool = True):
        super().__init__(cluster_environment=PlacementEnvironment(placement, devices), process_group_backend=backend)
        self._save_parallel = save_parallel

    def configure_ddp(self) -> None:
        """The chunks are wrapped in megatron-core DDP by the module already (see the class docstring)."""

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        # The optimizer must exist before its sharded state can be described to dist_checkpointing.
        return True

    @property
    def lightning_restore_optimizer(self) -> bool:
        return True

    # ---- what Lightning's dump_checkpoint / restore call ------------------------------------------------
    def lightning_module_state_dict(self) -> dict[str, Any]:
        return self.lightning_module.sharded_model_state()

    def optimizer_state(self, optimizer) -> dict[str, Any]:
        return self.lightning_module.sharded_optimizer_state(is_loading=False)

    def load_model_state_dict(self, checkpoint, strict: bool = True) -> None:
        self.lightning_module.load_model_state(checkpoint["state_dict"])

    def load_optimizer_state_dict(self, checkpoint) -> None:
        self.lightning_module.load_optimizer_state(checkpoint["optimizer_states"][0])

    # ---- file I/O ------------------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint: dict[str, Any], filepath, storage_options: Any | None = None) -> None:
        from megatron.core import dist_checkpointing

        from ..common.helper_processes import collect_write_results_here, stop_signals_held

        checkpoint = dict(checkpoint)
        checkpoint.update(self.lightning_module.sharded_extra_state())
        # Slurm's time-limit warning (--signal=USR1@N) and scancel reach every process of the step, including the
        # helper processes dist_checkpointing starts while saving: started inside this block they ignore both for
        # good. This process gets a signal that came in meanwhile once the block ends, and saves and stops as usual.
        with stop_signals_held():
            collect_write_results_here()
            dist_checkpointing.save(checkpoint, str(filepath), sharded_strategy=self._save_strategy())

    def load_checkpoint(self, checkpoint_path, weights_only: bool | None = None) -> dict[str, Any]:
        from megatron.core import dist_checkpointing

        module = self.lightning_module
        common = dist_checkpointing.load_common_state_dict(str(checkpoint_path))
        template = {
            "state_dict": module.sharded_model_state(),
            "optimizer_states": [module.sharded_optimizer_state(is_loading=True)],
        }
        template.update(module.sharded_extra_state_to_load(common.get("parallel_layout")))
        loaded = dist_checkpointing.load(template, str(checkpoint_path))
        module.restore_extra_state(loaded)
        return loaded

    def _save_strategy(self):
        """torch_dist writer; with data parallelism the writes are spread over the data-parallel replicas
        (each rank writes a share of the replicated tensors instead of DP rank 0 writing them all)."""
        from megatron.core import parallel_state
        from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy
        from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper

        strategy = get_default_save_sharded_strategy()
        if self._save_parallel and parallel_state.get_data_parallel_world_size() > 1:
            strategy = FullyParallelSaveStrategyWrapper(
                strategy, parallel_state.get_data_parallel_group(with_context_parallel=True)
            )
        return strategy

    def teardown(self) -> None:
        # Strategy.teardown moves the model and optimizer state to the CPU: for a 5B model that is a
        # device-to-host copy of every weight on every rank (and 8x the host memory of a node) just before
        # the process exits. Everything else it does is kept.
        self.cluster_environment.teardown()
        self.precision_plugin.teardown()
        if self.accelerator is not None:
            self.accelerator.teardown()
        self.checkpoint_io.teardown()
