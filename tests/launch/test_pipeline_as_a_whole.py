"""A pipeline is checked as a whole (launch/model_sources.py, contract/model_rules.py): each downstream stage against
the model it will load, whether that model comes from the training stage of the same pipeline, the training config
the stage follows, a stage in between (a ViT fine-tuned at another size) or a `.nemo` on disk. Each mistake below
passed the dry run before and failed after the queue wait; now it exits 2 with one line that names the key, the
fix and where the model's facts came from, and writes nothing. Every shipped downstream config passes together
with the training run it follows by default."""

import io
import re
import tarfile
from pathlib import Path

import pytest
import yaml

from nemo_launcher.contract.model_facts import facts_of_nemo
from nemo_launcher.launch.families import FAMILIES

CONF = Path(__file__).resolve().parents[2] / "conf"
DOWNSTREAM = ("conversion", "fine_tuning", "peft", "prompt_learning", "adapter_learning", "ia3_learning")
DOWNSTREAM += ("evaluation", "export", "fw_inference")
PIPELINE = "the model (training stage of this pipeline"
FOLLOWED = "the model (the training config it follows"

GPT = ["training=gpt3/tiny"]
T5 = ["training=t5/tiny"]
MT5 = ["training=mt5/tiny"]
BERT = ["training=bert/tiny"]
VIT = ["training=vit/tiny", "fine_tuning=vit/tiny", "evaluation=vit/tiny", "export=vit/tiny", "fw_inference=vit/tiny"]
CLIP = ["training=clip/tiny", "conversion=clip/convert_clip", "evaluation=clip/tiny", "export=clip/tiny"]
SD = ["training=stable_diffusion/tiny", "fw_inference=stable_diffusion/text2img"]
DIT = ["training=dit/tiny", "fw_inference=dit/sample_shapes"]


def stages(*names: str) -> str:
    return f"stages=[{','.join(names)}]"


MISTAKES = [
    # TP against heads, PP against layers: gpt3/tiny has 4 heads and 2 layers, t5/tiny 4 heads, bert/tiny 4 heads
    (
        [stages("training", "conversion"), *GPT, "conversion.model.tensor_model_parallel_size=3"],
        ["conversion.model.tensor_model_parallel_size=3", PIPELINE, "4 attention heads", "1, 2, 4"],
    ),
    (
        [stages("training", "conversion"), *GPT, "conversion.model.pipeline_model_parallel_size=4"],
        ["conversion.model.pipeline_model_parallel_size=4", "has 2 layers", "PP must divide", "1, 2"],
    ),
    (
        [stages("conversion"), *GPT, "conversion.model.tensor_model_parallel_size=8"],
        ["conversion.model.tensor_model_parallel_size=8", FOLLOWED, "training=gpt3/tiny", "4 attention heads"],
    ),
    (
        [stages("training", "conversion"), *BERT, "conversion=bert/convert_bert"]
        + ["conversion.model.tensor_model_parallel_size=8"],
        ["conversion.model.tensor_model_parallel_size=8", "training=bert/tiny", "4 attention heads"],
    ),
    (
        [
            stages("training", "conversion"),
            *T5,
            "conversion=t5/convert_t5",
            "conversion.model.tensor_model_parallel_size=8",
        ],
        ["tensor_model_parallel_size=8", "4 attention heads in its encoder and 4 in its decoder"],
    ),
    (
        [stages("training", "conversion", "fine_tuning"), *GPT, "fine_tuning=gpt3/squad"]
        + ["fine_tuning.model.tensor_model_parallel_size=8"],
        ["fine_tuning.model.tensor_model_parallel_size=8", PIPELINE, "4 attention heads"],
    ),
    (
        [stages("training", "evaluation"), *GPT, "evaluation=gpt3/evaluate_lambada"]
        + ["evaluation.model.tensor_model_parallel_size=8"],
        ["evaluation.model.tensor_model_parallel_size=8", "4 attention heads"],
    ),
    (
        [stages("training", "prompt_learning"), *GPT, "prompt_learning=gpt3/squad"]
        + ["prompt_learning.model.encoder_seq_length=128", "prompt_learning.model.tensor_model_parallel_size=3"]
        + ["prompt_learning.trainer.devices=3"],
        ["prompt_learning.model.tensor_model_parallel_size=3", "4 attention heads"],
    ),
    (
        [
            stages("training", "fine_tuning"),
            *T5,
            "fine_tuning=t5/squad",
            "fine_tuning.model.tensor_model_parallel_size=8",
        ]
        + ["fine_tuning.trainer.devices=8"]
        + [
            f"fine_tuning.model.data.{s}.max_{x}_seq_length=64"
            for s in ("train_ds", "validation_ds")
            for x in ("src", "tgt")
        ],
        ["fine_tuning.model.tensor_model_parallel_size=8", "in its encoder"],
    ),
    (
        [stages("training", "fine_tuning"), *VIT[:2], "fine_tuning.model.tensor_model_parallel_size=3"]
        + ["fine_tuning.trainer.devices=3"],
        ["fine_tuning.model.tensor_model_parallel_size=3", "training=vit/tiny", "4 attention heads"],
    ),
    (
        [stages("training", "conversion"), *CLIP, "conversion.model.tensor_model_parallel_size=8"],
        ["conversion.model.tensor_model_parallel_size=8", "4 attention heads in its vision tower and 4 in its text"],
    ),
    # no training config of the stage's family loaded (GPT's default is dropped): the family's config of the run
    (
        [stages("conversion"), "conversion=t5/convert_t5", "conversion.model.tensor_model_parallel_size=5"]
        + ["conversion.run.ntasks_per_node=5"],
        ["tensor_model_parallel_size=5", "the t5 family's config of run t5_220m, training=t5/220m", "12 attention"],
    ),
    (
        [stages("fine_tuning"), "fine_tuning=vit/imagenet1k", "fine_tuning.model.patch_dim=14"]
        + ["fine_tuning.model.img_h=392", "fine_tuning.model.img_w=392"],
        ["fine_tuning.model.patch_dim=14", "the vit family's config of run vit_B_16, training=vit/B_16", "set 16"],
    ),
    # sequence lengths against positions: the tiny GPT, T5, mT5 have 128 learned positions
    (
        [
            stages("training", "fine_tuning"),
            *GPT,
            "fine_tuning=gpt3/squad",
            "fine_tuning.model.data.train_ds.max_seq_length=2048",
        ],
        ["fine_tuning.model.data.train_ds.max_seq_length=2048", "128 positions", "set at most 128"],
    ),
    (
        [stages("training", "peft"), *GPT, "peft=gpt3/squad", "peft.model.data.train_ds.max_seq_length=128"]
        + ["peft.model.data.validation_ds.max_seq_length=256"],
        ["peft.model.data.validation_ds.max_seq_length=256", PIPELINE, "128 positions"],
    ),
    (
        [
            stages("training", "prompt_learning"),
            *GPT,
            "prompt_learning=gpt3/squad",
            "prompt_learning.model.encoder_seq_length=2048",
        ],
        ["prompt_learning.model.encoder_seq_length=2048", "128 positions"],
    ),
    (
        [
            stages("training", "adapter_learning"),
            *T5,
            "adapter_learning=t5/squad",
            "adapter_learning.model.encoder_seq_length=512",
        ],
        ["adapter_learning.model.encoder_seq_length=512", "training=t5/tiny", "128 positions"],
    ),
    (
        [
            stages("training", "fine_tuning"),
            *MT5,
            "fine_tuning=mt5/xquad",
            "fine_tuning.model.data.train_ds.max_src_seq_length=512",
        ],
        ["fine_tuning.model.data.train_ds.max_src_seq_length=512", "training=mt5/tiny", "128 positions"],
    ),
    (
        [
            stages("training", "evaluation"),
            *T5,
            "evaluation=t5/squad",
            "evaluation.model.data.validation_ds.max_src_seq_length=512",
        ],
        ["evaluation.model.data.validation_ds.max_src_seq_length=512", "128 positions"],
    ),
    (
        [
            stages("training", "ia3_learning"),
            *GPT,
            "ia3_learning=gpt3/squad",
            "ia3_learning.model.encoder_seq_length=256",
        ],
        ["ia3_learning.model.encoder_seq_length=256", PIPELINE, "128 positions"],
    ),
    # LoRA layers against the depth
    (
        [stages("training", "peft"), *GPT, "peft=gpt3/squad", "peft.model.data.train_ds.max_seq_length=128"]
        + ["peft.model.data.validation_ds.max_seq_length=128", "peft.model.peft.lora_tuning.layer_selection=[1,3]"],
        ["peft.model.peft.lora_tuning.layer_selection=[1, 3]", "has 2 layers", "layer 3 does not exist", "1 to 2"],
    ),
    (
        [stages("training", "peft"), *T5, "peft=t5/squad", "peft.model.data.train_ds.max_seq_length=128"]
        + ["peft.model.data.validation_ds.max_seq_length=128", "peft.model.peft.lora_tuning.layer_selection=[5]"],
        ["layer_selection=[5]", "2 layers in its encoder and 2 in its decoder"],
    ),
    # patch, image, text and latent sizes
    (
        [stages("training", "fine_tuning"), *VIT[:2], "fine_tuning.model.patch_dim=16", "fine_tuning.model.img_h=64"]
        + ["fine_tuning.model.img_w=64"],
        ["fine_tuning.model.patch_dim=16", "8 x 8 patches", "set 8"],
    ),
    (
        [stages("training", "fine_tuning", "export"), *VIT, "fine_tuning.model.img_h=64", "fine_tuning.model.img_w=64"],
        ["export.infer.max_dim=48", "the model (fine_tuning stage of this pipeline, fine_tuning=vit/tiny)", "set 64"],
    ),
    (
        [stages("training", "export"), *VIT]
        + ["export.model.restore_from_path=${base_results_dir}/vit_tiny/results/checkpoints/a.nemo"],
        ["export.model.restore_from_path=", "checkpoints/a.nemo'", "checkpoints/nemo_vit_classification.nemo"],
    ),
    (
        [stages("training", "export"), *CLIP, "export.infer.max_text=64"],
        ["export.infer.max_text=64", "training=clip/tiny", "48 text positions", "at most 48"],
    ),
    (
        [stages("training", "export"), *CLIP, "export.infer.max_dim=224"],
        ["export.infer.max_dim=224", "takes 32 x 32 pixel images", "set 32"],
    ),
    (
        [stages("training", "fw_inference"), *SD, "fw_inference.infer.down_factor=8"],
        ["fw_inference.infer.down_factor=8", "training=stable_diffusion/tiny", "2-fold", "set 2"],
    ),
    (
        [stages("training", "export"), "training=dreambooth/tiny", "export=dreambooth/export_dreambooth"],
        ["export.infer.down_factor=8", "training=dreambooth/tiny", "2-fold"],
    ),
    # checkpoint names against what the training writes
    (
        [stages("training", "conversion"), *GPT, "conversion.model.checkpoint_name=step-7"],
        ["conversion.model.checkpoint_name='step-7'", "the training stage of this pipeline saves step-<N>"],
    ),
    (
        [stages("training", "conversion"), *GPT]
        + ["conversion.model.checkpoint_folder=${base_results_dir}/gpt3_tiny/results/checkpoint"],
        ["conversion.model.checkpoint_folder=", "results/checkpoint'", "writes", "results/checkpoints (step-<N>"],
    ),
    (
        [stages("training", "fine_tuning"), *VIT[:2]]
        + ["fine_tuning.model.restore_from_path=${base_results_dir}/vit_tiny/results/checkpoints/nemo_vit.nemo"],
        ["fine_tuning.model.restore_from_path=", "nemo_vit.nemo", "checkpoints/nemo_vit_classification.nemo"],
    ),
    (
        [stages("training", "fw_inference"), *DIT, "fw_inference.checkpoint_dir=${base_results_dir}/dit_tiny/results"],
        ["fw_inference.checkpoint_dir=", "dit_tiny/results'", "writes"],
    ),
    (
        [stages("training", "conversion"), *GPT, "training.exp_manager.checkpoint_callback_params.save_top_k=1"]
        + ["conversion.model.checkpoint_name=step-20"],
        ["conversion.model.checkpoint_name='step-20'", "keeps only its newest 1 checkpoints", "(step-40)"],
    ),
    (
        [stages("conversion"), *GPT, "conversion.model.checkpoint_name=step-15"],
        ["conversion.model.checkpoint_name='step-15'", "the training config it follows saves step-<N> folders"],
    ),
    (
        [stages("training", "fine_tuning", "evaluation"), *VIT]
        + ["evaluation.model.restore_from_path=${fine_tuning.exp_manager.explicit_log_dir}/checkpoints/vit.nemo"],
        [
            "evaluation.model.restore_from_path=",
            "the fine_tuning stage of this pipeline writes",
            "nemo_vit_classification",
        ],
    ),
    # tokenizer files a conversion replaces
    (
        [stages("training", "conversion"), *GPT, "conversion.model.tokenizer_model=/data/spm.model"],
        [
            "conversion.model.tokenizer_model='/data/spm.model'",
            "library megatron",
            "vocab_file, merge_file",
            "no model",
        ],
    ),
    (
        [
            stages("training", "conversion"),
            *MT5,
            "conversion=mt5/convert_mt5",
            "conversion.model.vocab_file=/data/v.txt",
        ],
        ["conversion.model.vocab_file='/data/v.txt'", "training=mt5/tiny", "library sentencepiece", "reads model"],
    ),
    # the tokenizer of the data a training reads
    (
        [stages("data_preparation", "training"), *GPT, "data_preparation=gpt3/tiny_pile"]
        + ["training.model.tokenizer.vocab_file=/data/other/vocab.json"],
        ["training.model.tokenizer.vocab_file='/data/other/vocab.json'", "data_preparation stage", "vocab.json'"],
    ),
    (
        [stages("data_preparation", "training"), *T5, "data_preparation=t5/tiny_pile"]
        + ["training.model.tokenizer.type=BertWordPieceLowerCase"],
        ["training.model.tokenizer.type='BertWordPieceLowerCase'", "tokenizer_type='BertWordPieceCase'"],
    ),
    (
        [stages("data_preparation", "training"), *MT5, "data_preparation=mt5/tiny_mc4"]
        + ["training.model.tokenizer.model=/data/other.model"],
        ["training.model.tokenizer.model='/data/other.model'", "tokenizer_model=", "mt5_tokenizer.model'"],
    ),
]


@pytest.mark.parametrize("overrides,words", MISTAKES, ids=[" ".join(case[0]) for case in MISTAKES])
def test_a_stage_that_does_not_fit_its_model_is_refused_at_launch(overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(overrides, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not results.exists(), "nothing may be written when validation fails"


def write_nemo(path: Path, model: dict) -> Path:
    """A .nemo as jobs/core/nemo_archive.py writes one, weights left out: the tar's model_config.yaml."""
    data = yaml.safe_dump(model).encode()
    with tarfile.open(path, "w") as archive:
        member = tarfile.TarInfo("./model_config.yaml")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    return path


GPT_12_HEADS = {
    "num_layers": 12,
    "num_attention_heads": 12,
    "hidden_size": 768,
    "max_position_embeddings": 2048,
    "tokenizer": {"library": "megatron", "type": "GPT2BPETokenizer"},
}


def test_a_nemo_on_disk_is_read_without_torch(tmp_path):
    facts = facts_of_nemo(write_nemo(tmp_path / "m.nemo", GPT_12_HEADS))
    assert [(s.layers, s.heads) for s in facts.stacks] == [(12, 12)]
    assert facts.positions == 2048 and facts.image is None and facts.source == str(tmp_path / "m.nemo")


@pytest.mark.parametrize(
    "overrides,words",
    [
        (
            ["fine_tuning.model.tensor_model_parallel_size=5", "fine_tuning.trainer.devices=5"],
            ["fine_tuning.model.tensor_model_parallel_size=5", "12 attention heads", "1, 2, 3, 4, 6, 12"],
        ),
        (["fine_tuning.model.data.train_ds.max_seq_length=4096"], ["max_seq_length=4096", "2048 positions"]),
    ],
)
def test_a_nemo_on_disk_is_what_a_tuning_stage_is_checked_against(overrides, words, launch, tmp_path):
    nemo = write_nemo(tmp_path / "pretrained.nemo", GPT_12_HEADS)
    results = tmp_path / "results"
    base = [stages("fine_tuning"), "fine_tuning=gpt3/squad", f"fine_tuning.model.restore_from_path={nemo}"]
    code, out, err = launch(base + overrides, results=results)
    assert code == 2, (out, err)
    for word in [*words, f"the model ({nemo})"]:
        assert word in err, (word, err)
    assert not results.exists()


def test_a_tuning_result_file_on_disk_leaves_the_base_model_to_be_checked(launch, tmp_path):
    """A prompt-learning result holds no architecture (its model_config.yaml names its base): the base .nemo beside it
    is what the evaluation is held to."""
    prompt = write_nemo(tmp_path / "prompt.nemo", {"tuning": {"method": "prompt"}, "base_model": "base.nemo"})
    base = write_nemo(tmp_path / "base.nemo", GPT_12_HEADS)
    overrides = [stages("evaluation"), "evaluation=prompt_gpt3/squad", f"evaluation.model.nemo_model={prompt}"]
    overrides += [f"evaluation.model.language_model_path={base}", "evaluation.model.tensor_model_parallel_size=5"]
    code, _, err = launch(overrides + ["evaluation.run.ntasks_per_node=5"])
    assert code == 2 and f"the model ({base}) has 12 attention heads" in err, err


def test_a_file_that_is_not_a_nemo_is_refused(launch, tmp_path):
    fake = tmp_path / "pretrained.nemo"
    fake.write_text("not a tar")
    code, _, err = launch(
        [stages("fine_tuning"), "fine_tuning=gpt3/squad", f"fine_tuning.model.restore_from_path={fake}"]
    )
    assert code == 2 and "fine_tuning.model.restore_from_path=" in err and "not a readable .nemo" in err, err


_FOLLOWS = re.compile(r"oc\.select:training\.run\.name,(\w+)")


def default_training(config: Path) -> str | None:
    """The training config a downstream config follows by default: the run named in its
    `${oc.select:training.run.name,<family>_<size>}` (or in a config its defaults list pulls in, such as its
    family's file), which conf/training/<family>/<size>.yaml trains."""
    text = config.read_text()
    pulled = [CONF / f"{name}.yaml" for name in re.findall(r"^\s*-\s*/?([\w/]+)@_here_", text, re.M)]
    names = [
        match.group(1)
        for source in [text, *(p.read_text() for p in pulled)]
        for match in [_FOLLOWS.search(source)]
        if match
    ]
    if not names:
        return None
    run = names[0]
    for cut in range(1, run.count("_") + 1):
        family, _, size = run.replace("_", "/", cut).rpartition("/")
        family = family.replace("/", "_")
        if (CONF / "training" / family / f"{size}.yaml").is_file():
            return f"{family}/{size}"
    # Runs named as their file (llama2_7b is conf/training/llama/llama2_7b.yaml).
    named = sorted(CONF.glob(f"training/*/{run}.yaml"))
    return f"{named[0].parent.name}/{run}" if len(named) == 1 else None


# Keys a shipped config leaves for the user (???), with a value of the right kind.
MANDATORY = {
    "fine_tuning=gpt3/custom_task": [
        "fine_tuning.model.data.train_ds.file_names=[/data/train.jsonl]",
        "fine_tuning.model.data.train_ds.concat_sampling_probabilities=[1.0]",
        "fine_tuning.model.data.validation_ds.file_names=[/data/val.jsonl]",
    ],
    **{
        f"fine_tuning={family}/custom_task": [
            f"fine_tuning.model.data.{split}.{key}=/data/{split}_{key}.txt"
            for split in ("train_ds", "validation_ds")
            for key in ("src_file_name", "tgt_file_name")
        ]
        for family in ("t5", "mt5")
    },
    "export=instruct_pix2pix/export_instruct_pix2pix": ["export.edit.input=/data/picture.png"],
    "fw_inference=instruct_pix2pix/edit_cli": [
        "fw_inference.edit.input=/data/picture.png",
        "fw_inference.edit.prompt=make it blue",
    ],
    "fw_inference=clip/clip_similarity": ["fw_inference.image_path=/data/cat.png", "fw_inference.texts=[a cat]"],
    "fw_inference=vit/imagenet1k": ["fw_inference.data_path=/data/images"],
}
SHIPPED = [
    (stage, f"{path.parent.name}/{path.stem}")
    for stage in DOWNSTREAM
    for path in sorted((CONF / stage).glob("*/*.yaml"))  # conf/<stage>/<family>/<name>.yaml (not the aliases)
]


@pytest.mark.parametrize("stage,choice", SHIPPED, ids=[f"{s}={c}" for s, c in SHIPPED])
def test_every_shipped_downstream_config_passes_with_its_default_training(stage, choice, launch, tmp_path):
    training = default_training(CONF / stage / f"{choice}.yaml")
    assert training is not None, f"{stage}={choice} follows no training config by default"
    overrides = [stages("training", stage), f"training={training}", f"{stage}={choice}"]
    code, out, err = launch(overrides + MANDATORY.get(f"{stage}={choice}", []), results=tmp_path / "results")
    assert code == 0, (training, err)


def test_the_training_nemo_names_in_the_family_rows_are_what_the_trainers_save():
    """Checkpoint names are checked against these rows; the trainers take theirs from their own records."""
    from nemo_launcher.contract.schemas.sd_finetuning import DreamBoothTrainingConfig, InstructPix2PixTrainingConfig
    from nemo_launcher.contract.schemas.stable_diffusion_training import StableDiffusionTrainingConfig
    from nemo_launcher.jobs.clip.vision_family import VISION_FAMILY as CLIP_RECORD
    from nemo_launcher.jobs.vit.vision_family import VISION_FAMILY as VIT_RECORD

    saved = {
        "vit": VIT_RECORD.training_nemo,
        "clip": CLIP_RECORD.training_nemo,
        "stable_diffusion": StableDiffusionTrainingConfig.NEMO_FILE_NAME,
        "dreambooth": DreamBoothTrainingConfig.NEMO_FILE_NAME,
        "instruct_pix2pix": InstructPix2PixTrainingConfig.NEMO_FILE_NAME,
    }
    assert {name: row.training_nemo_file_name for name, row in FAMILIES.items() if row.training_nemo_file_name} == saved


@pytest.mark.parametrize(
    "chain",
    [
        # The seed's ViT recipe: pretraining at 224 pixels, fine-tuning at 384, export of the fine-tuned model.
        ["training=vit/B_16", "fine_tuning=vit/imagenet1k", "evaluation=vit/imagenet_val", "export=vit/export_vit"],
        ["training=vit/tiny", "fine_tuning=vit/tiny", "evaluation=vit/tiny", "export=vit/tiny"],
    ],
)
def test_the_vit_fine_tuning_and_its_export_pass_together(chain, launch, tmp_path):
    overrides = [stages("training", "fine_tuning", "evaluation", "export"), *chain]
    code, out, err = launch(overrides, results=tmp_path / "results")
    assert code == 0, err


@pytest.mark.parametrize(
    "overrides",
    [
        # rotary and relative positions have no table to run past
        [stages("training", "fine_tuning"), *GPT, "training.model.position_embedding_type=rope"]
        + ["fine_tuning=gpt3/squad", "fine_tuning.model.data.train_ds.max_seq_length=2048"],
        [stages("training", "fine_tuning"), *T5, "training.model.position_embedding_type=relative"]
        + ["fine_tuning=t5/squad", "fine_tuning.model.data.train_ds.max_src_seq_length=512"],
        # a TP that divides the heads, a LoRA layer within the depth, a step the training saves
        [stages("training", "conversion"), *GPT, "conversion.model.tensor_model_parallel_size=2"],
        [stages("training", "peft"), *GPT, "peft=gpt3/squad", "peft.model.peft.lora_tuning.layer_selection=[2]"],
        [stages("training", "conversion"), *GPT, "conversion.model.checkpoint_name=step-20"],
        # the data preparation and the training tokenize alike, as shipped
        [stages("data_preparation", "training"), *GPT, "data_preparation=gpt3/tiny_pile"],
        [stages("data_preparation", "training"), *MT5, "data_preparation=mt5/tiny_mc4"],
    ],
    ids=lambda overrides: " ".join(overrides),
)
def test_a_stage_that_fits_its_model_passes(overrides, launch, tmp_path):
    code, out, err = launch(overrides, results=tmp_path / "results")
    assert code == 0, err
