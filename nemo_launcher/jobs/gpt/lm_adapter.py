"""lm-eval's model interface over one of our GPT models (a megatron-core GPTModel from a `.nemo`).

    model, tokenizer = load_gpt_from_nemo("megatron_gpt.nemo")
    lm = MegatronGPTLM(model, tokenizer, max_length=2048, batch_size=4)
    lm_eval.simple_evaluate(model=lm, tasks=[...])

lm-eval's TemplateLM does the text side (moving a context's trailing spaces into the continuation,
the end-of-document token standing in for an empty context); this class scores token sequences.
Log-probabilities are taken over the whole padded vocabulary, as the training loss is. Under tensor
parallelism every rank runs every request (lm-eval sees one process) and the vocabulary slices of
the logits are gathered, so all ranks compute the same numbers; only rank 0 should report them.
Pipeline parallelism is not supported here: evaluate a PP=1 model (the .nemo loader reshards).
"""

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from lm_eval import utils
from lm_eval.api.model import TemplateLM


class MegatronGPTLM(TemplateLM):
    def __init__(self, model, tokenizer, max_length: int, batch_size: int = 4, max_gen_toks: int = 256):
        super().__init__()
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_length = max_length  # tokens per forward pass: the trained sequence length
        self.batch_size = batch_size
        self.max_gen_toks = max_gen_toks
        self._model_device = next(model.parameters()).device  # LM.device is a read-only property

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eod

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> list[int]:
        # Our tokenizers add no special tokens of their own; the end-of-document token is added where needed.
        return self.tokenizer.encode(string)

    def tok_decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens))

    # ---- scoring -------------------------------------------------------------------------------------
    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """[batch, seq] token ids -> [batch, seq, padded vocab] fp32 logits (causal attention)."""
        from megatron.core import parallel_state

        tokens = tokens.to(self._model_device)
        positions = torch.arange(tokens.shape[1], device=self._model_device).unsqueeze(0).expand_as(tokens)
        with torch.no_grad():
            local = self.model(tokens, positions, None).float()
        tp = parallel_state.get_tensor_model_parallel_world_size()
        if tp == 1:
            return local
        pieces = [torch.empty_like(local) for _ in range(tp)]
        torch.distributed.all_gather(pieces, local.contiguous(), group=parallel_state.get_tensor_model_parallel_group())
        return torch.cat(pieces, dim=-1)

    def _score(self, pairs: list[tuple[list[int], list[int]]]) -> list[tuple[float, bool]]:
        """(context ids, continuation ids) -> (sum of the continuation's log-probabilities, greedy?) each.

        The sequence is cut on the left to max_length + 1 tokens; the continuation is scored at the last
        len(continuation) positions. Batches are sorted by length (less padding); right padding is safe
        because attention is causal: no scored position sees a padded one.
        """
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))
        results: list[tuple[float, bool]] = [(0.0, False)] * len(pairs)
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            inputs, targets = [], []
            for i in batch:
                context, continuation = pairs[i]
                if not continuation:
                    raise ValueError("lm-eval asked to score an empty continuation")
                sequence = (context + continuation)[-(self.max_length + 1) :]
                inputs.append(sequence[:-1])
                targets.append(sequence[-len(continuation) :])
            width = max(len(ids) for ids in inputs)
            padded = torch.tensor([ids + [self.eot_token_id] * (width - len(ids)) for ids in inputs], dtype=torch.long)
            log_probs = F.log_softmax(self.logits(padded), dim=-1).cpu()
            for row, i in enumerate(batch):
                length, target = len(inputs[row]), torch.tensor(targets[row], dtype=torch.long)
                scored = log_probs[row, length - len(target) : length]
                total = scored.gather(-1, target.unsqueeze(-1)).sum().item()
                results[i] = (total, bool((scored.argmax(dim=-1) == target).all()))
        return results

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs) -> list[tuple[float, bool]]:
        return self._score([(context, continuation) for _, context, continuation in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """Whole-document log-likelihood in disjoint windows of max_length tokens (lm-eval's windowing)."""
        totals = []
        for (text,) in (request.args for request in requests):
            windows = [
                utils.make_disjoint_window(window)
                for window in utils.get_rolling_token_windows(
                    token_list=self.tok_encode(text),
                    prefix_token=self.eot_token_id,
                    max_seq_len=self.max_length,
                    context_len=1,
                )
            ]
            totals.append(sum(log_prob for log_prob, _ in self._score(windows)))
        return totals

    # ---- generation ----------------------------------------------------------------------------------
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Greedy decoding until a stop string, the end-of-document token or max_gen_toks tokens."""
        outputs = []
        for context, settings in (request.args for request in requests):
            settings = dict(settings or {})
            if settings.get("do_sample") or (settings.get("temperature") or 0) > 0:
                raise ValueError(f"generation settings {settings} ask for sampling; this adapter decodes greedily only")
            until = settings.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            budget = int(settings.get("max_gen_toks", self.max_gen_toks))
            tokens = (self.tok_encode(context) or [self.eot_token_id])[-max(self.max_length - budget, 1) :]
            generated: list[int] = []
            text = ""
            for _ in range(budget):
                window = (tokens + generated)[-self.max_length :]
                # Padding rows of the vocabulary are no tokens: the tokenizer could not decode them.
                next_id = int(self.logits(torch.tensor([window]))[0, -1, : self.tokenizer.vocab_size].argmax())
                if next_id == self.eot_token_id:
                    break
                generated.append(next_id)
                text = self.tok_decode(generated)
                if any(stop in text for stop in until):
                    break
            for stop in until:
                text = text.split(stop)[0]
            outputs.append(text)
        return outputs
