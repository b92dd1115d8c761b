"""How an RLHF policy does (`rlhf_eval`): its mean reward on held-out prompts, the reward model's held-out pairwise
accuracy, and the policy's held-out preference accuracy (against a reference when one is named).

    python3 -u -m nemo_launcher.jobs.gpt.rlhf_eval --config <job dir>/<run.name>_hydra.yaml

Reads the resolved `rlhf_eval` section (contract/schemas/rlhf_eval.py): the policy, reward-model and optional reference
`.nemo` files, a prompts file and a pairs file of a preference directory. One process (TP 1) holds the models. Writes
every figure with the settings and files it used to <exp_manager.explicit_log_dir>/rlhf_eval.json and prints a
summary. Exit codes: 0 done, 2 configuration error (a file missing, data of another tokenizer), 75 the results
folder is in use by another job, else a crash.
"""

import sys
import time

PROG = "python3 -m nemo_launcher.jobs.gpt.rlhf_eval"
STAGE = "rlhf_eval"


def evaluate(cfg) -> dict:
    """Every figure of the run, as written to the results file."""
    import torch

    from ..common.config import JobConfigError
    from ..core.nemo_archive import read_nemo_config
    from ..core.standalone import on_gpu
    from ..rlhf.evaluation import Generation, policy_preference, policy_rewards, reward_model_ranking
    from ..rlhf.pairs import check_vocabulary, read_pairs
    from ..rlhf.prompts import read_prompts
    from ..rlhf.reward_model import load_scalar_model
    from ..rlhf.rollouts import TokenSampler
    from .converter import GPT
    from .inference import load_gpt_from_nemo

    m, precision, gpu = cfg.model, cfg.trainer.precision_name(), on_gpu()
    key = f"{STAGE}.model"
    reward_model, reward_tokenizer, _ = load_scalar_model(GPT, m.reward_model_path, 1, precision, gpu)
    policy, tokenizer = load_gpt_from_nemo(m.policy_path, 1, 1, precision)
    reference = load_gpt_from_nemo(m.reference_path, 1, 1, precision)[0] if m.reference_path else None
    if reward_tokenizer.vocab_size != tokenizer.vocab_size:
        raise JobConfigError(
            f"{key}.reward_model_path={m.reward_model_path}: its tokenizer has {reward_tokenizer.vocab_size} ids, the "
            f"policy's {tokenizer.vocab_size}; score a policy with a reward model of its own tokenizer"
        )
    vocab = tokenizer.vocab_size
    positions = int(read_nemo_config(m.policy_path).get("max_position_embeddings") or 0)

    prompts = [p.ids for p in read_prompts(m.data.prompts_file, vocab, f"{key}.data.prompts_file")]
    prompts = prompts[: m.data.max_prompts]
    longest = max(len(p) for p in prompts) + m.generation.max_new_tokens
    if positions and longest > positions:
        raise JobConfigError(
            f"{key}.generation.max_new_tokens={m.generation.max_new_tokens}: the longest prompt plus the response "
            f"({longest} tokens) passes the policy's max_position_embeddings({positions}); lower it"
        )
    check_vocabulary(m.data.pairs_file, vocab, f"{key}.data.pairs_file")
    pairs = read_pairs(m.data.pairs_file, vocab, m.data.max_seq_length, f"{key}.data.max_seq_length")
    pairs = pairs[: m.data.max_pairs]

    g = m.generation
    sampler = TokenSampler(temperature=g.temperature, top_k=g.top_k, top_p=g.top_p, greedy=g.greedy)
    generation = Generation(g.max_new_tokens, g.min_new_tokens, g.samples_per_prompt, m.data.micro_batch_size)
    generator = torch.Generator().manual_seed(m.seed)
    eod = tokenizer.eod
    return {
        "policy": m.policy_path,
        "reward_model": m.reward_model_path,
        "reference": m.reference_path,
        "prompts_file": m.data.prompts_file,
        "pairs_file": m.data.pairs_file,
        "generation": {
            "greedy": g.greedy,
            "temperature": g.temperature,
            "top_k": g.top_k,
            "top_p": g.top_p,
            "max_new_tokens": g.max_new_tokens,
            "min_new_tokens": g.min_new_tokens,
            "samples_per_prompt": g.samples_per_prompt,
            "seed": m.seed,
        },
        "policy_rewards": policy_rewards(
            policy, reward_model, prompts, sampler, generation, eod, vocab, generator, reference
        ),
        "reward_model_ranking": reward_model_ranking(reward_model, pairs, eod, m.data.micro_batch_size),
        "policy_preference": policy_preference(policy, pairs, eod, m.data.micro_batch_size, reference),
    }


def summary_of(results: dict, path: str, seconds: float):
    from ..common.report import Summary, duration

    rewards, ranking, preference = (
        results["policy_rewards"],
        results["reward_model_ranking"],
        results["policy_preference"],
    )
    summary = Summary("RLHF evaluation written")
    summary.add(
        "mean reward",
        f"{rewards['mean_reward']:.4f} (std {rewards['reward_std']:.4f}) over {rewards['responses']} responses, "
        f"{rewards['mean_response_tokens']:.1f} tokens on average, {rewards['ended_with_eod']:.0%} ended",
    )
    if "kl_to_reference" in rewards:
        summary.add("KL to reference", f"{rewards['kl_to_reference']:.4f} (summed over a response, mean)")
    summary.add(
        "reward model",
        f"accuracy {ranking['accuracy']:.4f} on {ranking['pairs']} pairs (chance 0.5), "
        f"margin {ranking['mean_margin']:.4f}",
    )
    summary.add(
        "policy preference",
        f"accuracy {preference['accuracy']:.4f} (against {preference['against']}), "
        f"margin {preference['mean_margin']:.4f}",
    )
    return summary.add("results", path).add("time", duration(seconds))


def main(argv=None) -> int:
    import json
    from operator import attrgetter
    from pathlib import Path

    from ...contract.schemas.rlhf_eval import RlhfEvalConfig
    from ..common.config import JobConfigError
    from ..common.report import JobFault, print_error
    from ..common.run_directory import claimed_run

    started = time.monotonic()
    try:
        with claimed_run(argv, PROG, RlhfEvalConfig.from_dict, attrgetter("exp_manager.explicit_log_dir")) as (
            cfg,
            where,
        ):
            from ..core.parts import shutdown

            try:
                cfg.data_parallel_size(where.world_size)
                results = evaluate(cfg)
            finally:
                shutdown()
            path = Path(cfg.results_file())
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.tmp")
            temporary.write_text(json.dumps(results, indent=1) + "\n")
            temporary.replace(path)  # a reader never sees half a file
        summary_of(results, str(path), time.monotonic() - started).show(where.rank)
    except (JobConfigError, JobFault) as error:
        return print_error(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
