"""Every launcher command seeds 000 and 001 print, run exactly as printed: all dry-run clean but the seed's typo.

The commands are copied verbatim. Only the folders they name are placed here, as a user's machine would have them:
`/opt/NeMo-Megatron-Launcher/launcher_scripts` (where the seed's container keeps the launcher, and where the
commands without a path run) is a launcher folder of this test, whose defaults (data_dir, base_results_dir) it
holds, and `/mount/...` a tmp folder holding the inputs the command names. The shell reads each command as bash
would: a backslash before a line break continues the line, a bare line break ends the command, the log redirection
is the shell's. `$NGC_ARRAY_SIZE` stays as printed: on Base Command Platform the node count is known when the job
starts (nemo_launcher/contract/job_start_values.py), so the test then starts each training job's config with the
node count the seed's prose gives and checks that the job binds it. "Clean" means exit 0 with the input check on and
no warning: every file the jobs would open exists where the command says.
"""

import functools
import io
import shlex
import subprocess
import tarfile

import pytest
import yaml
from omegaconf import OmegaConf

from nemo_launcher.contract.binding import JobConfigError
from nemo_launcher.contract.eval_tasks import EVAL_TASKS, parse_tasks
from nemo_launcher.jobs.common.config import load_resolved_config
from nemo_launcher.launch import resolvers
from nemo_launcher.launch.app import run
from nemo_launcher.launch.cli import command_line_problem, read_command_line
from nemo_launcher.launch.families import FAMILIES, schema_for
from nemo_launcher.launch.hydra_errors import explain
from nemo_launcher.launch.stages.base import load_schema

from .conftest import compose_config

LAUNCHER = "/opt/NeMo-Megatron-Launcher/launcher_scripts"
SQUAD = ["data/squad_data/v1.1/train-v1.1.json", "data/squad_data/v1.1/dev-v1.1.json"]
XQUAD = [f"data/squad_data/xquad/xquad.{lang}.json" for lang in ("de", "en", "es", "hi", "zh")]

# name: (seed line, the command as printed, the inputs it names under /mount, the nodes the seed's prose gives for
# $NGC_ARRAY_SIZE). Lines are seed 001's unless said.
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

_GPT_TRAINING = r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py training=gpt3/{size} \
stages=[training] \
launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_gpt3 \
base_results_dir=/mount/results training.trainer.num_nodes=\$NGC_ARRAY_SIZE \
training.model.tokenizer.vocab_file=/mount/data/bpe/vocab.json \
training.model.tokenizer.merge_file=/mount/data/bpe/merges.txt cluster_type=bcp
"""
GPT_DATA = [
    "data/bpe/vocab.json",
    "data/bpe/merges.txt",
    "data/the_pile_gpt3/the_pile/preprocessed/my-gpt3_00_text_document.bin",
    "data/the_pile_gpt3/the_pile/preprocessed/my-gpt3_00_text_document.idx",
]
for line, size, nodes in (
    (1225, "126m", 8),
    (1263, "5b", 16),
    (1297, "20b", 64),
    (1330, "40b", 128),
    (1364, "175b", 128),
):
    SEED[f"train_gpt3_{size}"] = (line, _GPT_TRAINING.replace("{size}", size), GPT_DATA, nodes)

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

# GPT's own data preparation, conversion, fine-tuning, evaluation and export (seed 001), the custom data set's
# preparation, and seed 000's commands (run where the launcher is, with its defaults).
GPT_126M = "results/gpt3_126m"
# What conf/config.yaml's default training (gpt3/5b) reads from the launcher folder's data/.
LAUNCHER_GPT_DATA = [
    "launcher:data/bpe/vocab.json",
    "launcher:data/bpe/merges.txt",
    "launcher:data/the_pile/preprocessed/my-gpt3_00_text_document.bin",
    "launcher:data/the_pile/preprocessed/my-gpt3_00_text_document.idx",
]
SEED.update(
    {
        "data_gpt3": (
            846,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[data_preparation] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_gpt3 \
base_results_dir=/mount/results data_preparation.file_numbers='0-29' \
data_preparation.vocab_save_dir=/mount/data/bpe data_preparation.merges_save_dir=/mount/data/bpe >> /results/data_gpt3_log.txt 2>&1
""",
            [],
            None,
        ),
        "data_custom_dataset": (
            2344,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[data_preparation] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts
data_dir=/mount/data \
base_results_dir=/mount/results data_preparation=custom_dataset \
dataprepartion.train_tokenizer_args.inp=/path/to/text/file/for/training/tokenizer \
datapreparation.raw_dataset_files=[/path/to/custom_data_files] \
>> /results/data_custom_dataset_log.txt 2>&1
""",
            [],
            None,
        ),
        "convert_gpt3": (
            2742,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[conversion] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_gpt3 \
base_results_dir=/mount/results conversion.run.model_train_name=gpt3_126m conversion.model.vocab_file=/mount/data/bpe/vocab.json \
conversion.model.merge_file=/mount/data/bpe/merges.txt conversion.run.results_dir=/mount/results/gpt3_126m/convert_nemo \
conversion.model.checkpoint_folder=/mount/results/gpt3_126m/results/checkpoints conversion.model.tensor_model_parallel_size=1 \
>> /results/convert_gpt3_log.txt 2>&1
""",
            [
                "data/bpe/vocab.json",
                "data/bpe/merges.txt",
                f"{GPT_126M}/results/checkpoints/step-1000/.metadata",
                f"{GPT_126M}/gpt3_126m_hydra.yaml",
            ],
            None,
        ),
        "finetune_gpt3": (
            3210,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py fine_tuning=gpt3/squad stages=[fine_tuning] \
 cluster_type=bcp \
launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data base_results_dir=/mount/results \
fine_tuning.run.model_train_name=gpt3_126m \
fine_tuning.model.restore_from_path=/mount/results/gpt_sft/convert_nemo/results/megatron_gpt.nemo \
>> /results/finetune_gpt3_log.txt 2>&1
""",
            ["results/gpt_sft/convert_nemo/results/megatron_gpt.nemo"] + SQUAD,
            None,
        ),
        "evaluate_gpt3": (
            3919,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py stages=[evaluation] \
 cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_gpt3 \
base_results_dir=/mount/results evaluation.model.vocab_file=/mount/data/bpe/vocab.json \
evaluation.model.merge_file=/mount/data/bpe/merges.txt evaluation.run.results_dir=/mount/results/gpt3_126m/evaluation \
evaluation.model.checkpoint_folder=/mount/results/gpt3_126m/results/checkpoints evaluation.model.eval_batch_size=16 \
evaluation.model.tensor_model_parallel_size=1 \
>> /results/eval_gpt3_log.txt 2>&1
""",
            [
                "data/bpe/vocab.json",
                "data/bpe/merges.txt",
                f"{GPT_126M}/results/checkpoints/step-1000/.metadata",
                f"{GPT_126M}/gpt3_126m_hydra.yaml",
            ]
            + [
                f"data/the_pile_gpt3/eval_harness_data/{EVAL_TASKS[task].data_file(task)}"
                for task in parse_tasks("all_tasks")
            ],
            None,
        ),
        "export_gpt3": (
            4700,
            r"""
python3 /opt/NeMo-Megatron-Launcher/launcher_scripts/main.py \
stages=[export] \
cluster_type=bcp launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts data_dir=/mount/data/the_pile_gpt3 \
base_results_dir=/mount/results \
export.run.model_train_name=gpt3_126m \
export.model.tensor_model_parallel_size=2 \
export.triton_deployment.pipeline_model_parallel_size=1 \
>> /results/export_gpt3_log.txt 2>&1
""",
            [f"{GPT_126M}/convert_nemo/results/megatron_gpt.nemo"],
            None,
        ),
        # Seed 000 (multimodal): commands run in the launcher folder, with conf/config.yaml's defaults.
        "main_000": ("000:721", "python3 main.py", LAUNCHER_GPT_DATA, None),
        "main_training_000": ("000:732", "python3 main.py stages=[training]", LAUNCHER_GPT_DATA, None),
        "sd_epochs_000": (
            "000:804",
            "python3 main.py stages=[training] training=stable_diffusion/860m_res_256 training.trainer.max_epochs=10",
            [
                "launcher:data/your_dataset_name/wdinfo.pkl",
                "launcher:data/stable_diffusion/clip-vit-large-patch14/vocab.json",
                "launcher:data/stable_diffusion/clip-vit-large-patch14/merges.txt",
                "launcher:data/stable_diffusion/vae/",
            ],
            None,
        ),
    }
)

# What the seed prints that cannot run as meant. The shell ends a command at a line break without a backslash:
# these two lost one, so the shell runs their first line alone (the launcher's part of each is tested), then
# fails on the rest ("command not found"). name -> the line the continuation is missing after.
BROKEN_CONTINUATIONS = {
    "convert_mt5": "launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts \n",
    "data_custom_dataset": "launcher_scripts_path=/opt/NeMo-Megatron-Launcher/launcher_scripts\n",
}
# What the first line of those does alone: the dry run warns about the inputs a real run would refuse (exit 2), as
# they are looked for under the launcher folder's defaults. name -> words of that warning ("" for none).
AS_PRINTED_WARNINGS = {
    "convert_mt5": "a real run would refuse conversion.model.checkpoint_folder=",
    "data_custom_dataset": "",
}
# The commands refused as printed (exit 2, one line): name -> words the line holds.
REFUSED = {
    # §10.3 #14: the prompt evaluation sets nemo_model a second time, to 4 (the value would replace the file).
    "evaluate_prompt_gpt3": ["evaluation.model.nemo_model=4"],
}
# Choices these commands leave to conf/config.yaml, where the seed's "Settings for T5/mT5/Bert Models" put them
# (this repository's config.yaml selects GPT's): name -> the choice the user makes there before running.
FAMILY_SETTINGS = {
    "data_bert": "data_preparation=bert/download_bert_pile",
    "export_t5": "export=t5/export_t5",
    "export_mt5": "export=mt5/export_mt5",
}


def shell_commands(text: str) -> list[list[str]]:
    """The commands bash runs for `text`, as argv lists: a backslash-newline joins lines, a bare newline ends a
    command, and the `>> log 2>&1` redirection is the shell's, not an argument."""
    commands = []
    for line in text.replace("\\\n", "").strip().split("\n"):
        words = shlex.split(line.split(">>")[0])
        if words:
            commands.append(words)
    return commands


def place(word: str, root) -> str:
    """A word with the seed's container folders placed under `root` (launcher/ and mount/)."""
    return word.replace(LAUNCHER, str(root / "launcher")).replace("/mount/", f"{root}/mount/")


def command_words(name: str, root, restore_continuation: bool = False) -> list[str]:
    """The launcher's arguments of the seed's command, as bash passes them, with the folders placed."""
    text = SEED[name][1]
    if restore_continuation:
        text = text.replace(BROKEN_CONTINUATIONS[name], BROKEN_CONTINUATIONS[name].rstrip("\n") + " \\\n")
    commands = shell_commands(text)
    assert len(commands) == (2 if name in BROKEN_CONTINUATIONS and not restore_continuation else 1), commands
    words = commands[0]
    assert words[0] == "python3" and words[1] in (f"{LAUNCHER}/main.py", "main.py"), words[:2]
    return [place(word, root) for word in words[2:]] + ([FAMILY_SETTINGS[name]] if name in FAMILY_SETTINGS else [])


def launch_seed_command(words, root, monkeypatch, capsys):
    """What `NEMO_LAUNCHER_DEBUG=1 python3 main.py <words>` does in the launcher folder `root/launcher`, with the
    input check on; Hydra's own errors reported as main.py reports them."""
    monkeypatch.setattr(resolvers, "REPO_ROOT", root / "launcher")  # where a command without paths keeps its files
    options, overrides = read_command_line(words)
    problem = command_line_problem(options.get("--config-name"), overrides)
    if problem is not None:
        return 2, "", f"Error: {problem}\n"
    monkeypatch.setenv("NEMO_LAUNCHER_DEBUG", "1")
    try:
        cfg, choices = compose_config([*overrides, "check_inputs=true"])
    except Exception as error:  # noqa: BLE001  (main.py's launcher_errors() reports these the same way)
        message = explain(error)
        if message is None:
            raise
        return 2, "", f"Error: {message}\n"
    code = run(cfg, choices, ["main.py", *words])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# The training config each results folder the commands name stands for (the seed's mt5_125m names no mT5 size of
# ours: the smallest, 170m, stands in; gpt_sft is the 126m run the seed fine-tunes).
RUN_CONFIGS = {
    "gpt3_5b": "gpt3/5b",
    "gpt3_126m": "gpt3/126m",
    "gpt_sft": "gpt3/126m",
    "t5_220m": "t5/220m",
    "mt5_390m": "mt5/390m",
    "mt5_125m": "mt5/170m",
}


@functools.cache
def _training_section(choice: str) -> dict:
    cfg, _ = compose_config([f"training={choice}", "stages=[training]"])
    return OmegaConf.to_container(cfg.training, resolve=True)


def _run_config(relative: str) -> str:
    """The training config of the run whose results folder holds `relative` (results/<run>/...)."""
    choice = RUN_CONFIGS[relative.split("/")[1]]
    if "megatron_mt5" in relative and not choice.startswith("mt5/"):
        return "mt5/170m"  # the seed's mT5 prompt learning reads megatron_mt5.nemo from the t5_220m folder
    return choice


# The layout of a .nemo a command reads, where the seed's conversion wrote it in another than its training's: the
# seed exports gpt3_126m with export.model.tensor_model_parallel_size=2, which names the layout of the .nemo it
# gathers, so that .nemo was converted at TP 2 (conversion.model.tensor_model_parallel_size=2; the seed's own
# conversion example writes TP 1, which test_exporting_a_nemo_of_another_layout_is_refused shows).
NEMO_LAYOUTS = {"export_gpt3": {"tensor_model_parallel_size": 2}}


def _make_inputs(root, paths, layout=None):
    """Each input as the run that writes it leaves it: a training run's resolved config, a .nemo holding its model
    section (model_config.yaml, in `layout` where given), and stand-in bytes for data, tokenizer and checkpoint
    files."""
    for path in paths:
        where, _, relative = path.rpartition(":")
        target = root / (where or "mount") / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if relative.endswith("/"):
            target.mkdir(exist_ok=True)  # a folder the job reads, e.g. a saved model
        elif relative.endswith("_hydra.yaml"):
            target.write_text(yaml.safe_dump(_training_section(_run_config(relative))))
        elif relative.endswith(".nemo"):
            model = yaml.safe_dump({**_training_section(_run_config(relative))["model"], **(layout or {})}).encode()
            with tarfile.open(target, "w") as archive:
                member = tarfile.TarInfo("model_config.yaml")
                member.size = len(model)
                archive.addfile(member, io.BytesIO(model))
        else:
            target.write_text("stand-in\n")


def _written(root, inputs) -> list:
    """Files under root other than the test's inputs."""
    made = {root / (path.rpartition(":")[0] or "mount") / path.rpartition(":")[2] for path in inputs}
    return sorted(path for path in root.rglob("*") if path.is_file() and path not in made)


def _assert_clean(code, err, root):
    assert code == 0, err
    assert "Warning" not in err, err
    scripts = sorted(root.rglob("*_submission.sh"))
    assert scripts, "a dry run writes the scripts"
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
    return scripts


def _bind_at_job_start(root, nodes, monkeypatch):
    """The training job's start on a Base Command Platform replica of an NGC job of `nodes` replicas: the config
    the launcher wrote, read and bound as the job does."""
    (config,) = root.rglob("*_hydra.yaml")
    assert yaml.safe_load(config.read_text())["trainer"]["num_nodes"] == "$NGC_ARRAY_SIZE"
    monkeypatch.setenv("NGC_ARRAY_SIZE", str(nodes))
    section = load_resolved_config(config)
    family = FAMILIES[config.parent.name.split("_")[0]]
    return load_schema(schema_for(family, "training")).from_dict(section, "training")


def test_every_launcher_command_of_seeds_000_and_001_is_here():
    """51: seed 001's 48 commands that start main.py (its AutoConfigurator command starts another program), and
    seed 000's three distinct ones."""
    assert len(SEED) == 51
    assert sum(1 for where, *_ in SEED.values() if str(where).startswith("000:")) == 3
    assert set(BROKEN_CONTINUATIONS) == set(AS_PRINTED_WARNINGS) <= set(SEED) and set(REFUSED) <= set(SEED)


@pytest.mark.parametrize("name", sorted(SEED))
def test_seed_command_runs_as_printed(name, tmp_path, monkeypatch, capsys):
    _make_inputs(tmp_path, SEED[name][2], NEMO_LAYOUTS.get(name))
    words = command_words(name, tmp_path)
    code, out, err = launch_seed_command(words, tmp_path, monkeypatch, capsys)
    if name in REFUSED:
        assert code == 2 and err.startswith("Error: ") and err.count("\n") == 1, err
        assert all(word in err for word in REFUSED[name]), err
        assert _written(tmp_path, SEED[name][2]) == []
        return
    if AS_PRINTED_WARNINGS.get(name):
        assert code == 0 and AS_PRINTED_WARNINGS[name] in err and f"{tmp_path}/launcher/results/" in err, err
        return
    scripts = _assert_clean(code, err, tmp_path)
    if "cluster_type=bcp" in words:
        assert all("bcprun" in script.read_text() for script in scripts)
    if SEED[name][3] is not None:  # the node count waits for the job, which binds the one it finds
        assert all('--nnodes "${NGC_ARRAY_SIZE}"' in script.read_text() for script in scripts)
        assert "training.trainer.num_nodes=$NGC_ARRAY_SIZE: set when the NGC job starts" in out
        assert _bind_at_job_start(tmp_path, SEED[name][3], monkeypatch).trainer.num_nodes == SEED[name][3]


@pytest.mark.parametrize("name", sorted(BROKEN_CONTINUATIONS))
def test_a_command_missing_a_line_continuation_runs_as_meant_once_restored(name, tmp_path, monkeypatch, capsys):
    _make_inputs(tmp_path, SEED[name][2])
    code, out, err = launch_seed_command(command_words(name, tmp_path, True), tmp_path, monkeypatch, capsys)
    if name == "data_custom_dataset":
        # ... where its own misspelt keys are named, with the key meant.
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith(
            "Error: dataprepartion.train_tokenizer_args.inp=/path/to/text/file/for/training/tokenizer"
        )
        assert "did you mean data_preparation?" in err
        assert _written(tmp_path, SEED[name][2]) == []
    else:
        _assert_clean(code, err, tmp_path)


@pytest.mark.parametrize("size", ["4b", "20b", "100b"])
def test_bert_on_the_prose_nodes_is_refused_when_the_job_starts(size, tmp_path, monkeypatch, capsys):
    """The seed says to train BERT 4b, 20b and 100b on 20 nodes; its global batches (and 100b's TP x PP = 64
    GPUs per model copy) do not split over those 160 GPUs. The launcher lists the counts that do; the job started
    on 20 replicas refuses with the schema's own line."""
    name = f"train_bert_{size}"
    _make_inputs(tmp_path, SEED[name][2])
    code, out, err = launch_seed_command(command_words(name, tmp_path), tmp_path, monkeypatch, capsys)
    assert code == 0, err
    accepted = out.split("this config accepts NGC_ARRAY_SIZE = ", 1)[1].splitlines()[0]
    assert "20," not in accepted.split()
    with pytest.raises(JobConfigError, match=r"nodes\(20\) x devices\(8\)"):
        _bind_at_job_start(tmp_path, 20, monkeypatch)


def test_exporting_a_nemo_of_another_layout_is_refused(tmp_path, monkeypatch, capsys):
    """The seed's 126m conversion writes its .nemo at TP 1; its export command then states TP 2: refused before
    the queue wait, naming the archive's layout."""
    _make_inputs(tmp_path, SEED["export_gpt3"][2])
    code, out, err = launch_seed_command(command_words("export_gpt3", tmp_path), tmp_path, monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "export.model.tensor_model_parallel_size=2" in err and "TP(1) x PP(1)" in err, err
    assert _written(tmp_path, SEED["export_gpt3"][2]) == []
