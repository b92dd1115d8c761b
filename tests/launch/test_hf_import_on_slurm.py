"""The Hugging Face import on the real Slurm: conversion_hf2nemo=hf_llama2/convert_llama2_nemo submitted at TP 2 as a
user would (no debug mode), on a one-layer Llama folder written here without torch (zero weights: the wiring is
under test; tests/jobs/gpt/test_hf_import.py checks the numbers). One job of two tasks on one node; both ranks write
their shards, and rank 0 packs the .nemo and marks the checkpoint complete."""

from .slurm_pipelines import submit_and_wait
from .test_hf_import_stage import HEAD, HIDDEN, _llama_config, _llama_tensors, write_folder


def test_import_runs_as_a_two_task_slurm_job(slurm_cluster, tmp_path):
    # Two key/value heads, so that TP 2 splits the query groups too.
    tensors = _llama_tensors()
    for projection in ("k_proj", "v_proj"):
        tensors[f"model.layers.0.self_attn.{projection}.weight"] = (2 * HEAD, HIDDEN)
    folder = write_folder(tmp_path / "Llama-tiny", _llama_config(num_key_value_heads=2), tensors)
    run = submit_and_wait(
        slurm_cluster,
        [
            "stages=[conversion_hf2nemo]",
            "conversion_hf2nemo=hf_llama2/convert_llama2_nemo",
            f"conversion_hf2nemo.run.huggingface_ckpt_path={folder}",
            "conversion_hf2nemo.model.tensor_model_parallel_size=2",
        ],
        tmp_path / "results",
        tmp_path / "data",
    )
    assert run.stages == ["conversion_hf2nemo"] and run.states == ["COMPLETED"], run.out
    job_dir = tmp_path / "results" / "hf_llama2" / "convert_hf_llama2_to_nemo"
    assert (job_dir / "results" / "llama2_7b.nemo").is_file()
    assert (job_dir / "results" / "checkpoints" / "step-0" / "COMPLETE").is_file()
    (log,) = job_dir.glob("log-*_attempt0.out")
    assert f"import finished: {folder} (LlamaForCausalLM)" in log.read_text()
