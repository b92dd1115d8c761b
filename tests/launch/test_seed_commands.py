"""Every T5, mT5 and BERT launcher command the seed prints, and its GPT, T5 and mT5 prompt learning, adapter and IA3
commands with their evaluations, dry-run clean once their paths are filled in.

The commands are copied as the seed prints them (all for Base Command Platform, `cluster_type=bcp`). Before they
run here: the container paths become folders of this test (`/opt/NeMo-Megatron-Launcher/launcher_scripts` this
repository, `/mount/...` a tmp folder holding the inputs the command names), `$NGC_ARRAY_SIZE` the node count
the seed's prose gives, the log redirection is dropped, and the typos the seed inventory lists (§10.3) are
corrected, each said below. "Clean" means exit 0 with the input check on and no warning: every file the jobs
would open exists where the command says.
"""

import shlex
import subprocess

import pytest
import yaml

from nemo_launcher.launch.app import run
from nemo_launcher.launch.cli import command_line_problem, read_command_line
from nemo_launcher.launch.resolvers import REPO_ROOT

from .conftest import compose_config

LAUNCHER = "/opt/NeMo-Megatron-Launcher/launcher_scripts"
SQUAD = ["data/squad_data/v1.1/train-v1.1.json", "data/squad_data/v1.1/dev-v1.1.json"]
XQUAD = [f"data/squad_data/xquad/xquad.{lang}.json" for lang in ("de", "en", "es", "hi", "zh")]

# name: (seed line, the command as printed, the inputs it names under /mount, the nodes of $NGC_ARRAY_SIZE)
SEED = {
    "data_t5": (
        941,
        r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py data_preparation=t5/download_t5_pile \
stages=[data_preparation] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_t5 \
base_results_dir=/mount/results data_preparation.file_numbers='0-29' \
data_preparation.vocab_save_dir=/mount/data/bpe >> /results/data_t5_log.txt 2>&1
""",
        [],
        None,
    ),
    "data_mt5": (
        1033,
        r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py data_preparation=mt5/download_mc4 \
stages=[data_preparation] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data \
base_results_dir=/mount/results data_preparation.languages=\'cs,da,de,el,en,es,fi,fr,hi,hu,it,ja,ko,lt,lv,nl,no,pl,pt,ro,ru,sk,sv,zh\' \
data_preparation.run.node_array_size=20 data_preparation.run.workers_per_node=4 >> /results/data_mt5_log.txt 2>&1
""",
        [],
        None,
    ),
    "data_bert": (
        1134,
        r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[data_preparation] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_bert \
base_results_dir=/mount/results data_preparation.file_numbers='0-29' \
data_preparation.vocab_save_dir=/mount/data/bpe data_preparation.merges_save_dir=/mount/data/bpe >> /results/data_bert_log.txt 2>&1
""",
        [],
        None,
    ),
}

_T5_TRAINING = r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py training=t5/{size} \
stages=[training] \
launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_t5 \
base_results_dir=/mount/results training.trainer.num_nodes=\$NGC_ARRAY_SIZE \
training.model.tokenizer.vocab_file=/mount/data/bpe/vocab.txt cluster_type=bcp
"""
_MT5_TRAINING = r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py training=mt5/{size} \
stages=[training] \
launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data base_results_dir=/mount/results \
training.trainer.num_nodes=\$NGC_ARRAY_SIZE cluster_type=bcp
"""
# The seed's BERT commands reuse the T5 data workspace (data_dir=/mount/data/the_pile_t5).
_BERT_TRAINING = _T5_TRAINING.replace("training=t5/{size}", "training=bert/{size}")
T5_DATA = [
    "data/bpe/vocab.txt",
    "data/the_pile_t5/the_pile_t5/preprocessed/my-t5_00_text_sentence.bin",
    "data/the_pile_t5/the_pile_t5/preprocessed/my-t5_00_text_sentence.idx",
]
MT5_DATA = [
    "data/mc4/bpe/mt5_tokenizer.model",
    "data/mc4/preprocessed/cs/cs_000_text_sentence.bin",
    "data/mc4/preprocessed/cs/cs_000_text_sentence.idx",
]
BERT_DATA = [
    "data/bpe/vocab.txt",
    "data/the_pile_t5/the_pile_bert/preprocessed/my-bert_00_text_sentence.bin",
    "data/the_pile_t5/the_pile_bert/preprocessed/my-bert_00_text_sentence.idx",
]
# Nodes: "To train a 220M model on Base Command Platform cluster on 4 nodes", ... The BERT 4b, 20b and 100b
# commands say 20 nodes, where the seed's own global batches (its LDDL table: 16, 32 and 128 nodes) do not
# split; they get the table's nodes here, and test_bert_on_the_prose_nodes_is_refused shows the 20.
for line, size, nodes in ((1427, "220m", 4), (1462, "3b", 20), (1495, "11b", 20), (1528, "23b", 40), (1560, "41b", 40)):
    SEED[f"train_t5_{size}"] = (line, _T5_TRAINING.replace("{size}", size), T5_DATA, nodes)
for line, size, nodes in ((1603, "170m", 4), (1639, "390m", 8), (1671, "3b", 20)):
    SEED[f"train_mt5_{size}"] = (line, _MT5_TRAINING.replace("{size}", size), MT5_DATA, nodes)
for line, size, nodes in ((1734, "110m", 4), (1769, "4b", 16), (1800, "20b", 32), (1830, "100b", 128)):
    SEED[f"train_bert_{size}"] = (line, _BERT_TRAINING.replace("{size}", size), BERT_DATA, nodes)

SEED.update(
    {
        "convert_t5": (
            2836,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py conversion=convert_t5 \
stages=[conversion] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_t5 \
base_results_dir=/mount/results conversion.model.vocab_file=/mount/data/bpe/vocab.txt \
conversion.run.model_train_name=t5_220m conversion.run.results_dir=/mount/results/t5_220m/results/convert_nemo \
conversion.model.checkpoint_folder=/mount/results/t5_220m/checkpoints \
conversion.model.tensor_model_parallel_size=1 conversion.model.pipeline_model_parallel_size=1 \
>> /results/convert_t5_log.txt 2>&1
""",
            ["results/t5_220m/checkpoints/step-1000/.metadata", "results/t5_220m/t5_220m_hydra.yaml"],
            None,
        ),
        "convert_mt5": (
            2933,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py conversion=convert_mt5 \
stages=[conversion] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts 
data_dir=/mount/data \
conversion.run.model_train_name=mt5_390m \
base_results_dir=/mount/results conversion.run.results_dir=/mount/results/mt5_390m/results/convert_nemo \
conversion.model.checkpoint_folder=/mount/results/mt5_390m/checkpoints \
conversion.model.tensor_model_parallel_size=1 conversion.model.pipeline_model_parallel_size=1 \
>> /results/convert_mt5_log.txt 2>&1
""",
            ["results/mt5_390m/checkpoints/step-1000/.metadata", "results/mt5_390m/mt5_390m_hydra.yaml"],
            None,
        ),
        "finetune_t5": (
            3032,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py fine_tuning=t5/squad stages=[fine_tuning] \
 cluster_type=bcp \
launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data base_results_dir=/mount/results \
fine_tuning.run.model_train_name=t5_220m \
fine_tuning.model.restore_from_path=/mount/results/t5_220m/convert_nemo/results/megatron_t5.nemo \
>> /results/finetune_t5_log.txt 2>&1
""",
            ["results/t5_220m/convert_nemo/results/megatron_t5.nemo"] + SQUAD,
            None,
        ),
        "finetune_mt5": (
            3122,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py  fine_tuning=mt5/xquad stages=[fine_tuning] \
 cluster_type=bcp \
launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data base_results_dir=/mount/results \
fine_tuning.run.model_train_name=mt5_390m \
fine_tuning.model.restore_from_path=/mount/results/mt5_390m/convert_nemo/results/megatron_mt5_xquad.nemo \
>> /results/finetune_mt5_log.txt 2>&1
""",
            ["results/mt5_390m/convert_nemo/results/megatron_mt5_xquad.nemo", SQUAD[0]] + XQUAD,
            None,
        ),
        "evaluate_t5": (
            4048,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py evaluation=t5/squad \
stages=[evaluation] \
 cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts  data_dir=/mount/data \
base_results_dir=/mount/results evaluation.run.model_train_name=t5_220m \
evaluation.model.restore_from_path=/mount/results/t5_220m/squad/results/checkpoints/megatron_t5_glue.nemo \
>> /results/eval_t5_log.txt 2>&1
""",
            ["results/t5_220m/squad/results/checkpoints/megatron_t5_glue.nemo", SQUAD[1]],
            None,
        ),
        "evaluate_mt5": (
            4145,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py evaluation=mt5/xquad \
stages=[evaluation] cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data \
base_results_dir=/mount/results evaluation.run.model_train_name=mt5_390m \
evaluation.model.restore_from_path=/mount/results/mt5_390m/xquad/results/checkpoints/megatron_mt5_xquad.nemo \
>> /results/eval_mt5_log.txt 2>&1
""",
            ["results/mt5_390m/xquad/results/checkpoints/megatron_mt5_xquad.nemo"] + XQUAD,
            None,
        ),
        "export_t5": (
            4806,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py \
stages=[export] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_t5 \
base_results_dir=/mount/results \
export.run.model_train_name=t5_220m \
export.model.tensor_model_parallel_size=1 \
export.triton_deployment.pipeline_model_parallel_size=1 \
>> /results/export_t5_log.txt 2>&1
""",
            ["results/t5_220m/convert_nemo/results/megatron_t5.nemo"],
            None,
        ),
        "export_mt5": (
            4915,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py \
stages=[export] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_mt5 \
base_results_dir=/mount/results \
export.run.model_train_name=mt5_125m \
export.model.tensor_model_parallel_size=1 \
export.triton_deployment.pipeline_model_parallel_size=1 \
>> /results/export_mt5_log.txt 2>&1
""",
            ["results/mt5_125m/convert_nemo/results/megatron_mt5.nemo"],
            None,
        ),
    }
)

# GPT's parameter-efficient tuning and its evaluations (seed §5.10-5.11, §5.13.4, §5.13.6): each tunes, or reads the
# result of, the converted 5B GPT; the tuning jobs first write the prompt-learning jsonl from SQuAD's JSON.
GPT_BASE = "results/gpt3_5b/convert_nemo/results/megatron_gpt.nemo"
PROMPT_TEST = "data/prompt_data/v1.1/squad_test.jsonl"
_GPT_TUNING = r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py {stage}=gpt3/squad \
stages=[{stage}] cluster_type=bcp \
launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data base_results_dir=/mount/results \
{stage}.run.model_train_name=gpt3_5b \
{stage}.model.language_model_path=/mount/results/gpt3_5b/convert_nemo/results/megatron_gpt.nemo \
>> /results/{stage}_gpt3_log.txt 2>&1
"""
for line, stage in ((3394, "prompt_learning"), (3608, "adapter_learning"), (3623, "ia3_learning")):
    SEED[f"{stage}_gpt3"] = (line, _GPT_TUNING.replace("{stage}", stage), [GPT_BASE] + SQUAD, None)
SEED.update(
    {
        "evaluate_prompt_gpt3": (
            4246,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[evaluation] evaluation=prompt_gpt3/squad \
 cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data \
base_results_dir=/mount/results evaluation.run.results_dir=/mount/results/gpt3_5b/eval_prompt_squad \
evaluation.model.nemo_model=/mount/results/gpt3_5b/prompt_learning_squad/results/megatron_gpt_prompt.nemo \
evaluation.model.nemo_model=4 evaluation.model.tensor_model_parallel_size=2 \
>> /results/eval_prompt_gpt3_log.txt 2>&1
""",
            ["results/gpt3_5b/prompt_learning_squad/results/megatron_gpt_prompt.nemo", GPT_BASE, PROMPT_TEST],
            None,
        ),
        "evaluate_adapter_gpt3": (
            4464,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[evaluation] evaluation=adapter_gpt3/squad \
 cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data \
base_results_dir=/mount/results evaluation.run.results_dir=/mount/results/gpt3_5b/eval_adapter_squad \
evaluation.model.adapter_model_file=/mount/results/gpt3_5b/adapter_learning_squad/results/megatron_gpt3_adapter.nemo \
>> /results/eval_adapter_gpt3_log.txt 2>&1
""",
            ["results/gpt3_5b/adapter_learning_squad/results/megatron_gpt3_adapter.nemo", GPT_BASE, PROMPT_TEST],
            None,
        ),
        # §10.3 #15: the IA3 file is named megatron_t5_ia3.nemo (a GPT run's result all the same); kept as printed.
        "evaluate_ia3_gpt3": (
            4477,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[evaluation] evaluation=ia3_gpt3/squad \
 cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data \
base_results_dir=/mount/results evaluation.run.results_dir=/mount/results/gpt3_5b/eval_ia3_squad \
evaluation.model.adapter_model_file=/mount/results/gpt3_5b/ia3_learning_squad/results/megatron_t5_ia3.nemo \
>> /results/eval_ia3_t5_log.txt 2>&1
""",
            ["results/gpt3_5b/ia3_learning_squad/results/megatron_t5_ia3.nemo", GPT_BASE, PROMPT_TEST],
            None,
        ),
    }
)

# T5's and mT5's parameter-efficient tuning and evaluations (seed §5.10.2, §5.11.2, §5.13.5, §5.13.7).
T5_BASE = "results/t5_220m/convert_nemo/results/megatron_t5.nemo"
_T5_TUNING = r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py {stage}={family}/squad \
stages=[{stage}] cluster_type=bcp \
launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data base_results_dir=/mount/results \
{stage}.run.model_train_name={run} \
{stage}.model.language_model_path=/mount/results/t5_220m/convert_nemo/results/megatron_{family}.nemo \
>> /results/{stage}_{family}_log.txt 2>&1
"""
# The mT5 command reads megatron_mt5.nemo from the t5_220m run's folder, as printed.
for line, stage, family, train_run in (
    (3480, "prompt_learning", "t5", "t5_220m"),
    (3495, "prompt_learning", "mt5", "mt5_390m"),
    (3714, "adapter_learning", "t5", "t5_220m"),
    (3729, "ia3_learning", "t5", "t5_220m"),
):
    text = _T5_TUNING.replace("{stage}", stage).replace("{family}", family).replace("{run}", train_run)
    SEED[f"{stage}_{family}"] = (
        line,
        text,
        [f"results/t5_220m/convert_nemo/results/megatron_{family}.nemo"] + SQUAD,
        None,
    )
_T5_EVALUATION = r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[evaluation] evaluation={method}_{family}/squad \
 cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data \
base_results_dir=/mount/results evaluation.run.results_dir=/mount/results/{run}/eval_{method}_squad \
evaluation.model.{key}=/mount/results/{run}/{method}_learning_squad/results/megatron_{family}_{method}.nemo \
>> /results/eval_{method}_{family}_log.txt 2>&1
"""
for line, method, family, train_run, key in (
    (4349, "prompt", "t5", "t5_220m", "virtual_prompt_model_file"),
    (4362, "prompt", "mt5", "mt5_390m", "virtual_prompt_model_file"),
    (4572, "adapter", "t5", "t5_220m", "adapter_model_file"),
    (4585, "ia3", "t5", "t5_220m", "adapter_model_file"),
):
    text = _T5_EVALUATION
    for word, value in (("{method}", method), ("{family}", family), ("{run}", train_run), ("{key}", key)):
        text = text.replace(word, value)
    SEED[f"evaluate_{method}_{family}"] = (
        line,
        text,
        [
            f"results/{train_run}/{method}_learning_squad/results/megatron_{family}_{method}.nemo",
            f"results/{train_run}/convert_nemo/results/megatron_{family}.nemo",
            PROMPT_TEST,
        ],
        None,
    )

# The seed's typos (inventory §10.3), corrected before the command runs: name -> [(as printed, corrected)].
TYPOS = {
    # §1.2, §10.3 #11: the BCP examples name conversion configs without their family folder.
    "convert_t5": [("conversion=convert_t5", "conversion=t5/convert_t5")],
    # ... and this one also lost the line continuation after launcher_scripts_path.
    "convert_mt5": [
        ("conversion=convert_mt5", "conversion=mt5/convert_mt5"),
        (
            "launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts \ndata_dir",
            "launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts \\\ndata_dir",
        ),
    ],
    # §10.3 #14: the prompt evaluation sets nemo_model a second time, to 4 (the value would replace the file).
    "evaluate_prompt_gpt3": [("evaluation.model.nemo_model=4 ", "")],
}
# Choices these commands leave to conf/config.yaml, where the seed's "Settings for T5/mT5/Bert Models" put them
# (this repository's config.yaml selects GPT's): name -> the choice added to the command.
FAMILY_SETTINGS = {
    "data_bert": "data_preparation=bert/download_bert_pile",
    "export_t5": "export=t5/export_t5",
    "export_mt5": "export=mt5/export_mt5",
}


def command_words(name: str, mount, nodes=None):
    """The seed's command as argv: typos corrected, redirection dropped, placeholders filled in."""
    _, text, _, seed_nodes = SEED[name]
    for printed, corrected in TYPOS.get(name, []):
        assert printed in text, (name, printed)
        text = text.replace(printed, corrected)
    # As the shell reads it: a backslash before a line break continues the line; a bare line break ends the command.
    text = text.split(">>")[0].replace("\\\n", "").strip()
    assert "\n" not in text, f"{name}: more than one command (a line continuation missing?)"
    words = shlex.split(text)
    assert words[:2] == ["python3", f"{LAUNCHER}/main.py"], words[:2]
    filled = []
    for word in words[2:] + ([FAMILY_SETTINGS[name]] if name in FAMILY_SETTINGS else []):
        word = word.replace(LAUNCHER, str(REPO_ROOT)).replace("/mount/", f"{mount}/")
        filled.append(word.replace("$NGC_ARRAY_SIZE", str(nodes or seed_nodes)))
    return filled


def launch_seed_command(words, monkeypatch, capsys):
    """What `NEMO_LAUNCHER_DEBUG=1 python3 main.py <words>` does, with the input check on."""
    options, overrides = read_command_line(words)
    problem = command_line_problem(options.get("--config-name"), overrides)
    if problem is not None:
        return 2, "", f"Error: {problem}\n"
    monkeypatch.setenv("NEMO_LAUNCHER_DEBUG", "1")
    cfg, choices = compose_config([*overrides, "check_inputs=true"])
    code = run(cfg, choices, ["main.py", *words])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _make_inputs(mount, paths):
    for path in paths:
        (mount / path).parent.mkdir(parents=True, exist_ok=True)
        (mount / path).write_text("stand-in\n")


@pytest.mark.parametrize("name", sorted(SEED))
def test_seed_command_dry_runs_clean(name, tmp_path, monkeypatch, capsys):
    mount = tmp_path / "mount"
    _make_inputs(mount, SEED[name][2])
    words = command_words(name, mount)
    assert "cluster_type=bcp" in words
    code, out, err = launch_seed_command(words, monkeypatch, capsys)
    assert code == 0, err
    assert "Warning" not in err, err
    scripts = sorted((mount / "results").rglob("*_submission.sh"))
    assert scripts, "a dry run writes the scripts"
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert "bcprun" in script.read_text()
    if SEED[name][3] is not None:  # the node count the command asked for is the one the job gets
        (config,) = (mount / "results").rglob("*_hydra.yaml")
        assert yaml.safe_load(config.read_text())["trainer"]["num_nodes"] == SEED[name][3]


@pytest.mark.parametrize(
    "name, printed, nearest",
    [
        ("convert_t5", "conversion='convert_t5'", "t5/convert_t5"),
        ("convert_mt5", "conversion='convert_mt5'", "mt5/convert_mt5"),
    ],
)
def test_the_seeds_config_names_without_family_are_refused_with_the_right_one(
    name, printed, nearest, tmp_path, monkeypatch, capsys
):
    words = shlex.split(SEED[name][1].split(">>")[0].replace("\\\n", " ").replace("\n", " "))[2:]
    code, out, err = launch_seed_command(words, monkeypatch, capsys)
    assert code == 2 and err.startswith(f"Error: {printed}: no such config; nearest: {nearest}"), err


@pytest.mark.parametrize("size", ["4b", "20b", "100b"])
def test_bert_on_the_prose_nodes_is_refused(size, tmp_path, monkeypatch, capsys):
    """The seed says to train BERT 4b, 20b and 100b on 20 nodes; its global batches (and 100b's TP x PP = 64
    GPUs per model copy) do not split over those 160 GPUs."""
    mount = tmp_path / "mount"
    code, out, err = launch_seed_command(command_words(f"train_bert_{size}", mount, nodes=20), monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "nodes(20) x devices(8)" in err, err
    assert not (mount / "results").exists()
