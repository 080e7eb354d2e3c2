"""KV-cache specs: one frozen value object per storage kind, one formula each.

Mirrors vLLM's ``v1/kv_cache_interface.py`` (0.32) without importing it:
sizes are derived properties, and ``blocks_per_request`` is the number of
pages a request at ``max_model_len`` claims from the shared pool, which is
what vLLM uses for its start-up check and its "maximum concurrency" figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from validator.units import cdiv


@dataclass(frozen=True)
class KVSpec:
    """One layer's cache layout."""

    block_size: int

    @property
    def bytes_per_token(self) -> int:
        raise NotImplementedError

    @property
    def page_size_bytes(self) -> int:
        """Bytes of one block of this layer (vLLM: ``page_size_bytes``)."""
        return self.block_size * self.bytes_per_token

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        raise NotImplementedError

    def held_blocks(self, tokens: int) -> int:
        """Blocks a decoding request with KV for `tokens` positions holds here: all of them, unless the
        layer gives back those it no longer attends to."""
        return cdiv(tokens, self.block_size)

    @property
    def period(self) -> int:
        """Past its window or chunk, the tokens after which held_blocks repeats (0: it never gives back)."""
        return 0


@dataclass(frozen=True)
class FullAttentionSpec(KVSpec):
    """Standard attention: K and V for every position of the request."""

    num_kv_heads: int
    head_size: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return 2 * self.num_kv_heads * self.head_size * self.dtype_bytes

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        return cdiv(max_model_len, self.block_size)


@dataclass(frozen=True)
class SlidingWindowSpec(FullAttentionSpec):
    """Local attention: blocks that fall out of the window are freed.

    vLLM holds the last ``window - 1`` computed tokens plus every in-flight
    token (one ``max_num_batched_tokens`` per concurrent batch: 2 with async
    scheduling, the GPU default; 1 on CPU), never more than ``max_model_len``,
    plus one block because the window need not start on a block boundary.
    """

    sliding_window: int

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        tokens = min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len)
        return cdiv(tokens, self.block_size) + 1

    def held_blocks(self, tokens: int) -> int:
        # the blocks wholly before the next token's window are freed (vLLM: get_num_skipped_tokens)
        return cdiv(tokens, self.block_size) - max(0, tokens - self.sliding_window) // self.block_size

    @property
    def period(self) -> int:
        return self.block_size


@dataclass(frozen=True)
class ChunkedLocalSpec(FullAttentionSpec):
    """Chunked local attention (Llama 4's RoPE layers): a position attends only within its chunk
    of ``attention_chunk_size`` tokens, and blocks of finished chunks are freed.

    vLLM holds one chunk plus every in-flight token, never more than ``max_model_len``, and
    (unlike its sliding-window formula) adds no block for a chunk that starts mid-block.
    """

    attention_chunk_size: int

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        return cdiv(min(self.attention_chunk_size + max_in_flight_tokens, max_model_len), self.block_size)

    def held_blocks(self, tokens: int) -> int:
        # the blocks of finished chunks are freed: those before the chunk of the last token computed
        chunk = self.attention_chunk_size
        return cdiv(tokens, self.block_size) - (tokens - 1) // chunk * chunk // self.block_size

    @property
    def period(self) -> int:
        return self.attention_chunk_size


@dataclass(frozen=True)
class MLASpec(KVSpec):
    """Multi-head latent attention: one latent vector per position, no K/V pair.

    The latent (``kv_lora_rank + qk_rope_head_dim``) is replicated on every
    tensor-parallel rank.
    """

    latent_size: int
    dtype_bytes: int

    @property
    def bytes_per_token(self) -> int:
        return self.latent_size * self.dtype_bytes

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        return cdiv(max_model_len, self.block_size)


@dataclass(frozen=True)
class MambaSpec(KVSpec):
    """A state-space or linear-attention layer: a fixed state per request, whatever its length.

    The state is padded to the attention page (``page_bytes``) so that one pool serves both kinds.
    A request holds ``blocks_held`` pages: 1 without prefix caching; with it (vLLM's "align" mode)
    the running state, the last block-boundary state, and for Mamba-2 mixers a prefill checkpoint.
    For a model without attention ``block_size`` is ``max_model_len`` (vLLM's mamba_block_size).
    """

    state_bytes: int  # the state's own bytes (vLLM: real_page_size_bytes)
    page_bytes: int  # padded to the attention page
    blocks_held: int
    align: bool = False  # vLLM's mamba_cache_mode "align" (prefix caching on), else "none"
    speculative_blocks: int = 0  # a page per draft token (num_speculative_blocks)

    @property
    def cache_mode(self) -> str:
        return "align" if self.align else "none"

    @property
    def bytes_per_token(self) -> int:
        return 0  # the state does not grow with the context

    @property
    def page_size_bytes(self) -> int:
        return self.page_bytes

    def blocks_per_request(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        return self.blocks_held

    def held_blocks(self, tokens: int) -> int:
        return self.blocks_held
