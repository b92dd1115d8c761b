"""CLIP's contrastive loss over the whole global batch: every rank's image and text features are gathered from the
data-parallel group, and each image must pick its own caption among all of them (and each caption its image).

    loss = contrastive_loss(image_features, text_features, scale, local_loss=False, gather_with_grad=True)

gather_with_grad: the gathered features keep their graph, so a rank's features get gradients from every rank's
copy of the loss (summed in the backward all-reduce); megatron DDP then averages the ranks' gradients, which gives
exactly the gradient of the global-batch loss. Without it, only a rank's own features carry gradients.
local_loss: each rank scores its own images and captions against all gathered ones (logits of b x global batch
instead of the full square), with the labels offset to its slice.
"""

import torch
import torch.nn.functional as F


class _GatherWithGrad(torch.autograd.Function):
    """all_gather whose backward sums every rank's gradient of the whole gathered tensor and keeps this rank's
    slice; written with all_reduce so that it also runs on gloo (which has no reduce_scatter or all_to_all)."""

    @staticmethod
    def forward(ctx, tensor, group):
        ctx.group = group
        ctx.rank, ctx.world = torch.distributed.get_rank(group), torch.distributed.get_world_size(group)
        gathered = [torch.empty_like(tensor) for _ in range(ctx.world)]
        torch.distributed.all_gather(gathered, tensor.contiguous(), group=group)
        return torch.cat(gathered)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        torch.distributed.all_reduce(grad, group=ctx.group)
        return grad.chunk(ctx.world)[ctx.rank], None


def _gather(features: torch.Tensor, group, with_grad: bool, keep_local: bool) -> torch.Tensor:
    if with_grad:
        return _GatherWithGrad.apply(features, group)
    world, rank = torch.distributed.get_world_size(group), torch.distributed.get_rank(group)
    gathered = [torch.empty_like(features) for _ in range(world)]
    torch.distributed.all_gather(gathered, features.detach().contiguous(), group=group)
    if keep_local:
        gathered[rank] = features
    return torch.cat(gathered)


def contrastive_loss(
    image: torch.Tensor, text: torch.Tensor, scale: torch.Tensor, local_loss: bool, gather_with_grad: bool, group=None
) -> torch.Tensor:
    """Mean of the image->text and text->image cross-entropies; features [b, d] already L2-normalised."""
    image, text = image.float(), text.float()
    world = torch.distributed.get_world_size(group) if torch.distributed.is_initialized() else 1
    if world == 1:
        all_image, all_text, first = image, text, 0
    else:
        all_image = _gather(image, group, gather_with_grad, keep_local=not local_loss)
        all_text = _gather(text, group, gather_with_grad, keep_local=not local_loss)
        first = torch.distributed.get_rank(group) * image.shape[0]
    if local_loss:
        per_image, per_text = scale * image @ all_text.T, scale * text @ all_image.T
        labels = torch.arange(first, first + image.shape[0], device=image.device)
    else:
        per_image = scale * all_image @ all_text.T
        per_text = per_image.T
        labels = torch.arange(all_image.shape[0], device=image.device)
    return (F.cross_entropy(per_image, labels) + F.cross_entropy(per_text, labels)) / 2
