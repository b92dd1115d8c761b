"""Prompt tuning and p-tuning on a frozen megatron-core GPTModel or T5Model: virtual-token embeddings per task.

    prompts = VirtualPrompts(model, hidden=64, tasks=["a", "b"], new_tasks=["b"], style="p-tuning", ...)
    prompts.place(virtual_mask, task_ids)     # before a forward: which positions get which task's tokens
    table = prompts.table()                  # {task: [virtual tokens, hidden]}: what the result file stores

The virtual tokens enter through a forward hook on the word embedding: its output rows at the virtual positions
are replaced by the task's tokens, so position embeddings, dropout and everything after stay megatron's own. The
embedding's output is whole on every TP rank, and so are the prompt parameters (their gradients agree across ranks).
A T5Model embeds its encoder input and then its decoder input with the same table: the virtual tokens belong to
the encoder's input, so there a placement serves the first embedding call after `place` only.

- prompt tuning (Lester et al.): each new task's tokens are parameters, started from the embeddings of a text or
  at random;
- p-tuning (Liu et al.): each new task has trained inputs that a prompt encoder (an MLP, or a bidirectional LSTM
  with an MLP head) turns into its tokens; at the end the encoder's output is stored, so inference needs no encoder.
Existing tasks (from an earlier result) are frozen buffers, copied unchanged into the new result.
"""

import math

import torch


class PromptEncoder(torch.nn.Module):
    def __init__(
        self,
        kind: str,
        hidden: int,
        encoder_hidden: int,
        layers: int,
        dropout: float,
        init_std: float,
        generator: torch.Generator,
    ):
        super().__init__()
        self.kind = kind
        if kind == "lstm":
            self.lstm = torch.nn.LSTM(
                hidden, encoder_hidden // 2, num_layers=layers, bidirectional=True, batch_first=True
            )
            head_in = 2 * (encoder_hidden // 2)
            widths = [head_in, head_in, hidden]
        else:
            widths = [hidden] + [encoder_hidden] * (layers - 1) + [hidden]
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.dropout = torch.nn.Dropout(dropout)
        with torch.no_grad():
            for layer in self.layers:
                layer.weight.normal_(0.0, init_std, generator=generator)
                layer.bias.zero_()
            if kind == "lstm":
                bound = 1.0 / math.sqrt(encoder_hidden // 2)
                for param in self.lstm.parameters():
                    param.uniform_(-bound, bound, generator=generator)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = inputs
        if self.kind == "lstm":
            x, _ = self.lstm(x.unsqueeze(0))
            x = x.squeeze(0)
        for index, layer in enumerate(self.layers):
            x = layer(self.dropout(x))
            if index < len(self.layers) - 1:
                x = torch.relu(x)
        return x


class VirtualPrompts(torch.nn.Module):
    """A child module of the model (so DDP and the optimizer see its parameters)."""

    def __init__(
        self,
        model,
        tasks: list[str],
        new_tasks: list[str],
        tokens: dict[str, int],
        style: str,
        existing: dict[str, torch.Tensor],
        p_tuning,
        init_methods: list[str] | None,
        init_texts: list[str | None] | None,
        tokenizer,
        seed: int,
    ):
        super().__init__()
        embedding = model.embedding.word_embeddings
        hidden = model.config.hidden_size
        self.tasks, self.new_tasks, self.style = list(tasks), list(new_tasks), style
        generator = torch.Generator().manual_seed(seed)
        for name, table in existing.items():
            self.register_buffer(_buffer(name), table.clone(), persistent=False)
        self.inputs = torch.nn.ParameterDict()
        for index, name in enumerate(new_tasks):
            method = (init_methods or ["random"] * len(new_tasks))[index] if style == "prompt-tuning" else "random"
            text = (init_texts or [None] * len(new_tasks))[index]
            self.inputs[name] = torch.nn.Parameter(
                _initial(
                    embedding, tokens[name], hidden, method, text, tokenizer, model.config.init_method_std, generator
                )
            )
        self.encoder = (
            PromptEncoder(
                p_tuning.encoder_type,
                hidden,
                p_tuning.encoder_hidden,
                p_tuning.num_layers,
                p_tuning.dropout,
                p_tuning.init_std,
                generator,
            )
            if style == "p-tuning"
            else None
        )
        self._placement = None
        self._encoder_only = getattr(model, "encoder", None) is not None  # an encoder-decoder (T5)
        self._hook = embedding.register_forward_hook(self._replace)

    def tokens_of(self, task: str) -> torch.Tensor:
        if task in self.inputs:
            inputs = self.inputs[task]
            return self.encoder(inputs) if self.encoder is not None else inputs
        return getattr(self, _buffer(task))

    def place(self, virtual_mask: torch.Tensor | None, task_ids: torch.Tensor | None) -> None:
        self._placement = None if virtual_mask is None or not bool(virtual_mask.any()) else (virtual_mask, task_ids)

    def _replace(self, module, args, output):
        if self._placement is None:
            return output
        mask, task_ids = self._placement
        if self._encoder_only:  # the decoder's embedding call comes next and keeps its own tokens
            self._placement = None
        rows = [int(r) for r in torch.nonzero(mask.any(dim=1)).flatten()]
        values = torch.cat([self.tokens_of(self.tasks[int(task_ids[r])]) for r in rows]).to(output.dtype)
        return output.masked_scatter(mask.unsqueeze(-1).expand_as(output), values)

    @torch.no_grad()
    def table(self) -> dict[str, torch.Tensor]:
        """Every task's virtual tokens: existing ones exactly as loaded, new ones as trained (encoder in eval mode)."""
        was_training = self.training
        self.eval()
        try:
            return {task: self.tokens_of(task).detach().clone().cpu() for task in self.tasks}
        finally:
            self.train(was_training)

    def trainable(self) -> dict[str, torch.nn.Parameter]:
        return {name: p for name, p in self.named_parameters() if p.requires_grad}


def _buffer(task: str) -> str:
    return "table_" + "".join(c if c.isalnum() else "_" for c in task)


def _initial(
    embedding, count: int, hidden: int, method: str, text: str | None, tokenizer, std: float, generator: torch.Generator
) -> torch.Tensor:
    """Starting virtual tokens: the embeddings of `text`'s tokens (repeated to `count`), or normal(0, std) draws."""
    if method == "text":
        ids = tokenizer.encode(text)
        ids = (ids * (count // len(ids) + 1))[:count]
        with torch.no_grad():
            # The embedding is vocabulary-parallel: its forward gathers the rows whatever rank holds them.
            return embedding(torch.tensor([ids], device=embedding.weight.device))[0].detach().float().clone()
    return torch.empty(count, hidden).normal_(0.0, std, generator=generator)
