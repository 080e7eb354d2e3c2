"""--speculative-config as the KV cache sees it (vLLM 0.32), read from the launch flags.

Drafting changes the pool of a model with state layers: each Mamba-2 or Gated DeltaNet layer keeps
`num_speculative_tokens` more conv rows, and a request holds as many more state pages
(``MambaSpec.num_speculative_blocks``); MTP adds the checkpoint's own draft layers
(``mtp_num_hidden_layers``, full attention) to the attention group. A separate draft model
(EAGLE, DFlash, a draft checkpoint) brings a KV cache kvgate has no config for.

Pure: parses strings and reshapes a ModelShape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from validator.errors import InputError, NotModelled
from validator.plan.layer_kinds import FULL, LINEAR
from validator.plan.model_shape import ModelShape

FLAG = "--speculative-config"
# methods that draft without a model, so without a KV cache of their own (all others: a draft model,
# or MTP's layers of the checkpoint)
_NO_DRAFT_KV = ("ngram", "ngram_gpu", "suffix")


@dataclass(frozen=True)
class SpecDecode:
    method: str  # vLLM's method name; "mtp" for the model's own multi-token-prediction layers
    num_tokens: int | None  # num_speculative_tokens (None: not given, vLLM derives it)

    @property
    def mtp(self) -> bool:
        return self.method == "mtp" or self.method.endswith("_mtp")

    @property
    def draft_model(self) -> bool:
        """A draft with a KV cache of its own, outside the target checkpoint."""
        return not self.mtp and self.method not in _NO_DRAFT_KV


def _value(extra: list[str]) -> str | None:
    for i, arg in enumerate(extra):
        name, eq, value = arg.partition("=")
        if name.replace("_", "-") != FLAG:  # vLLM's parser takes --speculative_config too
            continue
        if eq:
            return value
        if i + 1 == len(extra):
            raise InputError(f"vllm.extra_args: {FLAG} needs a JSON object after it")
        return extra[i + 1]
    return None


def from_extra_args(extra: list[str]) -> SpecDecode | None:
    """The speculative decoding the launch flags ask for, or None."""
    text = _value(extra)
    if text is None:
        return None
    try:
        cfg = json.loads(text)
    except ValueError:
        cfg = None
    if not isinstance(cfg, dict):
        raise InputError(
            f"vllm.extra_args: {FLAG} must be a JSON object, e.g. "
            '\'{"method": "mtp", "num_speculative_tokens": 3}\', got ' + f"{text!r:.60}"
        )
    method = cfg.get("method")
    if method is None:
        method = "draft_model" if cfg.get("model") else None
    if not isinstance(method, str) or not method:
        raise InputError(f"vllm.extra_args: {FLAG} needs a method (mtp, ngram, eagle, ...), got {cfg!r:.60}")
    n = cfg.get("num_speculative_tokens")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise InputError(f"vllm.extra_args: {FLAG} num_speculative_tokens must be an integer >= 1, got {n!r:.20}")
    return SpecDecode(method=method, num_tokens=n)


def kv_shape(shape: ModelShape, spec: SpecDecode | None, notes: list[str]) -> tuple[ModelShape, int]:
    """The layers the KV pool holds under `spec`, and the draft tokens each state layer keeps room
    for. A model without state layers is planned as without drafting, and says so when the draft
    has a KV cache of its own."""
    if spec is None:
        return shape, 0
    if LINEAR not in shape.layer_kinds or shape.state is None:
        if spec.method not in _NO_DRAFT_KV:
            notes.append(
                f"{FLAG} {spec.method}: the draft's KV cache (MTP layers or a draft model) is not in this plan; "
                "vLLM's start-up figures will be below it"
            )
        return shape, 0
    if spec.draft_model:
        raise NotModelled(f"speculative decoding with a draft model ({spec.method}) beside state layers")
    if spec.num_tokens is None:
        raise InputError(
            f"vllm.extra_args: {FLAG} needs num_speculative_tokens to plan this hybrid (each draft token "
            "holds a conv row and a state page per layer)"
        )
    if spec.mtp:
        if not shape.mtp_layers:
            raise NotModelled(f"MTP drafting on {shape.model_type} (its draft layers' KV)")
        shape = replace(shape, layer_kinds=shape.layer_kinds + (FULL,) * shape.mtp_layers)
        notes.append(
            f"MTP drafting: {shape.mtp_layers} draft layer(s) of full attention join the KV pool; every state "
            f"layer keeps {spec.num_tokens} more conv rows and state pages; their weights are not in a count "
            "from config.json (the checkpoint's headers hold them)"
        )
    else:
        notes.append(
            f"{spec.method} drafting: every state layer keeps {spec.num_tokens} more conv rows and state pages"
        )
    return shape, spec.num_tokens
