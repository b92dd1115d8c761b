"""ViT evaluation: top-1 and top-5 accuracy of a ViT .nemo (by default the fine-tuning stage's) on ImageNet's
validation class folders, centre-cropped as validation crops them.

    python3 -u -m nemo_launcher.jobs.vit.evaluate --config <job dir>/<run.name>_hydra.yaml

The labels are the model's own classes: the class folder names the .nemo recorded at training, in their order (a
validation folder holding a class the model does not know is refused); a .nemo without names takes the folder's
sorted sub-folders. Writes <results_dir>/results/<task_name>_results.json and prints the table. Exit codes: 0, 2
configuration, 74 storage, 75 results_dir in use.
"""

import sys

PROG = "python3 -m nemo_launcher.jobs.vit.evaluate"


def classifier_logits(cfg, saved, classes):
    if len(classes) != saved.model_config.num_classes:
        from ..common.config import JobConfigError

        raise JobConfigError(
            f"model.data.imagenet_val: {len(classes)} classes, but {cfg.model.restore_from_path} "
            f"has {saved.model_config.num_classes} outputs; score it on the classes it was trained on"
        )
    return saved.classify


def main(argv=None) -> int:
    from ...contract.schemas.vision_evaluation import VitEvaluationConfig
    from ..vision.evaluation import run_vision_evaluation

    return run_vision_evaluation(argv, PROG, VitEvaluationConfig, classifier_logits, "vit")


if __name__ == "__main__":
    sys.exit(main())
