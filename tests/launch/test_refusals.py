"""The mistakes users make, each refused at launch: exit 2, one line naming the key and the fix, nothing written.

Every row would otherwise have failed on the compute node after the queue wait (or, worse, run wrongly). The
job programs bind the same schemas (nemo_launcher/contract), so what passes here is what the job accepts.
"""

import pytest

TRAIN = ["stages=[training]", "training=gpt3/5b"]
CONVERT = ["stages=[conversion]"]
EVALUATE = ["stages=[evaluation]"]
EXPORT = ["stages=[export]"]
SFT = ["stages=[fine_tuning]", "fine_tuning=gpt3/squad"]
PEFT = ["stages=[peft]", "peft=gpt3/squad"]
DATA = ["stages=[data_preparation]", "data_preparation=gpt3/download_gpt3_pile"]

# (base, overrides, words the one-line message must contain)
CASES = [
    # training: keys, types and allowed values
    (TRAIN, ["+training.model.foo=1"], ["training.model.foo", "unknown key", "valid keys under training.model"]),
    (TRAIN, ["+training.model.num_layer=2"], ["training.model.num_layer", "did you mean num_layers"]),
    (
        TRAIN,
        ["training.trainer.max_epochs=3"],
        ["training.trainer.max_epochs=3", "sized in optimizer steps (trainer.max_steps)"],
    ),
    (
        TRAIN,
        ["training.trainer.precision=bf17"],
        ["training.trainer.precision='bf17'", "choose one of", "nearest: bf16"],
    ),
    (TRAIN, ["training.model.activation=relu2x"], ["training.model.activation='relu2x'", "squared-relu"]),
    (TRAIN, ["training.model.optim.name=adamw_typo"], ["training.model.optim.name='adamw_typo'", "nearest: adamw"]),
    (TRAIN, ["training.model.optim.sched.name=Linear"], ["training.model.optim.sched.name", "CosineAnnealing"]),
    (TRAIN, ["training.trainer.accelerator=tpu"], ["training.trainer.accelerator='tpu'", "gpu, cpu"]),
    (TRAIN, ["training.model.tokenizer.library=bpe"], ["training.model.tokenizer.library='bpe'", "megatron"]),
    (TRAIN, ["training.model.normalization=batchnorm"], ["training.model.normalization", "rmsnorm"]),
    (TRAIN, ["training.trainer.max_steps=1.5"], ["training.trainer.max_steps=1.5", "expected an integer"]),
    (TRAIN, ["training.run.auto_requeue=maybe"], ["training.run.auto_requeue='maybe'", "true or false"]),
    (TRAIN, ["training.model.optim.betas=[0.9]"], ["training.model.optim.betas", "[beta1, beta2]"]),
    # training: durations
    (TRAIN, ["training.run.time_limit=abc"], ["training.run.time_limit='abc'", "Slurm time limit", "6-00:00:00"]),
    (TRAIN, ["training.run.time_limit='1-25:00:00'"], ["training.run.time_limit='1-25:00:00'", "Slurm time limit"]),
    (TRAIN, ["training.trainer.max_time=5h"], ["training.trainer.max_time='5h'", "DD:HH:MM:SS"]),
    # training: counts and ranges
    (TRAIN, ["training.model.num_layers=0"], ["training.model.num_layers=0", "positive integer"]),
    (TRAIN, ["training.trainer.num_nodes=-1"], ["training.trainer.num_nodes=-1", "positive integer"]),
    (TRAIN, ["training.model.hidden_dropout=1.5"], ["training.model.hidden_dropout=1.5", "[0, 1)"]),
    (TRAIN, ["training.exp_manager.checkpoint_callback_params.save_top_k=0"], ["save_top_k=0", "-1 (keep all)"]),
    (TRAIN, ["training.model.optim.sched.min_lr=1.0"], ["training.model.optim.sched.min_lr=1.0", "above optim.lr"]),
    (TRAIN, ["training.model.data.splits_string=abc"], ["training.model.data.splits_string='abc'", "weights"]),
    (TRAIN, ["training.model.data.data_prefix=[0.5]"], ["training.model.data.data_prefix", "[weight, prefix"]),
    # training: cross-key rules
    (
        TRAIN,
        ["training.model.optim.sched.constant_steps=74885"],
        [
            "training.model.optim.sched.warmup_steps=115",
            "warmup_steps(115) + constant_steps(74885)",
            "trainer.max_steps(75000)",
            "raise trainer.max_steps",
        ],
    ),
    (
        TRAIN,
        ["training.trainer.max_steps=100"],
        ["training.model.optim.sched.warmup_steps=115", "constant_steps(12500)"],
    ),
    (
        TRAIN,
        ["training.model.max_position_embeddings=1024"],
        ["max_position_embeddings=1024", "encoder_seq_length (2048)"],
    ),
    (
        TRAIN,
        ["training.model.data.seq_length=1024"],
        ["training.model.data.seq_length=1024", "encoder_seq_length (2048)"],
    ),
    (
        TRAIN,
        ["training.model.tensor_model_parallel_size=3"],
        ["TP(3) x PP(1) x CP(1) = 3", "nodes(16) x devices(8) = 128"],
    ),
    (TRAIN, ["training.model.pipeline_model_parallel_size=32"], ["training.model.num_layers=24", "PP(32)"]),
    (TRAIN, ["training.model.num_query_groups=5"], ["training.model.num_query_groups=5", "num_attention_heads (32)"]),
    (
        TRAIN,
        ["training.model.global_batch_size=1000"],
        ["global_batch_size=1000", "micro_batch_size(4) x data-parallel size(128) = 512"],
    ),
    (
        TRAIN,
        ["training.model.virtual_pipeline_model_parallel_size=2"],
        ["virtual_pipeline_model_parallel_size=2", "pipeline_model_parallel_size > 1"],
    ),
    (TRAIN, ["training.model.overlap_p2p_comm=true"], ["training.model.overlap_p2p_comm", "interleaved schedule"]),
    (
        TRAIN,
        ["training.model.activations_checkpoint_granularity=full"],
        ["activations_checkpoint_granularity='full'", "activations_checkpoint_num_layers >= 1"],
    ),
    (TRAIN, ["training.model.fp8=true", "training.model.fp8_hybrid=false"], ["training.model.fp8", "fp8_e4m3"]),
    (TRAIN, ["training.trainer.accelerator=cpu"], ["training.trainer.precision='bf16'", "use 32 on the CPU"]),
    # run sections
    (TRAIN, ["training.run.name=a/b"], ["training.run.name='a/b'", "one path component"]),
    (TRAIN, ["training.run.results_dir=relative/dir"], ["training.run.results_dir='relative/dir'", "absolute"]),
    (TRAIN, ["training.run.dependency=afterfoo"], ["training.run.dependency", "afterfoo", "singleton"]),
    (TRAIN, ["training.run.name=???"], ["training.run.name", "mandatory"]),
    # the cluster and the top level
    (TRAIN, ["cluster.partition=???"], ["cluster.partition", "mandatory"]),
    (TRAIN, ["cluster.gpus_per_node=0"], ["cluster.gpus_per_node=0"]),
    (TRAIN, ["cluster.gpus_per_node=4", "training.trainer.devices=8"], ["gpus_per_node", "8", "4"]),
    (TRAIN, ["cluster_type=kubernetes"], ["cluster_type='kubernetes'", "bcm, bcp, interactive"]),
    (TRAIN, ["container=???"], ["container", "mandatory"]),
    (TRAIN, ["data_dir=???"], ["data_dir", "mandatory"]),
    (TRAIN, ["container_mounts=[/data,relative:/mnt]"], ["container_mounts", "relative:/mnt"]),
    (TRAIN, ["container_mounts=[/a,b]"], ["container_mounts"]),
    (TRAIN, ["+env_vars.WANDB_API_KEY=abc123"], ["env_vars.WANDB_API_KEY", "secret_files.WANDB_API_KEY"]),
    (TRAIN, ["+env_vars.HF_TOKEN=abc123"], ["env_vars.HF_TOKEN", "secret_files.HF_TOKEN"]),
    (
        TRAIN,
        ["wandb_api_key_file=/nonexistent/wandb.key"],
        ["wandb_api_key_file='/nonexistent/wandb.key'", "no such file"],
    ),
    (TRAIN, ["numa_mapping.mode=fastest"], ["numa_mapping.mode='fastest'", "unique_contiguous"]),
    # the pipeline
    (TRAIN, ["stages=[trainin]"], ["stages", "trainin", "known stages", "training"]),
    (TRAIN, ["stages=[bcp_test]"], ["unknown stage"]),
    (TRAIN, ["stages=[training,fine_tuning]"], ["fine_tuning", "null", "fine_tuning=<choice>"]),
    (TRAIN, ["cluster_type=bcp", "stages=[training,training]"], ["stages", "each stage once"]),
    (TRAIN, ["cluster_type=interactive"], ["nodes", "16", "interactive", "1 node"]),
    (TRAIN, ["training.trainer.max_steps=???"], ["training.trainer.max_steps", "mandatory"]),
    (TRAIN, ["container_mounts=/data"], ["container_mounts", "/data", "must be a list"]),
    (TRAIN, ["training.model.rampup_batch_size=[512,256,1000]"], ["rampup_batch_size", "multiples", "512"]),
    (
        TRAIN,
        ["training.model.tensor_model_parallel_size=8", "training.model.num_attention_heads=4"],
        ["num_attention_heads=4", "TP(8)"],
    ),
    # other stages
    (CONVERT, ["conversion.hf.mode=sometimes"], ["conversion.hf.mode='sometimes'", "auto, required, off"]),
    (CONVERT, ["conversion.run.nemo_file_name=a/b.nemo"], ["conversion.run.nemo_file_name='a/b.nemo'", "a file name"]),
    (
        CONVERT,
        ["conversion.model.tensor_model_parallel_size=0"],
        ["conversion.model.tensor_model_parallel_size=0", "positive integer"],
    ),
    (
        CONVERT,
        ["conversion.model.tensor_model_parallel_size=3", "conversion.run.ntasks_per_node=2"],
        ["ntasks_per_node=2", "TP(3) x PP(1)"],
    ),
    (EVALUATE, ["evaluation.run.tasks=[lambada,nosuchtask]"], ["evaluation.run.tasks", "nosuchtask"]),
    (
        EVALUATE,
        ["evaluation.model.pipeline_model_parallel_size=2"],
        ["evaluation.model.pipeline_model_parallel_size=2", "set 1"],
    ),
    (EXPORT, ["export.model.weight_data_type=int4"], ["export.model.weight_data_type='int4'", "fp32, fp16, bf16"]),
    (EXPORT, ["export.triton_deployment.int8_mode=true"], ["export.triton_deployment.int8_mode", "FasterTransformer"]),
    (
        SFT,
        ["fine_tuning.model.data.train_ds.prompt_template='{output} {input}'"],
        ["prompt_template", "end with {output}"],
    ),
    (
        SFT,
        ["fine_tuning.model.restore_from_path=null"],
        ["fine_tuning.model.restore_from_path", "conversion stage writes"],
    ),
    (
        PEFT,
        ["peft.model.peft.lora_tuning.target_modules=[mlp_fc3]"],
        ["peft.model.peft.lora_tuning.target_modules", "mlp_fc1"],
    ),
    (PEFT, ["peft.model.peft.peft_scheme=ia3"], ["peft.model.peft.peft_scheme='ia3'", "lora"]),
    (DATA, ["data_preparation.file_numbers=5-3"], ["data_preparation.file_numbers", "5-3"]),
    (DATA, ["data_preparation.shard_name=pile.jsonl.zst"], ["data_preparation.shard_name", "{file_number}"]),
    (DATA, ["data_preparation.on_malformed=ignore"], ["data_preparation.on_malformed='ignore'", "skip, fail"]),
    (DATA, ["data_preparation.run.node_array_size=0"], ["data_preparation.run.node_array_size=0", "positive integer"]),
    (DATA, ["+data_preparation.download.retry=3"], ["data_preparation.download.retry", "did you mean retries"]),
]


@pytest.mark.parametrize("base,overrides,words", CASES, ids=[" ".join(c[1]) for c in CASES])
def test_mistake_is_refused_at_launch(base, overrides, words, launch, tmp_path):
    results = tmp_path / "results"
    code, out, err = launch(base + overrides, results=results)
    assert code == 2, (out, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)
    assert not results.exists(), "nothing may be written when validation fails"


def test_there_are_at_least_forty_distinct_mistakes():
    assert len({tuple(overrides) for _, overrides, _ in CASES}) >= 40
