"""generate: one image per COCO caption at each classifier-free guidance scale of the evaluation.

    python3 -u -m nemo_launcher.jobs.fid_evaluation.generate --config <job dir>/<run.name>_hydra.yaml

Array task i draws classifier_free_guidance[i // nnodes_per_cfg] and share i % nnodes_per_cfg of the captions; each
of its processes (SLURM_LOCALID or LOCAL_RANK of ntasks_per_node) takes a strided part of that share. Run here
without an array, one process plays every task in turn. Caption k's starting noise comes from (infer.seed + k), so
an image does not depend on how the captions were split. Images already written are kept (a rerun finishes a task).
"""

import os

from ..multimodal.config import local_process, share
from ..steps.config import run_step
from ..steps.step_report import StepReport
from .evaluation import load_config, read_captions, scale_folder


def tasks_to_play(cfg, env=None):
    env = os.environ if env is None else env
    if cfg.fid.local_task_id is not None:
        return [cfg.fid.local_task_id]
    task = env.get("SLURM_ARRAY_TASK_ID")
    return [int(task)] if task is not None else list(range(cfg.run.node_array_size))


def main(argv=None) -> StepReport:
    import torch

    from ..stable_diffusion.model import load_stable_diffusion
    from ..stable_diffusion.sampling import Sampling, save_png, text_to_images, vae_factor
    from .evaluation import device

    cfg = load_config("generate", argv)
    report = StepReport("generate", unit="image")
    names, captions = read_captions(cfg)
    rank, processes = local_process()
    parts = load_stable_diffusion(cfg.model.restore_from_path, device=str(device()))
    if vae_factor(parts) != cfg.infer.down_factor:
        from ..common.errors import DataPrepError

        raise DataPrepError(
            f"evaluation.infer.down_factor={cfg.infer.down_factor}: the model's VAE scales by "
            f"{vae_factor(parts)}; set that"
        )
    sampling = Sampling(cfg.infer.inference_steps, cfg.infer.sampler_type, cfg.infer.eta)
    for task in tasks_to_play(cfg):
        scale, part = cfg.task_scale(task)
        folder = scale_folder(cfg, scale)
        os.makedirs(folder, exist_ok=True)
        mine = share(list(range(len(names))), part, cfg.fid.nnodes_per_cfg)[rank::processes]
        todo = [k for k in mine if not os.path.isfile(os.path.join(folder, names[k] + ".png"))]
        for k in todo:
            generator = torch.Generator().manual_seed(cfg.infer.seed + k)
            image = text_to_images(
                parts, [captions[k]], sampling, scale, 1, cfg.infer.height, cfg.infer.width, generator
            )[0]
            path = os.path.join(folder, names[k] + ".png")
            save_png(image, path + ".tmp.png")
            os.replace(path + ".tmp.png", path)
            report.done(names[k], output=folder)
        report.note(f"cfg {scale:g}", f"{len(mine)} captions of task {task} in {folder}")
    return report


if __name__ == "__main__":
    run_step(main)
