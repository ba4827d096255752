"""Build the parts of a training stage, each in its own small function: device, model,
optimizer, schedule, collator and batch plan."""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass

import torch
from transformers import AutoTokenizer, get_scheduler

from mosaic_core.config import StageConfig
from mosaic_core.modeling.dual_encoder import DualEncoder, PairCollator, build_model
from mosaic_core.modeling.encode import max_positions, resolve_precision
from mosaic_core.modeling.losses import JointLoss
from mosaic_core.modeling.modeldir import DOMAIN_IDS, read_domain_ids
from mosaic_core.modeling.prompts import Prompts, resolve_prompts
from mosaic_core.modeling.sparse import is_sparse_dir
from mosaic_core.trainer.data import BatchPlan, PairSet
from mosaic_core.trainer.memory import choose_chunk

log = logging.getLogger(__name__)


class StageInputError(ValueError):
    """The stage cannot run on this input; the message says what is missing and what to do."""


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) unless ``torch.distributed`` is initialised (torchrun)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def resolve_device(stage: StageConfig) -> torch.device:
    """The stage's device: ``auto`` is this rank's GPU (``LOCAL_RANK`` under torchrun) when there
    is one, else the CPU."""
    if stage.device == "cpu" or (stage.device == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise StageInputError(f"stage {stage.name!r} asks for device 'cuda' but torch sees no GPU")
    return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")


def check_inputs(stage: StageConfig, input_model: str, input_model_dir: str, domain_ids: torch.Tensor | None,
                 data: PairSet) -> None:
    if stage.uses_mlm and stage.mlm_tokens == "domain" and domain_ids is None:
        raise StageInputError(f"stage {stage.name!r} ({stage.kind}) masks domain tokens, but {input_model} has no "
                              f"{DOMAIN_IDS}: run stage 1 (`mosaic vocab`) first, or set mlm_tokens='all'")
    if stage.kind == "mlm" and domain_ids is None:
        raise StageInputError(f"the mlm warm-up trains the domain rows of {input_model}, which has no {DOMAIN_IDS}")
    if (stage.kind == "mlm" or (stage.uses_mlm and stage.mlm_tokens == "domain")) and not len(domain_ids):
        raise StageInputError(f"stage {stage.name!r} masks domain tokens, but stage 1 added none to {input_model} "
                              "(see its vocab_report.md): lower vocab min_count, or set mlm_tokens='all'")
    if len(data) < 2:
        raise StageInputError(f"stage {stage.name!r} needs at least 2 training pairs, got {len(data)}")
    if stage.batch_size * stage.accumulation > len(data):
        raise StageInputError(f"stage {stage.name!r}: a batch of {stage.batch_size * stage.accumulation:,} pairs "
                              f"is more than its {len(data):,} training pairs: set batch_size (and accumulation) "
                              f"to at most {len(data):,}")
    if stage.model_kind == "dense" and is_sparse_dir(input_model_dir):
        raise StageInputError(f"{input_model} is a sparse (SPLADE) model: train it with model_kind 'sparse' "
                              "(`--model-kind sparse`)")
    if stage.hard_negatives and not data.has_negatives:
        raise StageInputError(f"stage {stage.name!r} uses {stage.hard_negatives} hard negatives per pair, but the "
                              "training pairs carry none: filter them with `mosaic filter` (it keeps each pair's "
                              "hard negatives) or set hard_negatives=0")
    if stage.objective == "margin_mse" and not data.has_margins:
        raise StageInputError(f"stage {stage.name!r} trains margin_mse, but its examples carry no teacher margins: "
                              "train through `mosaic train` or `mosaic run` (they label the hard negatives with the "
                              "stage's teacher first), or set objective=infonce")


def param_groups(model: DualEncoder, weight_decay: float, decay_embeddings: bool) -> list[dict]:
    """Biases and LayerNorms never decay; the embedding matrix not in the warm-up, whose
    frozen rows must stay bit-identical (AdamW decays a row even when its gradient is zero)."""
    embeddings = model.embeddings
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            skip = p.ndim < 2 or "norm" in name.lower() or (p is embeddings and not decay_embeddings)
            (no_decay if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def freeze_for_warmup(model: DualEncoder, domain_ids: torch.Tensor, rows: bool) -> None:
    """MLM warm-up: the encoder is frozen, except the domain rows of the embedding matrix when ``rows``."""
    for p in model.encoder.parameters():
        p.requires_grad_(False)
    if not rows:
        return
    weight = model.encoder.get_input_embeddings().weight
    weight.requires_grad_(True)
    keep = torch.zeros(weight.shape[0], 1, dtype=weight.dtype, device=weight.device)
    keep[domain_ids] = 1
    weight.register_hook(lambda g: g * keep)


def build_optimizer(model: DualEncoder, stage: StageConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over the trainable parameters (fused kernels on CUDA)."""
    groups = param_groups(model, stage.weight_decay, stage.kind != "mlm")
    return torch.optim.AdamW(groups, lr=stage.lr, fused=device.type == "cuda")


def total_steps(stage: StageConfig, plan: BatchPlan) -> int:
    per_epoch = max(1, plan.per_epoch // stage.accumulation)
    return stage.epochs * per_epoch if stage.max_steps is None else stage.max_steps


def build_scheduler(optimizer: torch.optim.Optimizer, stage: StageConfig, total: int):
    """Linear warm-up over ``warmup_ratio`` of the steps, then the stage's decay."""
    name = "constant_with_warmup" if stage.schedule == "constant" else stage.schedule
    return get_scheduler(name, optimizer, num_warmup_steps=math.ceil(stage.warmup_ratio * total),
                         num_training_steps=total)


def build_loss(stage: StageConfig) -> JointLoss:
    """The stage's loss: cosine InfoNCE for a dense model, SPLADE's dot product + FLOPS for a sparse one."""
    flops = (stage.flops_query, stage.flops_document) if stage.model_kind == "sparse" else None
    matryoshka = (stage.matryoshka_dims, stage.matryoshka_weights) if stage.matryoshka_dims else None
    return JointLoss(stage.alpha, stage.scale, stage.symmetric, flops, matryoshka, stage.objective)


def check_matryoshka(stage: StageConfig, model: DualEncoder, input_model: str) -> None:
    """Matryoshka dimensions are prefixes of the pooled embedding: none may exceed its size."""
    size = model.encoder.config.hidden_size
    if stage.matryoshka_dims and max(stage.matryoshka_dims) > size:
        raise StageInputError(f"stage {stage.name!r}: matryoshka_dims {list(stage.matryoshka_dims)} exceed the "
                              f"{size}-d embeddings of {input_model}; use dimensions of at most {size}, e.g. "
                              f"[{size}, {size // 2}, {size // 4}]")


@dataclass
class Lengths:
    """Query and document lengths after capping at the model's position embeddings."""

    query: int
    document: int


def capped_lengths(stage: StageConfig, model: DualEncoder, input_model: str) -> Lengths:
    limit = max_positions(model.encoder.config)
    if max(stage.query_max_length, stage.document_max_length) > limit:
        log.warning("stage %s: %s takes at most %d positions; query/document lengths capped to it",
                    stage.name, input_model, limit)
    return Lengths(min(stage.query_max_length, limit), min(stage.document_max_length, limit))


def build_collator(tokenizer, stage: StageConfig, domain_ids: torch.Tensor | None, lengths: Lengths,
                   prompts: Prompts | None = None, device: torch.device | None = None) -> PairCollator:
    """Documents are masked only when the stage trains an MLM term; masks are drawn per batch.
    Token lengths are padded to a multiple of ``pad_to_multiple_of`` (None: 8 on a GPU)."""
    multiple = stage.pad_to_multiple_of or (8 if device is not None and device.type == "cuda" else None)
    return PairCollator(tokenizer, domain_ids if stage.mlm_tokens == "domain" else None, lengths.query,
                        lengths.document, stage.mlm_probability if stage.uses_mlm else 0.0,
                        negatives=stage.hard_negatives, prompts=prompts or Prompts(), pad_to_multiple_of=multiple)


def compile_encoder(model: DualEncoder, stage: StageConfig) -> None:
    """``stage.compile``: torch.compile the encoder in place (dynamic shapes: a batch's padded
    length varies), so its state dict, and what a checkpoint or the saved model holds, is unchanged."""
    if stage.compile:
        log.info("stage %s: the encoder is compiled (torch.compile, dynamic shapes); the first steps pay for it",
                 stage.name)
        model.encoder.compile(dynamic=True)


@dataclass
class TrainParts:
    """Everything a stage's loop reads, built once by :func:`build_parts`."""

    model: DualEncoder
    head_loaded: bool
    tokenizer: object
    optimizer: torch.optim.Optimizer
    scheduler: object
    collate: PairCollator
    plan: BatchPlan
    loss_fn: JointLoss
    lengths: Lengths
    domain_ids: torch.Tensor | None
    mlm_domain: torch.Tensor | None
    device: torch.device
    dtype: torch.dtype | None
    chunk: int
    total: int
    rank: int
    world: int
    net: torch.nn.Module  # what training passes run through: ``model``, or DDP around it on several ranks
    prompts: Prompts = Prompts()  # put before each query and document; the saved model declares them

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]


def wrap_for_ranks(model: DualEncoder, device: torch.device, size: int) -> torch.nn.Module:
    """DistributedDataParallel around ``model`` on several ranks (bucketed gradient all-reduce,
    overlapped with the backward pass), the model itself on one. Unused parameters are allowed:
    the MLM head takes no gradient in a contrastive stage, nor in a pass with nothing masked."""
    if size == 1:
        return model
    return torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False,
        find_unused_parameters=True)


def build_parts(stage: StageConfig, model_dir: str, input_model: str, data: PairSet) -> TrainParts:
    """The stage's parts from the resolved model directory ``model_dir`` and its examples."""
    rank, size = world()
    device = resolve_device(stage)
    domain_ids = read_domain_ids(model_dir)
    check_inputs(stage, input_model, model_dir, domain_ids, data)
    torch.manual_seed(stage.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model, head_loaded = build_model(model_dir, kind=stage.model_kind)
    if stage.kind == "mlm" and not head_loaded:  # what the warm-up is for
        log.info("%s has no MLM head: warm-up stage %s trains one", input_model, stage.name)
    elif (stage.uses_mlm or stage.model_kind == "sparse") and not head_loaded:
        log.warning("%s has no MLM head: stage %s trains the head's transform from scratch (consider the mlm "
                    "warm-up stage)%s", input_model, stage.name,
                    "; a sparse model's representations are that head's output, meaningless until it is trained"
                    if stage.model_kind == "sparse" else "")
    check_matryoshka(stage, model, input_model)
    lengths = capped_lengths(stage, model, input_model)
    prompts = resolve_prompts(model_dir, stage.prompts)
    if prompts:
        log.info("stage %s: query prompt %r, document prompt %r", stage.name, prompts.query, prompts.document)
    model.to(device).train()
    compile_encoder(model, stage)
    dev_domain = domain_ids.to(device) if domain_ids is not None else None
    if stage.kind == "mlm":
        freeze_for_warmup(model, dev_domain, stage.mlm_rows)
    plan = BatchPlan(len(data), stage.batch_size, stage.seed)
    if plan.batch_size % size:
        raise StageInputError(f"batch size {plan.batch_size} must be a multiple of the {size} processes")
    optimizer = build_optimizer(model, stage, device)
    total = total_steps(stage, plan)
    return TrainParts(
        model=model, head_loaded=head_loaded, tokenizer=tokenizer, optimizer=optimizer,
        scheduler=build_scheduler(optimizer, stage, total),
        collate=build_collator(tokenizer, stage, domain_ids, lengths, prompts, device),
        plan=plan, loss_fn=build_loss(stage), lengths=lengths,
        domain_ids=domain_ids, mlm_domain=dev_domain if stage.mlm_tokens == "domain" else None, device=device,
        dtype=resolve_precision(stage.precision, device), total=total,
        chunk=choose_chunk(stage, model.encoder.config, lengths, plan.batch_size, device),
        rank=rank, world=size, net=wrap_for_ranks(model, device, size), prompts=prompts)
