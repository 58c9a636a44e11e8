#!/usr/bin/env python3
"""Stand-in for one vLLM 0.33.0 engine-core process (one data-parallel rank).

tollgate plays vLLM's front-end: it binds a handshake ROUTER, an input ROUTER
and an output PULL, and engine cores dial in. This script plays the engine
side of that protocol with pyzmq + msgspec only, so tollgate's ZMQ client can
be tested without a GPU. It is the independent reference those tests run
against, so it follows vLLM's own code paths as closely as it can:

* the wire types below mirror vLLM's msgspec Structs / dataclasses field by
  field (same order, same ``array_like`` / ``omit_defaults`` flags, same
  defaults), so the bytes are what vLLM would send and accept;
* the threads mirror ``EngineCoreProc``: an input thread that owns the input
  DEALER(s), a busy loop that owns all request state, and an output thread
  that owns the PUSH socket(s), joined by ``queue.Queue``;
* stop checks mirror ``vllm/v1/core/sched/utils.py :: check_stop``.

Generation is fake: ``--mode mock`` echoes the prompt ids back, one token per
step; ``--mode llama`` relays a llama-server's ``/completion`` token stream.

Every protocol event is printed on stdout as one flushed line
``word key=value ...`` for tests to read; diagnostics go to stderr.
See README.md for the CLI, the event lines and the fault switches.

Source read: the vLLM 0.33.0 wheel (commit 4ba787ec9); paths below are
relative to the vLLM source root.

``--protocol tokenspeed`` swaps in TokenSpeed's ``--zmq-msgpack`` payloads and
handshake order (lightseekorg/tokenspeed @ f4d8ec6e03; brief
/work/tokenspeed-zmq-notes.md): see the "TokenSpeed" section and
``TokenSpeedEngine`` below. The vLLM path does not use any of it.
"""

from __future__ import annotations

import argparse
import array
import enum
import http.client
import json
import math
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, NamedTuple, NoReturn

import msgspec
import zmq

VLLM_VERSION = "0.33.0"

# ---------------------------------------------------------------------------
# Mirrored constants and enums
# ---------------------------------------------------------------------------

# vllm/v1/engine/core.py :: EngineCoreProc.ENGINE_CORE_DEAD
ENGINE_CORE_DEAD = b"ENGINE_CORE_DEAD"
# vllm/v1/engine/core.py :: HANDSHAKE_TIMEOUT_MINS
HANDSHAKE_TIMEOUT_MINS = 5
# vllm/v1/serial_utils.py :: CUSTOM_TYPE_RAW_VIEW (msgpack ext type for raw
# ndarray bytes that are small enough to travel inline)
CUSTOM_TYPE_RAW_VIEW = 3
# vllm/envs.py :: VLLM_MSGPACK_ZERO_COPY_THRESHOLD (read from the same env var
# so tests can force logprob arrays out of band into aux frames)
MSGPACK_ZERO_COPY_THRESHOLD = int(os.getenv("VLLM_MSGPACK_ZERO_COPY_THRESHOLD", "256"))
# vllm/envs.py :: VLLM_MAX_N_SEQUENCES
MAX_N_SEQUENCES = int(os.environ.get("VLLM_MAX_N_SEQUENCES", "16384"))
# vllm/sampling_params.py :: _SAMPLING_EPS, _MAX_TEMP
_SAMPLING_EPS = 1e-5
_MAX_TEMP = 1e-2
# vllm/utils/network_utils.py :: _ZMQ_LARGE_BUFFER_*
_ZMQ_LARGE_BUFFER_SIZE = 512 * 1024**2
_ZMQ_LARGE_BUFFER_MIN_TOTAL_MEMORY = 32 * 1024**3
_ZMQ_LARGE_BUFFER_MIN_AVAILABLE_MEMORY = 16 * 1024**3


class FinishReason(enum.IntEnum):
    """Mirrors vllm/v1/engine/__init__.py :: FinishReason (encoded as its int)."""

    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4

    def __str__(self) -> str:
        return FINISH_REASON_STRINGS[self.value]


# vllm/v1/engine/__init__.py :: FINISH_REASON_STRINGS
FINISH_REASON_STRINGS = ("stop", "length", "abort", "error", "repetition")


class EngineCoreRequestType(enum.Enum):
    """Mirrors vllm/v1/engine/__init__.py :: EngineCoreRequestType.

    The value is the one type byte that leads every input message. The last
    two never travel on the wire; the busy loop uses WAKEUP to wake itself.
    """

    ADD = b"\x00"
    ABORT = b"\x01"
    START_DP_WAVE = b"\x02"
    UTILITY = b"\x03"
    EXECUTOR_FAILED = b"\x04"
    WAKEUP = b"\x05"


class EngineCoreEventType(enum.IntEnum):
    """Mirrors vllm/v1/engine/__init__.py :: EngineCoreEventType."""

    QUEUED = 1
    SCHEDULED = 2
    PREEMPTED = 3


class RequestOutputKind(enum.Enum):
    """Mirrors vllm/sampling_params.py :: RequestOutputKind (the engine ignores it)."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class VLLMValidationError(ValueError):
    """Stands in for vllm/exceptions.py :: VLLMValidationError.

    A ValueError subclass, so msgspec turns it into ``msgspec.ValidationError``
    when it is raised from ``__post_init__`` during decode, as in vLLM.
    """


# ---------------------------------------------------------------------------
# Mirrored request types (front-end -> engine)
# ---------------------------------------------------------------------------


@dataclass
class StructuredOutputsParams:
    """Mirrors vllm/sampling_params.py :: StructuredOutputsParams (a dataclass, so a map).

    The engine would compile a grammar from it; this stand-in only decodes and
    validates it. The two private ``init=False`` fields of vLLM are kept as
    plain defaults: msgspec neither encodes ``_``-prefixed dataclass fields nor
    rejects them on decode, so the bytes accepted are the same.
    """

    json: str | dict | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None
    _backend: str | None = None
    _backend_was_auto: bool = False

    def __post_init__(self) -> None:
        """Mirrors StructuredOutputsParams.__post_init__: exactly one constraint."""
        count = sum(
            getattr(self, name) is not None
            for name in ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
        )
        if count > 1:
            raise VLLMValidationError(
                "You can only use one kind of structured outputs constraint "
                f"but multiple are specified: {self.__dict__}"
            )
        if count < 1:
            raise VLLMValidationError(
                "You must use one kind of structured outputs constraint "
                f"but none are specified: {self.__dict__}"
            )


@dataclass
class RepetitionDetectionParams:
    """Mirrors vllm/sampling_params.py :: RepetitionDetectionParams (a map)."""

    max_pattern_size: int = 0
    min_pattern_size: int = 0
    min_count: int = 0

    def __post_init__(self) -> None:
        """Mirrors RepetitionDetectionParams.__post_init__ range checks."""
        if (
            self.max_pattern_size < 0
            or self.min_pattern_size < 0
            or self.min_pattern_size > self.max_pattern_size
        ):
            raise VLLMValidationError(
                "max_pattern_size, min_pattern_size must be >=0, "
                "with min_pattern_size <= max_pattern_size. "
                "Set both to 0 to disable repetitive pattern detection."
            )
        if self.max_pattern_size > 0 and self.min_count < 2:
            raise VLLMValidationError(
                "min_count must be >= 2 to detect repetitive patterns "
                "in engine output. If you do not wish to detect repetitive "
                "patterns, set max_pattern_size to 0."
            )


def validate_thinking_token_budget(value: Any) -> int | None:
    """Mirrors vllm/sampling_params.py :: validate_thinking_token_budget."""
    if value is None:
        return None
    if isinstance(value, (bool, float)) or not isinstance(value, int) or (value < 0 and value != -1):
        raise VLLMValidationError(
            "`thinking_token_budget` must be a non-negative integer or -1 for unlimited."
        )
    return None if value == -1 else value


class SamplingParams(msgspec.Struct, omit_defaults=True, dict=True):
    """Mirrors vllm/sampling_params.py :: SamplingParams.

    A plain (not array_like) Struct with ``omit_defaults=True``: it travels as
    a map keyed by field name, defaults left out, unknown keys ignored. The
    fields are vLLM's, in vLLM's order, with vLLM's defaults. The two ndarray /
    tensor-typed fields are typed ``Any`` (this stand-in never needs them, and
    the ``[dtype, shape, data]`` triple decodes as-is).

    ``__post_init__`` runs during msgspec decode, as in vLLM, so a value out
    of range raises inside the engine's input thread (see brief §3.1).
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    watermarking: bool | None = None
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    prompt_logprob_token_ids: Any = None
    prompt_logprob_start: int | None = None
    logprob_token_ids: list[int] | None = None
    flat_logprobs: bool = False
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    stream_interval: int | None = None
    skip_clone: bool = False
    output_text_buffer_length: int = 0
    _eos_token_id: int | None = None
    _all_stop_token_ids: set[int] = msgspec.field(default_factory=set)
    _watermarking_skipped: bool = False
    structured_outputs: StructuredOutputsParams | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    _bad_words_token_ids: list[list[int]] | None = None
    skip_reading_prefix_cache: bool | None = None
    thinking_token_budget: int | None = None
    repetition_detection: RepetitionDetectionParams | None = None
    routed_experts_prompt_start: int = 0
    trace_decode_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        """Mirrors SamplingParams.__post_init__ (normalisation, then _verify_args)."""
        if 0 < self.temperature < _MAX_TEMP:
            self.temperature = max(self.temperature, _MAX_TEMP)
        if self.seed == -1:
            self.seed = None
        self.thinking_token_budget = validate_thinking_token_budget(self.thinking_token_budget)
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        if self.stop_token_ids is None:
            self.stop_token_ids = []
        else:
            self.stop_token_ids = list(dict.fromkeys(self.stop_token_ids))
        if self.bad_words is None:
            self.bad_words = []
        else:
            self.bad_words = list(dict.fromkeys(self.bad_words))
        if self.logprobs is True:
            self.logprobs = 1
        if self.prompt_logprobs is True:
            self.prompt_logprobs = 1
        if self.stop and not self.include_stop_str_in_output:
            self.output_text_buffer_length = max(len(s) for s in self.stop) - 1
        self._verify_args()
        if self.temperature < _SAMPLING_EPS:
            # Zero temperature means greedy sampling.
            self.top_p = 1.0
            self.top_k = 0
            self.min_p = 0.0
            if self.n > 1:
                raise VLLMValidationError(f"n must be 1 when using greedy sampling, got {self.n}.")
        # eos_token_id is added to this by the front-end
        self._all_stop_token_ids.update(self.stop_token_ids)
        if self.skip_reading_prefix_cache is None:
            self.skip_reading_prefix_cache = (
                self.prompt_logprobs is not None or self.prompt_logprob_token_ids is not None
            )

    def _verify_args(self) -> None:
        """Mirrors SamplingParams._verify_args (same checks, same messages)."""
        if not isinstance(self.n, int):
            raise VLLMValidationError(f"n must be an int, but is of type {type(self.n)}")
        if self.n < 1:
            raise VLLMValidationError(f"n must be at least 1, got {self.n}.")
        if self.n > MAX_N_SEQUENCES:
            raise VLLMValidationError(f"n must be at most {MAX_N_SEQUENCES}, got {self.n}.")
        if self.extra_args:
            self._verify_extra_args()
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise VLLMValidationError(
                f"presence_penalty must be in [-2, 2], got {self.presence_penalty}."
            )
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise VLLMValidationError(
                f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}."
            )
        if not math.isfinite(self.repetition_penalty):
            raise VLLMValidationError(
                f"repetition_penalty must be a finite number, got {self.repetition_penalty}."
            )
        if self.repetition_penalty <= 0.0:
            raise VLLMValidationError(
                f"repetition_penalty must be greater than zero, got {self.repetition_penalty}."
            )
        if not math.isfinite(self.temperature):
            raise VLLMValidationError(f"temperature must be a finite number, got {self.temperature}.")
        if self.temperature < 0.0:
            raise VLLMValidationError(f"temperature must be non-negative, got {self.temperature}.")
        if self.temperature > 2.0:
            raise VLLMValidationError(f"temperature must be in [0, 2], got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise VLLMValidationError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < -1:
            raise VLLMValidationError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise VLLMValidationError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise VLLMValidationError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.min_tokens < 0:
            raise VLLMValidationError(
                f"min_tokens must be greater than or equal to 0, got {self.min_tokens}."
            )
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise VLLMValidationError(
                f"min_tokens must be less than or equal to max_tokens={self.max_tokens}, "
                f"got {self.min_tokens}."
            )
        if self.stream_interval is not None and self.stream_interval < 1:
            raise VLLMValidationError(f"stream_interval must be at least 1, got {self.stream_interval}.")
        if self.logprobs is not None and self.logprobs != -1 and self.logprobs < 0:
            raise VLLMValidationError(f"logprobs must be non-negative or -1, got {self.logprobs}.")
        if self.prompt_logprobs is not None and self.prompt_logprobs != -1 and self.prompt_logprobs < 0:
            raise VLLMValidationError(
                f"prompt_logprobs must be non-negative or -1, got {self.prompt_logprobs}."
            )
        if any(not stop_str for stop_str in self.stop):
            raise VLLMValidationError("stop cannot contain an empty string.")
        if self.stop and not self.detokenize:
            raise VLLMValidationError(
                "stop strings are only supported when detokenize is True. Set detokenize=True to use stop."
            )
        if any(not bad_word for bad_word in self.bad_words):
            raise VLLMValidationError(
                f"bad_words cannot contain an empty string. Got bad_words={self.bad_words}"
            )

    def _verify_extra_args(self) -> None:
        """Mirrors SamplingParams._verify_extra_args: ints must fit msgpack's 64 bits."""
        pending: list[Any] = [self.extra_args]
        while pending:
            value = pending.pop()
            if isinstance(value, int) and not -(2**63) <= value < 2**64:
                raise VLLMValidationError("extra_args integers must be between -2**63 and 2**64 - 1.")
            if isinstance(value, dict):
                pending.extend(value.keys())
                pending.extend(value.values())
            elif isinstance(value, (list, tuple)):
                pending.extend(value)

    @property
    def eos_token_id(self) -> int | None:
        """Mirrors SamplingParams.eos_token_id: the property check_stop reads."""
        return self._eos_token_id

    @property
    def all_stop_token_ids(self) -> set[int]:
        """Mirrors SamplingParams.all_stop_token_ids (masked while < min_tokens)."""
        return self._all_stop_token_ids

    @property
    def num_logprobs(self) -> int | None:
        """Mirrors SamplingParams.num_logprobs."""
        if self.logprobs is not None:
            return self.logprobs
        return len(self.logprob_token_ids) if self.logprob_token_ids else None


class LoRARequest(msgspec.Struct, omit_defaults=True, array_like=True):
    """Mirrors vllm/lora/request.py :: LoRARequest (array_like)."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = msgspec.field(default=None)
    load_inplace: bool = False
    is_3d_lora_weight: bool = False

    def __post_init__(self) -> None:
        """Mirrors LoRARequest.__post_init__."""
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")
        assert self.lora_path, "lora_path cannot be empty"


class EngineCoreRequest(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """Mirrors vllm/v1/engine/__init__.py :: EngineCoreRequest (22 fields, array_like).

    Types this stand-in never inspects (multimodal features, pooling params,
    prompt embeddings, KV hints) are ``Any``: they decode whatever vLLM's
    types would accept, and are then rejected or ignored by the busy loop.
    """

    request_id: str
    prompt_token_ids: list[int] | None
    mm_features: list[Any] | None
    sampling_params: SamplingParams | None
    pooling_params: Any
    arrival_time: float
    lora_request: LoRARequest | None
    cache_salt: str | None
    data_parallel_rank: int | None
    prompt_embeds: Any = None
    prompt_is_token_ids: list[bool] | None = None
    client_index: int = 0
    current_wave: int = 0
    priority: int = 0
    trace_headers: Mapping[str, str] | None = None
    resumable: bool = False
    external_req_id: str | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict[str, Any] | None = None
    abort_immediately: bool = False
    session_id: str | None = None
    kv_hints: Any = None


# ---------------------------------------------------------------------------
# Mirrored output types (engine -> front-end)
# ---------------------------------------------------------------------------


class EngineCoreEvent(msgspec.Struct):
    """Mirrors vllm/v1/engine/__init__.py :: EngineCoreEvent (a plain Struct: a map)."""

    type: EngineCoreEventType
    timestamp: float


@dataclass
class PrefillStats:
    """Mirrors vllm/v1/metrics/stats.py :: PrefillStats (a dataclass: a map of all 6 keys)."""

    num_prompt_tokens: int = 0
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_local_cached_tokens: int = 0
    num_external_cached_tokens: int = 0
    num_cache_creation_tokens: int = 0


@dataclass(frozen=True)
class RequestError:
    """Mirrors vllm/outputs.py :: RequestError (frozen dataclass: map of 3 keys)."""

    code: str
    message: str
    retryable: bool = False


class NdArray:
    """A numpy-free ndarray: what vLLM's MsgpackEncoder sees as ``np.ndarray``.

    ``dtype`` is numpy's ``dtype.str`` (``"<i4"``), ``data`` the raw C-order
    bytes. ``MsgpackEncoder.enc_hook`` turns it into the same triple that
    vllm/v1/serial_utils.py :: MsgpackEncoder._encode_ndarray emits.
    """

    __slots__ = ("dtype", "shape", "data")

    def __init__(self, dtype: str, shape: tuple[int, ...], data: bytes):
        self.dtype = dtype
        self.shape = shape
        self.data = data

    @classmethod
    def of(cls, typecode: str, dtype: str, shape: tuple[int, ...], values: list) -> "NdArray":
        """Packs ``values`` little-endian, whatever the host byte order."""
        arr = array.array(typecode, values)
        if sys.byteorder != "little":
            arr.byteswap()
        return cls(dtype, shape, arr.tobytes())


class LogprobsLists(NamedTuple):
    """Mirrors vllm/v1/outputs.py :: LogprobsLists (a NamedTuple: an array of 4).

    One request's slice, as ``LogprobsLists.slice_request`` leaves it:
    ``[num_positions, k+1]`` int32 ids and float32 logprobs, ``[num_positions]``
    int64 ranks, and ``cu_num_generated_tokens`` None.
    """

    logprob_token_ids: NdArray
    logprobs: NdArray
    sampled_token_ranks: NdArray
    cu_num_generated_tokens: list[int] | None = None


class EngineCoreOutput(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """Mirrors vllm/v1/engine/__init__.py :: EngineCoreOutput (19 fields, array_like).

    Tensor / ndarray / nested-Struct fields this stand-in never fills are ``Any``;
    they are always None here, which encodes the same whatever the type.
    """

    request_id: str
    new_token_ids: list[int]
    new_logprobs: LogprobsLists | None = None
    new_prompt_logprobs_tensors: Any = None
    pooling_output: Any = None
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None
    events: list[EngineCoreEvent] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    trace_headers: Mapping[str, str] | None = None
    prefill_stats: PrefillStats | None = None
    routed_experts: Any = None
    num_nans_in_logits: int = 0
    mm_cache_miss_hashes: list[str] | None = None
    new_sampling_mask: Any = None
    spec_decode_metrics: Any = None
    prompt_token_id_logprobs: Any = None
    error: RequestError | None = None

    @property
    def finished(self) -> bool:
        """Mirrors EngineCoreOutput.finished."""
        return self.finish_reason is not None


class UtilityResult:
    """Mirrors vllm/v1/serial_utils.py :: UtilityResult (encoded ``[type_info, value]``)."""

    def __init__(self, r: Any = None):
        self.result = r


class UtilityOutput(msgspec.Struct, array_like=True, gc=False):
    """Mirrors vllm/v1/engine/__init__.py :: UtilityOutput (no omit_defaults: all 3 fields)."""

    call_id: int
    failure_message: str | None = None
    result: UtilityResult | None = None


class EngineCoreOutputs(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """Mirrors vllm/v1/engine/__init__.py :: EngineCoreOutputs (9 fields, array_like).

    ``scheduler_stats`` is never filled by this stand-in, hence ``Any``.
    """

    engine_index: int = 0
    outputs: list[EngineCoreOutput] = []
    scheduler_stats: Any = None
    timestamp: float = 0.0
    utility_output: UtilityOutput | None = None
    finished_requests: set[str] | None = None
    wave_complete: int | None = None
    start_wave: int | None = None
    weight_version: str | None = None

    def __post_init__(self) -> None:
        """Mirrors EngineCoreOutputs.__post_init__: stamp the engine's monotonic clock."""
        if self.timestamp == 0.0:
            self.timestamp = time.monotonic()


# ---------------------------------------------------------------------------
# Mirrored handshake types
# ---------------------------------------------------------------------------


@dataclass
class EngineZmqAddresses:
    """Mirrors vllm/v1/engine/utils.py :: EngineZmqAddresses."""

    inputs: list[str]
    outputs: list[str]
    coordinator_input: str | None = None
    coordinator_output: str | None = None
    frontend_stats_publish_address: str | None = None


@dataclass
class EngineHandshakeMetadata:
    """Mirrors vllm/v1/engine/utils.py :: EngineHandshakeMetadata (the INIT message)."""

    addresses: EngineZmqAddresses
    parallel_config: dict[str, int | str | list[int]]


@dataclass
class EngineCoreReadyResponse:
    """Mirrors vllm/v1/engine/__init__.py :: EngineCoreReadyResponse.

    A dataclass, so it is sent as a map carrying every field, defaults included.
    ``kv_events_config`` is vLLM's KVEventsConfig; always None here.
    """

    max_model_len: int
    num_gpu_blocks: int
    block_size: int
    dp_stats_address: str | None
    dtype: str
    vllm_version: str
    world_size: int
    data_parallel_size: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    decode_context_parallel_size: int
    data_parallel_rank: int
    max_num_seqs: int
    max_num_batched_tokens: int
    instance_id: str
    supports_lora: bool
    max_loras: int
    mamba_block_size: int | None = None
    kv_cache_size_tokens: int | None = None
    kv_cache_max_concurrency: float | None = None
    kv_events_config: Any = None
    weight_transfer_backend: str | None = None
    enable_sleep_mode: bool = False
    supports_draft_weight_updates: bool = False
    effective_attention_block_size: int | None = None
    coord_store_port: int = 0
    coordinator_input_address: str | None = None
    coordinator_output_address: str | None = None


# ---------------------------------------------------------------------------
# Serialisation
# ---------------------------------------------------------------------------


class MsgpackEncoder:
    """Mirrors vllm/v1/serial_utils.py :: MsgpackEncoder (secure mode).

    ``encode`` returns ``[payload, aux_1, ...]``: ndarrays of at least
    ``VLLM_MSGPACK_ZERO_COPY_THRESHOLD`` bytes travel as extra frames and the
    payload holds their frame index; smaller ones are inlined as ext type 3.
    Not thread-safe (like vLLM's): only the output thread uses its instance.
    """

    def __init__(self, size_threshold: int = MSGPACK_ZERO_COPY_THRESHOLD):
        self.encoder = msgspec.msgpack.Encoder(enc_hook=self.enc_hook)
        self.aux_buffers: list[bytes] | None = None
        self.size_threshold = size_threshold

    def encode(self, obj: Any) -> list[bytes]:
        """Mirrors MsgpackEncoder.encode."""
        try:
            self.aux_buffers = bufs = [b""]
            bufs[0] = self.encoder.encode(obj)
            return bufs
        finally:
            self.aux_buffers = None

    def enc_hook(self, obj: Any) -> Any:
        """Mirrors MsgpackEncoder.enc_hook for the types this stand-in sends."""
        if isinstance(obj, NdArray):
            return self._encode_ndarray(obj)
        if isinstance(obj, UtilityResult):
            # type_info is None unless VLLM_ALLOW_INSECURE_SERIALIZATION.
            return None, obj.result
        raise TypeError(
            f"Object of type {type(obj)} is not serializable"
            "Set VLLM_ALLOW_INSECURE_SERIALIZATION=1 to allow "
            "fallback to pickle-based serialization."
        )

    def _encode_ndarray(self, obj: NdArray) -> tuple[str, tuple[int, ...], Any]:
        """Mirrors MsgpackEncoder._encode_ndarray: ``(dtype.str, shape, ext3 | index)``."""
        assert self.aux_buffers is not None
        if not obj.shape or len(obj.data) < self.size_threshold:
            data: Any = msgspec.msgpack.Ext(CUSTOM_TYPE_RAW_VIEW, obj.data)
        else:
            data = len(self.aux_buffers)
            self.aux_buffers.append(obj.data)
        return obj.dtype, obj.shape, data


def _ext_hook(code: int, data: memoryview) -> Any:
    """Mirrors vllm/v1/serial_utils.py :: MsgpackDecoder.ext_hook (secure mode).

    Copies the raw view: vLLM's zero-copy decode keeps the frame alive, which a
    stand-in does not need to replicate.
    """
    if code == CUSTOM_TYPE_RAW_VIEW:
        return bytes(data)
    raise NotImplementedError(f"Extension type code {code} is not supported")


def make_add_request_decoder() -> msgspec.msgpack.Decoder:
    """Mirrors ``MsgpackDecoder(EngineCoreRequest)`` in EngineCoreProc.process_input_sockets."""
    return msgspec.msgpack.Decoder(EngineCoreRequest, ext_hook=_ext_hook)


def make_generic_decoder() -> msgspec.msgpack.Decoder:
    """Mirrors the untyped ``MsgpackDecoder()`` used for ABORT / UTILITY / START_DP_WAVE."""
    return msgspec.msgpack.Decoder(ext_hook=_ext_hook)


def _zmq_socket_buffer_size() -> int:
    """Mirrors vllm/utils/network_utils.py :: _get_zmq_socket_buffer_size (from /proc/meminfo)."""
    try:
        info = {}
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
        if (
            info["MemTotal"] > _ZMQ_LARGE_BUFFER_MIN_TOTAL_MEMORY
            and info["MemAvailable"] > _ZMQ_LARGE_BUFFER_MIN_AVAILABLE_MEMORY
        ):
            return _ZMQ_LARGE_BUFFER_SIZE
    except (OSError, KeyError, ValueError, IndexError):
        pass
    return -1


def make_zmq_socket(
    ctx: zmq.Context,
    path: str,
    socket_type: int,
    bind: bool | None = None,
    identity: bytes | None = None,
    linger: int | None = None,
) -> zmq.Socket:
    """Mirrors vllm/utils/network_utils.py :: make_zmq_socket (HWMs, buffers, IPv6, bind rule)."""
    sock = ctx.socket(socket_type)
    buf_size = _zmq_socket_buffer_size()
    if bind is None:
        bind = socket_type not in (zmq.PUSH, zmq.SUB, zmq.XSUB)
    if socket_type in (zmq.PULL, zmq.DEALER, zmq.ROUTER):
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.RCVBUF, buf_size)
    if socket_type in (zmq.PUSH, zmq.DEALER, zmq.ROUTER):
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.SNDBUF, buf_size)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if linger is not None:
        sock.setsockopt(zmq.LINGER, linger)
    if socket_type == zmq.XPUB:
        sock.setsockopt(zmq.XPUB_VERBOSE, True)
    if path.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    if bind:
        sock.bind(path)
    else:
        sock.connect(path)
    return sock


# ---------------------------------------------------------------------------
# Event lines on stdout
# ---------------------------------------------------------------------------

_print_lock = threading.Lock()
_WS = re.compile(r"\s")


def _fmt(value: Any) -> str:
    """One event value: no spaces, lists comma-joined, None as ``none``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(_fmt(v) for v in value)
    if isinstance(value, enum.Enum):
        return _fmt(value.value)
    return _WS.sub("_", str(value))


def event(word: str, **kv: Any) -> None:
    """Prints ``word key=value ...`` on stdout, flushed, whole lines only."""
    line = " ".join([word] + [f"{k}={_fmt(v)}" for k, v in kv.items()])
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def log(msg: str) -> None:
    """Diagnostics for humans, on stderr."""
    with _print_lock:
        sys.stderr.write(f"zmq_engine: {msg}\n")
        sys.stderr.flush()


# ---------------------------------------------------------------------------
# Stop checks
# ---------------------------------------------------------------------------


def check_sequence_repetition(token_ids: list[int], params: RepetitionDetectionParams) -> bool:
    """Mirrors vllm/v1/core/sched/utils.py :: check_sequence_repetition."""
    max_pattern_size = params.max_pattern_size
    min_pattern_size = params.min_pattern_size or 1
    min_count = params.min_count
    if max_pattern_size <= 0 or min_count < 2 or min_pattern_size > max_pattern_size:
        return False
    for pattern_len in range(min_pattern_size, max_pattern_size + 1):
        if pattern_len * min_count > len(token_ids):
            return False
        if all(
            token_ids[-(pattern_len * m + n)] == token_ids[-n]
            for n in range(1, pattern_len + 1)
            for m in range(1, min_count)
        ):
            return True
    return False


class Request:
    """The busy loop's per-request state (a small slice of vllm/v1/request.py :: Request)."""

    def __init__(self, ecr: EngineCoreRequest, log_stats: bool):
        sp = ecr.sampling_params
        assert sp is not None and sp.max_tokens is not None
        self.request_id = ecr.request_id
        self.prompt_token_ids: list[int] = list(ecr.prompt_token_ids or [])
        self.sampling_params = sp
        self.max_tokens = sp.max_tokens
        self.client_index = ecr.client_index
        self.trace_headers = ecr.trace_headers
        self.resumable = ecr.resumable
        self.output_token_ids: list[int] = []
        self.stop_reason: int | str | None = None
        self.finish_reason: FinishReason | None = None
        self.events: list[EngineCoreEvent] | None = [] if log_stats else None
        self.prefill_stats: PrefillStats | None = None
        self.prefilled = False
        self.hung = False
        self.stream: LlamaStream | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    def record_event(self, kind: EngineCoreEventType) -> None:
        """Mirrors Request.record_event (only when the engine logs stats)."""
        if self.events is not None:
            self.events.append(EngineCoreEvent(kind, time.monotonic()))

    def take_events(self) -> list[EngineCoreEvent] | None:
        """Mirrors Request.take_events."""
        if not self.events:
            return None
        events, self.events = self.events, []
        return events

    def take_prefill_stats(self) -> PrefillStats | None:
        """Mirrors Request.take_prefill_stats."""
        stats, self.prefill_stats = self.prefill_stats, None
        return stats


def check_stop(request: Request, max_model_len: int) -> bool:
    """Mirrors vllm/v1/core/sched/utils.py :: check_stop, in its order.

    EOS first (only when ``_eos_token_id`` is set: ignore_eos leaves it None),
    then ``stop_token_ids`` (stop_reason = the id), then length (max_model_len
    or max_tokens), then min_tokens gates repetition detection. min_tokens
    does not gate EOS/stop ids here: in vLLM the sampler masks
    ``_all_stop_token_ids`` before they can be sampled (see ``_mock_token``).
    """
    sp = request.sampling_params
    last_token_id = request.output_token_ids[-1]
    if last_token_id == sp.eos_token_id:
        request.finish_reason = FinishReason.STOP
        return True
    if last_token_id in (sp.stop_token_ids or ()):
        request.finish_reason = FinishReason.STOP
        request.stop_reason = last_token_id
        return True
    if request.num_tokens >= max_model_len or request.num_output_tokens >= request.max_tokens:
        request.finish_reason = FinishReason.LENGTH
        return True
    if request.num_output_tokens < sp.min_tokens:
        return False
    if sp.repetition_detection is not None and check_sequence_repetition(
        request.output_token_ids, sp.repetition_detection
    ):
        request.finish_reason = FinishReason.REPETITION
        request.stop_reason = "repetition_detected"
        return True
    return False


# ---------------------------------------------------------------------------
# llama-server upstream (llama mode)
# ---------------------------------------------------------------------------

# Input-queue item type for token chunks coming back from llama-server threads.
LLAMA_CHUNK = "llama-chunk"


class LlamaStream(threading.Thread):
    """Streams one request from llama-server's ``POST /completion``.

    Each SSE ``data:`` chunk goes to the busy loop's input queue as
    ``(LLAMA_CHUNK, (request_id, gen, token_ids, probs, stop_type, error))``,
    so request state and the output socket keep a single owner (the busy
    loop and the output thread), as in vLLM.
    """

    def __init__(self, engine: "EngineCoreProc", req: Request, gen: int):
        super().__init__(daemon=True, name=f"llama-{req.request_id}")
        self.engine = engine
        self.req_id = req.request_id
        self.gen = gen
        self.payload = engine.llama_payload(req)
        self.cancelled = False
        self.conn: http.client.HTTPConnection | None = None

    def _put(self, tokens: list[int], probs: Any, stop_type: str | None, error: str | None) -> None:
        self.engine.input_queue.put_nowait(
            (LLAMA_CHUNK, (self.req_id, self.gen, tokens, probs, stop_type, error))
        )

    def run(self) -> None:
        try:
            url = self.engine.llama_url
            self.conn = http.client.HTTPConnection(url.hostname, url.port or 80)
            self.conn.request(
                "POST",
                url.path.rstrip("/") + "/completion",
                body=json.dumps(self.payload),
                headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
            )
            if self.cancelled:
                return
            resp = self.conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"llama-server HTTP {resp.status}: {resp.read(300)!r}")
            for raw in resp:
                if self.cancelled:
                    return
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                chunk = json.loads(line[5:])
                if "error" in chunk:
                    raise RuntimeError(f"llama-server error: {chunk['error']}")
                tokens = chunk.get("tokens")
                if tokens is None:
                    raise RuntimeError(
                        "llama-server chunk carries no 'tokens' (needs return_tokens support)"
                    )
                stop_type = chunk.get("stop_type") or "none" if chunk.get("stop") else None
                self._put(list(tokens), chunk.get("completion_probabilities"), stop_type, None)
                if stop_type is not None:
                    return
            raise RuntimeError("llama-server stream ended without a stop chunk")
        except Exception as e:  # noqa: BLE001 - any upstream failure ends the request
            if not self.cancelled:
                self._put([], None, None, f"{type(e).__name__}: {e}")
        finally:
            if self.conn is not None:
                self.conn.close()

    def cancel(self) -> None:
        """Drops the upstream HTTP request: llama-server stops generating when the socket closes."""
        self.cancelled = True
        conn = self.conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def llama_props_n_ctx(url: urllib.parse.ParseResult, wait_s: float) -> int | None:
    """``GET /props`` → ``default_generation_settings.n_ctx``, retried while llama-server loads."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=10)
            conn.request("GET", url.path.rstrip("/") + "/props")
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            if resp.status == 200:
                n_ctx = json.loads(body).get("default_generation_settings", {}).get("n_ctx")
                return int(n_ctx) if n_ctx else None
            err = f"HTTP {resp.status}"
        except (OSError, http.client.HTTPException, ValueError) as e:
            err = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise RuntimeError(f"llama-server /props not ready after {wait_s}s: {err}")
        time.sleep(0.5)


# ---------------------------------------------------------------------------
# The engine core
# ---------------------------------------------------------------------------


# One position's logprobs: (top-k ids, top-k logprobs, rank of the sampled
# id, logprob of the sampled id).
LogprobRow = tuple[list[int], list[float], int, float]


class PendingOutput:
    """One request's EngineCoreOutput while a step is being assembled.

    The busy loop may fold several llama-server chunks into one step, so the
    Struct is built only when the step is flushed.
    """

    def __init__(self, req: Request):
        self.req = req
        self.token_ids: list[int] = []
        self.logprob_rows: list[LogprobRow] = []
        # Taken now: the first output after the prefill carries them.
        self.prefill_stats = req.take_prefill_stats()
        self.events = req.take_events()

    def build(self) -> EngineCoreOutput:
        """Mirrors the EngineCoreOutput(...) call in Scheduler.update_from_output."""
        req = self.req
        return EngineCoreOutput(
            request_id=req.request_id,
            new_token_ids=self.token_ids,
            finish_reason=req.finish_reason,
            new_logprobs=self._logprobs(),
            stop_reason=req.stop_reason,
            events=self.events,
            prefill_stats=self.prefill_stats,
            trace_headers=req.trace_headers,
            num_nans_in_logits=0,
        )

    def _logprobs(self) -> LogprobsLists | None:
        """Mirrors LogprobsTensors.tolists + LogprobsLists.slice_request for this request.

        Column 0 is the sampled token, then the top-k. Rows are padded to one
        width (id 0, logprob -inf) where llama-server returned fewer than k.
        """
        if self.req.sampling_params.num_logprobs is None or not self.token_ids:
            return None
        ids_rows: list[list[int]] = []
        lp_rows: list[list[float]] = []
        ranks: list[int] = []
        for tok, (top_ids, top_lps, rank, sampled_lp) in zip(self.token_ids, self.logprob_rows, strict=True):
            ids_rows.append([tok] + top_ids)
            lp_rows.append([sampled_lp] + top_lps)
            ranks.append(rank)
        width = max(len(r) for r in ids_rows)
        for r in ids_rows:
            r.extend([0] * (width - len(r)))
        for r in lp_rows:
            r.extend([float("-inf")] * (width - len(r)))
        n = len(ids_rows)
        return LogprobsLists(
            NdArray.of("i", "<i4", (n, width), [v for r in ids_rows for v in r]),
            NdArray.of("f", "<f4", (n, width), [v for r in lp_rows for v in r]),
            NdArray.of("q", "<i8", (n,), ranks),
            None,
        )


class EngineDead(Exception):
    """A fatal busy-loop error: ends in ENGINE_CORE_DEAD, as in run_engine_core."""


# Output-queue marker: the output thread exits the process once everything
# before it is on the wire (the exit-after fault).
_EXIT_NOW = object()
# Output-queue marker: flush, close, end the thread (SIGTERM).
_SHUTDOWN = object()
# On SIGTERM the output sockets get this much time to deliver the ABORT
# outputs; the input sockets close with linger 0.
SHUTDOWN_LINGER_MS = 500


class EngineCoreProc:
    """Mirrors vllm/v1/engine/core.py :: EngineCoreProc for one independent (non-MoE) DP rank.

    The class keeps vLLM's name on purpose: a utility call to an unknown
    method fails with vLLM's exact message, ``'EngineCoreProc' object has no
    attribute 'X'``. As in vLLM, any public method is callable as a utility.
    """

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.engine_index: int = args.rank
        self.identity = self.engine_index.to_bytes(length=2, byteorder="little")
        self.input_queue: queue.Queue = queue.Queue()
        self.output_queue: queue.Queue = queue.Queue()
        self.max_model_len: int = args.max_model_len
        self.faults = parse_faults(args.fault)
        self.log_stats: bool = args.log_stats
        self.llama_url = urllib.parse.urlparse(args.llama_url) if args.mode == "llama" else None
        self._weight_version = "default"
        # Busy-loop state (only the main thread touches these).
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: dict[str, Request] = {}
        self.steps = 0
        self.gen = 0
        self.pending: dict[str, PendingOutput] = {}
        self.shutdown_requested = False
        self.input_ctx: zmq.Context | None = None
        self.output_thread: threading.Thread | None = None

    # -- startup -----------------------------------------------------------

    def run(self) -> None:
        """Mirrors EngineCoreProc.__init__ + run_engine_core: handshake, threads, busy loop."""
        args = self.args
        hs_ctx = zmq.Context()
        handshake = make_zmq_socket(
            hs_ctx, args.handshake, zmq.DEALER, identity=self.identity, linger=5000, bind=False
        )
        addresses = self.startup_handshake(handshake)
        self._hold_if_no_registration()
        if args.load_ms > 0:
            time.sleep(args.load_ms / 1000.0)
        if self.llama_url is not None:
            n_ctx = llama_props_n_ctx(self.llama_url, args.llama_wait_s)
            if n_ctx:
                self.max_model_len = n_ctx
        self.addresses = addresses

        ready_event = threading.Event()
        input_thread = threading.Thread(
            target=self.process_input_sockets,
            args=(addresses.inputs, addresses.coordinator_input, ready_event),
            daemon=True,
            name="input",
        )
        input_thread.start()
        self.output_thread = threading.Thread(
            target=self.process_output_sockets,
            args=(addresses.outputs, addresses.coordinator_output),
            daemon=True,
            name="output",
        )
        self.output_thread.start()
        while not ready_event.wait(timeout=10):
            if not input_thread.is_alive():
                raise RuntimeError("Input socket thread died during startup")
            log("Waiting for READY message from DP Coordinator...")

        # _perform_handshake: READY goes out when the handshake context exits.
        ready_msg: dict[str, Any] = {"status": "READY", "local": False, "headless": True}
        if args.parallel_config_hash:
            ready_msg["parallel_config_hash"] = args.parallel_config_hash
        handshake.send(msgspec.msgpack.encode(ready_msg))
        handshake.close()
        hs_ctx.term()
        event("ready", rank=self.engine_index)
        self._serve()

    def _hold_if_no_registration(self) -> None:
        """The no-registration fault: stop before registering, until SIGTERM ends the process."""
        if self.faults.no_registration:
            log("fault no-registration: never registering")
            threading.Event().wait()  # until SIGTERM ends the process

    def _serve(self) -> None:
        """Runs the busy loop until a fatal error, then dies (run_engine_core / run_event_loop)."""
        global _running_engine
        _running_engine = self
        try:
            self.run_busy_loop()
        except EngineDead as e:
            self._die(str(e))
        except Exception as e:  # noqa: BLE001 - mirrors run_engine_core's (run_event_loop's) catch-all
            traceback.print_exc()
            self._die(f"{type(e).__name__}:{e}")

    def _print_init(self, init: Any) -> None:
        """The ``init`` event line, from an INIT message's addresses (vLLM's or TokenSpeed's)."""
        addrs = init.addresses
        event(
            "init",
            rank=self.engine_index,
            inputs=addrs.inputs,
            outputs=addrs.outputs,
            coordinator_input=addrs.coordinator_input,
            coordinator_output=addrs.coordinator_output,
            parallel_config=sorted(init.parallel_config),
        )

    def startup_handshake(self, handshake: zmq.Socket) -> EngineZmqAddresses:
        """Mirrors EngineCoreProc.startup_handshake: HELLO out, INIT in (≤5 minutes)."""
        handshake.send(msgspec.msgpack.encode({"status": "HELLO", "local": False, "headless": True}))
        event("hello", rank=self.engine_index, dp_size=self.args.dp_size)
        if not handshake.poll(timeout=HANDSHAKE_TIMEOUT_MINS * 60_000):
            raise RuntimeError(
                f"Did not receive response from front-end process within {HANDSHAKE_TIMEOUT_MINS} minutes"
            )
        init = msgspec.msgpack.decode(handshake.recv(), type=EngineHandshakeMetadata)
        self._print_init(init)
        return init.addresses

    def _make_ready_response(self) -> EngineCoreReadyResponse:
        """Mirrors EngineCoreProc._make_ready_response for an independent DP rank.

        ``reconfigure_for_independent_dp_rank`` has already set
        ``data_parallel_size`` to 1, but ``data_parallel_rank`` is the engine
        index (the real rank).
        """
        a = self.args
        kv_tokens = a.num_gpu_blocks * a.block_size
        return EngineCoreReadyResponse(
            max_model_len=self.max_model_len,
            num_gpu_blocks=a.num_gpu_blocks,
            block_size=a.block_size,
            mamba_block_size=None,
            effective_attention_block_size=a.block_size,
            dp_stats_address=self.addresses.frontend_stats_publish_address,
            dtype="bfloat16",
            vllm_version=VLLM_VERSION,
            world_size=1,
            data_parallel_size=1,
            kv_cache_size_tokens=kv_tokens,
            kv_cache_max_concurrency=kv_tokens / self.max_model_len,
            tensor_parallel_size=1,
            pipeline_parallel_size=1,
            decode_context_parallel_size=1,
            data_parallel_rank=self.engine_index,
            max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=a.max_num_batched_tokens,
            instance_id=a.instance_id,
            supports_lora=False,
            max_loras=0,
            kv_events_config=None,
            weight_transfer_backend=None,
            enable_sleep_mode=False,
            supports_draft_weight_updates=False,
            coord_store_port=0,
            coordinator_input_address=self.addresses.coordinator_input,
            coordinator_output_address=self.addresses.coordinator_output,
        )

    # -- input thread ------------------------------------------------------

    def process_input_sockets(
        self, input_addresses: list[str], coord_input_address: str | None, ready_event: threading.Event
    ) -> None:
        """Mirrors EngineCoreProc.process_input_sockets.

        Registration (EngineCoreReadyResponse) goes out on every input DEALER
        first: the front-end ROUTER learns this engine's identity from it.
        As in vLLM, decoding sits outside any ``try``, so a malformed frame or
        a SamplingParams value out of range kills this thread; the engine
        lives on without reading input (brief §3.1). That death is reported
        as an ``input-thread-died`` event line.
        """
        add_request_decoder = make_add_request_decoder()
        generic_decoder = make_generic_decoder()
        ctx = self.input_ctx = zmq.Context()
        sockets: list[zmq.Socket] = []
        try:
            sockets = [
                make_zmq_socket(ctx, addr, zmq.DEALER, identity=self.identity, bind=False)
                for addr in input_addresses
            ]
            coord_socket = None
            if coord_input_address is not None:
                coord_socket = make_zmq_socket(
                    ctx, coord_input_address, zmq.XSUB, identity=self.identity, bind=False
                )
                sockets.append(coord_socket)
                coord_socket.send(b"\x01")  # subscribe to everything
            poller = zmq.Poller()
            ready_payload = msgspec.msgpack.encode(self._make_ready_response())
            for sock in sockets:
                if sock is coord_socket:
                    continue
                sock.send(ready_payload)
                poller.register(sock, zmq.POLLIN)
            event("registered", rank=self.engine_index)
            if coord_socket is not None:
                assert coord_socket.recv() == b"READY"
                poller.register(coord_socket, zmq.POLLIN)
            ready_event.set()
            del ready_event

            while True:
                for sock, _ in poller.poll():
                    type_frame, *data_frames = sock.recv_multipart(copy=True)
                    if type_frame == b"READY":
                        # A coordinator re-announcing itself; ignored as in vLLM.
                        assert sock is coord_socket
                        continue
                    request_type = EngineCoreRequestType(bytes(type_frame))
                    if request_type == EngineCoreRequestType.ADD:
                        req: EngineCoreRequest = add_request_decoder.decode(data_frames[0])
                        self._print_add(req)
                        if not self.preprocess_add_request(req):
                            continue
                        request: Any = req
                    elif request_type == EngineCoreRequestType.UTILITY:
                        request = generic_decoder.decode(data_frames[0])
                        client_idx, call_id, method, args = request
                        event("utility", rank=self.engine_index, method=method, call_id=call_id)
                    else:
                        request = generic_decoder.decode(data_frames[0])
                        if request_type == EngineCoreRequestType.ABORT:
                            event("abort", rank=self.engine_index, ids=request)
                        elif request_type == EngineCoreRequestType.START_DP_WAVE:
                            wave, exclude = request
                            event("start-dp-wave", rank=self.engine_index, wave=wave, exclude=exclude)
                    self.input_queue.put_nowait((request_type, request))
        except zmq.ContextTerminated:
            pass  # shutdown: the busy loop terminated this thread's context
        except BaseException as e:  # noqa: BLE001 - report, then die like vLLM's thread
            self._report_thread_death("input", e)
        finally:
            for sock in sockets:
                sock.close(linger=0)

    def _print_add(self, req: EngineCoreRequest) -> None:
        """The ``add`` event line: what arrived, before any check."""
        sp = req.sampling_params
        event(
            "add",
            rank=self.engine_index,
            id=req.request_id,
            prompt=req.prompt_token_ids,
            max_tokens=sp.max_tokens if sp else None,
            temperature=sp.temperature if sp else None,
            top_p=sp.top_p if sp else None,
            top_k=sp.top_k if sp else None,
            seed=sp.seed if sp else None,
            min_tokens=sp.min_tokens if sp else None,
            eos=sp._eos_token_id if sp else None,
            stop_token_ids=sp.stop_token_ids if sp else None,
            n=sp.n if sp else None,
            logprobs=sp.logprobs if sp else None,
            wave=req.current_wave,
            client_index=req.client_index,
        )

    def preprocess_add_request(self, req: EngineCoreRequest) -> bool:
        """Mirrors the ``try`` around EngineCore.preprocess_add_request in the input thread.

        Request-scoped failures become one ERROR output straight from the
        input thread (``_handle_request_validation_error`` /
        ``_handle_request_preproc_error``); the busy loop never sees them.
        Returns False when the request was answered that way.
        """
        hit = self._error_on_prompt_hit(req.prompt_token_ids)
        if hit is not None:
            error = RequestError(
                code="validation_error",
                message=f"Token id {hit} is not allowed in the prompt (fault error-on-prompt).",
            )
            self._send_finish_outputs_to_client([req.request_id], req.client_index, FinishReason.ERROR, error)
            return False
        sp = req.sampling_params
        if sp is None or sp.max_tokens is None or not req.prompt_token_ids:
            # Request.__init__ asserts max_tokens; this stand-in also cannot run
            # pooling-only or embeddings-only requests (approximation).
            self._send_finish_outputs_to_client([req.request_id], req.client_index, FinishReason.ERROR)
            return False
        return True

    def _error_on_prompt_hit(self, prompt: list[int] | None) -> int | None:
        """The error-on-prompt fault: the smallest listed id in the prompt, or None."""
        bad = self.faults.error_on_prompt
        if bad and prompt and bad.intersection(prompt):
            return sorted(bad.intersection(prompt))[0]
        return None

    def _send_finish_outputs_to_client(
        self,
        req_ids: list[str],
        client_index: int,
        finish_reason: FinishReason,
        error: RequestError | None = None,
    ) -> None:
        """Mirrors EngineCoreProc._send_finish_outputs_to_client (error / abort-by-engine outputs)."""
        outputs = [EngineCoreOutput(rid, [], finish_reason=finish_reason, error=error) for rid in req_ids]
        self.output_queue.put_nowait(
            (client_index, EngineCoreOutputs(finished_requests=req_ids, outputs=outputs))
        )
        for rid in req_ids:
            self._print_finish(rid, str(finish_reason))

    def _print_finish(self, rid: str, reason: str, tokens: int = 0, stop_reason: Any = None) -> None:
        """The ``finish`` event line."""
        event("finish", rank=self.engine_index, id=rid, reason=reason, tokens=tokens, stop_reason=stop_reason)

    # -- output thread -----------------------------------------------------

    def process_output_sockets(self, output_paths: list[str], coord_output_path: str | None) -> None:
        """Mirrors EngineCoreProc.process_output_sockets.

        PUSH sockets with ``linger=4000``, so ENGINE_CORE_DEAD (sent as one
        frame on every client socket) is flushed before the process exits.
        ``engine_index`` is stamped here, as in vLLM.
        """
        encoder = MsgpackEncoder()
        ctx = zmq.Context()
        sockets = [make_zmq_socket(ctx, p, zmq.PUSH, linger=4000) for p in output_paths]
        coord_socket = (
            make_zmq_socket(ctx, coord_output_path, zmq.PUSH, bind=False, linger=4000)
            if coord_output_path is not None
            else None
        )
        all_sockets = sockets + ([coord_socket] if coord_socket is not None else [])

        def send_dead() -> None:
            for sock in sockets:
                sock.send(ENGINE_CORE_DEAD)

        def send(output: Any) -> None:
            client_index, outputs = output
            outputs.engine_index = self.engine_index
            bufs = encoder.encode(outputs)
            if client_index == -1:
                assert coord_socket is not None
                coord_socket.send_multipart(bufs)
                return
            sockets[client_index].send_multipart(bufs, copy=False)

        # linger None: keep each socket's own (4000 ms).
        self._output_loop(ctx, all_sockets, send, send_dead, linger=None, shutdown_linger=SHUTDOWN_LINGER_MS)

    def _output_loop(
        self,
        ctx: zmq.Context,
        sockets: list[zmq.Socket],
        send: Any,
        send_dead: Any,
        linger: int | None,
        shutdown_linger: int | None,
    ) -> None:
        """The output thread's plumbing: sends queued items until a marker, then closes and flushes.

        ``_EXIT_NOW`` (exit-after) closes with a 2 s linger and exits 1;
        ``_SHUTDOWN`` closes with ``shutdown_linger``; ENGINE_CORE_DEAD goes
        out through ``send_dead``; anything else through ``send``.
        """
        exit_code: int | None = None
        try:
            while True:
                item = self.output_queue.get()
                if item is _EXIT_NOW:
                    linger, exit_code = 2000, 1
                    break
                if item is _SHUTDOWN:
                    linger = shutdown_linger
                    break
                if item == ENGINE_CORE_DEAD:
                    send_dead()
                    break
                send(item)
        except BaseException as e:  # noqa: BLE001 - report, then die like vLLM's thread
            self._report_thread_death("output", e)
        finally:
            # Closing with a linger and terminating the context flushes what
            # is queued (bounded by the linger) before the thread ends.
            for sock in sockets:
                sock.close(linger=linger)
            ctx.term()
        if exit_code is not None:
            self._exit_now(exit_code)

    def _report_thread_death(self, thread: str, e: BaseException) -> None:
        """The ``input-thread-died`` / ``output-thread-died`` event line, and the traceback on stderr."""
        event(f"{thread}-thread-died", rank=self.engine_index, error=f"{type(e).__name__}:{e}")
        log(f"{thread} thread died:\n" + traceback.format_exc())

    def _exit_now(self, exit_code: int) -> NoReturn:
        """The exit-after fault, from the output thread once its sockets are closed.

        Everything before the marker is on the wire; now vanish as SIGKILL /
        OOM would, with no sentinel.
        """
        event("exit", rank=self.engine_index, code=exit_code)
        os._exit(exit_code)

    # -- busy loop ---------------------------------------------------------

    def run_busy_loop(self) -> None:
        """Mirrors EngineCoreProc.run_busy_loop: wait for input, then step.

        Mock mode steps on its own clock while requests run; llama mode turns
        whatever token chunks have arrived into one step. With nothing to
        step, the loop blocks on the input queue (no spinning).
        """
        while True:
            if self.shutdown_requested:
                self._handle_shutdown()
            self._schedule()
            if self.args.mode == "mock" and self._mock_members():
                self._mock_step()
                continue
            self._handle_client_request(*self.input_queue.get())
            self._drain_input_queue()
            self._flush_step()

    def _drain_input_queue(self) -> None:
        """Mirrors the tail of EngineCoreProc._process_input_queue: handle all queued input."""
        while True:
            try:
                item = self.input_queue.get_nowait()
            except queue.Empty:
                return
            self._handle_client_request(*item)

    def _handle_client_request(self, request_type: Any, request: Any) -> None:
        """Mirrors EngineCoreProc._handle_client_request (+ token chunks from llama-server)."""
        if request_type == EngineCoreRequestType.WAKEUP:
            return
        if request_type == EngineCoreRequestType.ADD:
            self.add_request(request)
        elif request_type == EngineCoreRequestType.ABORT:
            self.abort_requests(request)
        elif request_type == EngineCoreRequestType.UTILITY:
            client_idx, call_id, method_name, args = request
            output = UtilityOutput(call_id)
            try:
                method = getattr(self, method_name)
                output.result = UtilityResult(method(*args))
            except Exception as e:  # noqa: BLE001 - mirrors _invoke_utility_method
                output.failure_message = f"Call to {method_name} method failed: {str(e)}"
            self.output_queue.put_nowait((client_idx, EngineCoreOutputs(utility_output=output)))
        elif request_type == LLAMA_CHUNK:
            self._on_llama_chunk(*request)
        elif request_type == EngineCoreRequestType.EXECUTOR_FAILED:
            # Engine-internal type; a front-end that sends b"\x04" kills the engine.
            raise RuntimeError("Executor failed.")
        else:
            # START_DP_WAVE reaches a non-DP EngineCoreProc here and is only logged.
            log(f"Unrecognized input request type encountered: {request_type}")

    def add_request(self, ecr: EngineCoreRequest) -> None:
        """Mirrors EngineCore.add_request → Scheduler.add_request.

        A duplicate id of a live non-resumable request trips the scheduler's
        ``assert ... "duplicate request id"`` inside the busy loop, which is
        fatal in vLLM (ENGINE_CORE_DEAD). Out-of-vocabulary prompt ids are
        also fatal here: on a GPU they fault in the embedding lookup (exactly
        how vLLM 0.33 dies on that is unverified). Pooling requests would be
        rejected with "Unsupported task" in the busy loop, also fatal.
        """
        if ecr.pooling_params is not None:
            raise EngineDead("unsupported-task")
        existing = self.requests.get(ecr.request_id)
        if existing is not None:
            if not existing.resumable:
                self._fatal("duplicate-request-id", ecr.request_id)
            log(f"streaming-input update for {ecr.request_id} ignored (not emulated)")
            return
        self._check_prompt_in_vocab(ecr.request_id, ecr.prompt_token_ids or ())
        req = Request(ecr, self.log_stats)
        self.requests[req.request_id] = req
        self.waiting.append(req)
        req.record_event(EngineCoreEventType.QUEUED)
        if ecr.abort_immediately:
            self.abort_requests([req.request_id])

    def _fatal(self, error: str, rid: str) -> NoReturn:
        """A fatal check in the busy loop: the ``fatal`` event line, then the engine dies."""
        event("fatal", rank=self.engine_index, error=error, id=rid)
        raise EngineDead(error)

    def _check_prompt_in_vocab(self, rid: str, prompt: Any) -> None:
        """Out-of-vocabulary prompt ids are fatal (by emulation: unverified on a GPU)."""
        vocab = self.args.vocab_size
        if any(not 0 <= t < vocab for t in prompt):
            self._fatal("out-of-vocab-prompt-id", rid)

    def abort_requests(self, request_ids: list[str]) -> None:
        """Mirrors EngineCore.abort_requests: drop the requests, send nothing (idempotent)."""
        for rid in request_ids:
            req = self.requests.pop(rid, None)
            if req is None:
                continue
            self._unschedule(req)
            self.pending.pop(rid, None)
            if req.stream is not None:
                req.stream.cancel()

    def _unschedule(self, req: Any) -> None:
        """Takes a request out of ``running`` / ``waiting``, wherever it is."""
        self.running.pop(req.request_id, None)
        try:
            self.waiting.remove(req)
        except ValueError:
            pass

    def _admit_fifo(self) -> Iterator[Any]:
        """Moves waiting requests to ``running`` FIFO up to ``--max-num-seqs``, yielding each."""
        while self.waiting and len(self.running) < self.args.max_num_seqs:
            req = self.waiting.popleft()
            self.running[req.request_id] = req
            yield req

    def _schedule(self) -> None:
        """Admits waiting requests FIFO up to ``--max-num-seqs`` (no KV-block accounting)."""
        for req in self._admit_fifo():
            req.record_event(EngineCoreEventType.SCHEDULED)
            # Mirrors PrefillStats.set + finalize for a prefill with no cache hit:
            # the full blocks of the prompt are what the prefill writes to cache.
            n = len(req.prompt_token_ids)
            bs = self.args.block_size
            req.prefill_stats = PrefillStats(
                num_prompt_tokens=n,
                num_computed_tokens=n,
                num_cache_creation_tokens=(n // bs) * bs,
            )
            if self.llama_url is not None:
                self.gen += 1
                req.stream = LlamaStream(self, req, self.gen)
                req.stream.start()

    # -- mock generation ---------------------------------------------------

    def _mock_members(self) -> list[Request]:
        return [r for r in self.running.values() if not r.hung]

    def _mock_step(self) -> None:
        """One scheduler step of the mock model.

        The step lasts ``--ttft-ms`` when it holds a request's prefill and
        ``--token-ms`` otherwise (a prefill stalls the whole batch, as on a
        real engine). Input keeps being handled while the step "runs", so an
        ABORT takes effect at once; a request added meanwhile joins the next step.
        """
        members = self._mock_members()
        delay_ms = self.args.ttft_ms if any(not r.prefilled for r in members) else self.args.token_ms
        deadline = time.monotonic() + delay_ms / 1000.0
        self._drain_input_queue()
        while not self.shutdown_requested and (left := deadline - time.monotonic()) > 0:
            try:
                item = self.input_queue.get(timeout=left)
            except queue.Empty:
                break
            self._handle_client_request(*item)
        if self.shutdown_requested:
            return
        for req in members:
            if self.running.get(req.request_id) is req:
                self._append_tokens(req, [self._mock_token(req)], None)
        self._flush_step()

    def _mock_token(self, req: Request) -> int:
        """The mock "sampler": echo the prompt, cycling, one id per step.

        ``trace_decode_token_ids`` (vLLM's forced-decode field) is honoured
        first. While ``num_output_tokens < min_tokens`` the ids in
        ``_all_stop_token_ids`` are masked, as vLLM's min-tokens logits
        processor does; a masked id is skipped for the next prompt id.
        """
        sp = req.sampling_params
        pos = req.num_output_tokens
        forced = sp.trace_decode_token_ids
        if forced and pos < len(forced):
            return forced[pos]
        masked = sp.all_stop_token_ids if pos < sp.min_tokens else ()
        if self.args.skip_ids:
            masked = set(masked) | self.args.skip_ids
        prompt = req.prompt_token_ids
        for j in range(len(prompt)):
            tok = prompt[(pos + j) % len(prompt)]
            if tok not in masked:
                return tok
        tok = 0
        while tok in masked:
            tok += 1
        return tok

    def _mock_logprobs(self, req: Request, token: int) -> LogprobRow:
        """Deterministic fake logprobs: the sampled id is rank 1 at -0.125.

        The top-k are ``token, token+1, ...`` (mod vocab) at -0.125, -1.125,
        ... or, with ``logprob_token_ids``, those ids at -1, -2, ...
        """
        sp = req.sampling_params
        k = sp.num_logprobs
        vocab = self.args.vocab_size
        if k == -1:
            k = vocab
        if sp.logprob_token_ids:
            top = list(sp.logprob_token_ids)[:k]
            lps = [-1.0 - i for i in range(len(top))]
        else:
            top = [(token + i) % vocab for i in range(k)]
            lps = [-0.125 - i for i in range(len(top))]
        return top, lps, 1, -0.125

    # -- llama generation --------------------------------------------------

    def llama_payload(self, req: Request) -> dict[str, Any]:
        """The llama-server ``/completion`` body for one request."""
        sp = req.sampling_params
        body: dict[str, Any] = {
            "prompt": req.prompt_token_ids,
            "n_predict": req.max_tokens,
            "stream": True,
            "return_tokens": True,
            "cache_prompt": True,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "top_k": sp.top_k,
            "min_p": sp.min_p,
            "repeat_penalty": sp.repetition_penalty,
            "presence_penalty": sp.presence_penalty,
            "frequency_penalty": sp.frequency_penalty,
            # vLLM stops on EOS only when _eos_token_id is set (ignore_eos leaves it None).
            "ignore_eos": sp.eos_token_id is None,
        }
        if sp.seed is not None:
            body["seed"] = sp.seed
        if sp.logit_bias:
            body["logit_bias"] = [[int(t), float(b)] for t, b in sp.logit_bias.items()]
        k = sp.num_logprobs
        if k is not None:
            body["n_probs"] = max(1, self.args.vocab_size if k == -1 else k)
        return body

    def _on_llama_chunk(
        self, rid: str, gen: int, tokens: list[int], probs: Any, stop_type: str | None, error: str | None
    ) -> None:
        """Folds one llama-server chunk into this step's output for its request.

        Stop checks run here, per token (so stop_token_ids end the request
        with stop_reason = the id and cancel the upstream request). A final
        ``stop_type`` the checks did not already see ends it too: "eos" →
        STOP with the EOS id appended if llama-server left it out (vLLM
        includes EOS in new_token_ids), "limit" → LENGTH, an upstream error →
        ERROR.
        """
        req = self.running.get(rid)
        if req is None or req.stream is None or req.stream.gen != gen or req.hung:
            return  # aborted, finished, or a stale stream
        if error is not None:
            log(f"request {rid}: {error}")
            self._append_tokens(req, [], None, force=FinishReason.ERROR)
            return
        lp_rows = None
        if probs is not None and req.sampling_params.num_logprobs is not None:
            lp_rows = [self._llama_logprob_row(req, p) for p in probs]
        if self._append_tokens(req, tokens, lp_rows):
            return
        if stop_type == "eos":
            eos = req.sampling_params.eos_token_id
            if eos is None:
                eos = self.args.eos_id
            self._append_tokens(req, [eos], None, force=FinishReason.STOP)
        elif stop_type == "limit":
            self._append_tokens(req, [], None, force=FinishReason.LENGTH)
        elif stop_type is not None:
            log(f"request {rid}: unexpected llama-server stop_type {stop_type!r}")
            self._append_tokens(req, [], None, force=FinishReason.ERROR)

    def _llama_logprob_row(self, req: Request, p: dict) -> LogprobRow:
        """One position's logprobs from llama-server's ``completion_probabilities`` entry."""
        k = req.sampling_params.num_logprobs
        if k == -1:
            k = self.args.vocab_size
        sampled_lp = float(p.get("logprob", 0.0))
        top = p.get("top_logprobs") or []
        ids = [int(t["id"]) for t in top][:k]
        lps = [float(t["logprob"]) for t in top][:k]
        rank = 1 + sum(1 for t in top if float(t["logprob"]) > sampled_lp)
        return ids, lps, rank, sampled_lp

    # -- outputs -----------------------------------------------------------

    def _append_tokens(
        self,
        req: Request,
        tokens: list[int],
        lp_rows: list[LogprobRow] | None,
        force: FinishReason | None = None,
    ) -> bool:
        """Mirrors Scheduler._update_request_with_output + the EngineCoreOutput it builds.

        Appends tokens one at a time, runs check_stop after each, trims what
        follows a stop. Adds to (or creates) this step's output for the
        request; with ``--fault hang-after-first`` the request goes silent
        after its first token. Returns True when the request finished.
        """
        if self.faults.hang_after_first and force is None:
            tokens = tokens[: max(0, 1 - req.num_output_tokens)]
        kept: list[int] = []
        stopped = False
        for tok in tokens:
            req.output_token_ids.append(tok)
            kept.append(tok)
            if check_stop(req, self.max_model_len):
                stopped = True
                break
        if not stopped and force is not None:
            req.finish_reason = force
            stopped = True
        if not kept and not stopped:
            return False
        pend = self.pending.get(req.request_id)
        if pend is None:
            pend = self.pending[req.request_id] = PendingOutput(req)
        pend.token_ids.extend(kept)
        if req.sampling_params.num_logprobs is not None:
            rows = list(lp_rows or [])[: len(kept)]
            while len(rows) < len(kept):
                rows.append(self._mock_logprobs(req, kept[len(rows)]))
            pend.logprob_rows.extend(rows)
        req.prefilled = True
        if stopped:
            self._finish(req)
        elif self.faults.hang_after_first:
            req.hung = True
            if req.stream is not None:
                req.stream.cancel()
        return stopped

    def _finish(self, req: Request) -> None:
        """Frees a finished request (Scheduler._free_request) and prints its ``finish`` line."""
        self.requests.pop(req.request_id, None)
        self.running.pop(req.request_id, None)
        if req.stream is not None:
            req.stream.cancel()
        self._print_finish(req.request_id, str(req.finish_reason), req.num_output_tokens, req.stop_reason)

    def _flush_step(self) -> None:
        """Sends this step's outputs: one EngineCoreOutputs per client, as Scheduler.update_from_output.

        Then counts the step for the die-after / exit-after faults.
        """
        if not self.pending:
            return
        by_client: dict[int, list[EngineCoreOutput]] = {}
        for pend in self.pending.values():
            by_client.setdefault(pend.req.client_index, []).append(pend.build())
        self.pending = {}
        for client_index, outs in by_client.items():
            # EngineCore._attach_weight_version stamps every step's outputs.
            self.output_queue.put_nowait(
                (client_index, EngineCoreOutputs(outputs=outs, weight_version=self._weight_version))
            )
        self._count_step()

    def _count_step(self) -> None:
        """Counts one forward step for the die-after / exit-after faults."""
        self.steps += 1
        if self.faults.die_after is not None and self.steps >= self.faults.die_after:
            raise EngineDead(f"fault die-after={self.faults.die_after}")
        if self.faults.exit_after is not None and self.steps >= self.faults.exit_after:
            self.output_queue.put_nowait(_EXIT_NOW)
            assert self.output_thread is not None
            self.output_thread.join()  # the output thread ends the process

    # -- death and shutdown ------------------------------------------------

    def _die(self, why: str) -> None:
        """Mirrors run_engine_core's fatal path: _send_engine_dead, then exit 1."""
        log(f"EngineCore encountered a fatal error: {why}")
        self.output_queue.put_nowait(ENGINE_CORE_DEAD)
        event("dead", rank=self.engine_index, error=why)
        assert self.output_thread is not None
        self.output_thread.join(timeout=5.0)
        if self.output_thread.is_alive():
            log("vLLM shutdown signal from EngineCore failed to send.")
        sys.stdout.flush()
        os._exit(1)

    def _handle_shutdown(self) -> None:
        """Mirrors EngineCoreProc._handle_shutdown with shutdown_timeout=0, then exits 0.

        In-flight requests get ABORT outputs (engine-initiated aborts do
        produce output); the output thread gives them SHUTDOWN_LINGER_MS to
        leave, then closes; terminating the input thread's context makes it
        close its sockets with linger 0.
        """
        reqs = list(self.requests.values())
        self.abort_requests([r.request_id for r in reqs])
        by_client: dict[int, list[str]] = {}
        for r in reqs:
            by_client.setdefault(r.client_index, []).append(r.request_id)
        for client_index, ids in by_client.items():
            outs = [EngineCoreOutput(rid, [], finish_reason=FinishReason.ABORT) for rid in ids]
            self.output_queue.put_nowait(
                (client_index, EngineCoreOutputs(finished_requests=ids, outputs=outs))
            )
        event("shutdown", rank=self.engine_index, aborted=[r.request_id for r in reqs])
        self.output_queue.put_nowait(_SHUTDOWN)
        self._exit_after_shutdown()

    def _exit_after_shutdown(self) -> NoReturn:
        """Waits for the output thread to flush, terminates the input thread's context, exits 0."""
        assert self.output_thread is not None
        self.output_thread.join(timeout=5.0)
        if self.input_ctx is not None:
            term = threading.Thread(target=self.input_ctx.term, daemon=True)
            term.start()
            term.join(timeout=2.0)
        sys.stdout.flush()
        os._exit(0)

    # -- utility methods (called by name, as vLLM's EngineCore methods) ----

    def is_sleeping(self) -> bool:
        """Mirrors EngineCore.is_sleeping (never sleeping here)."""
        return False

    def is_scheduler_paused(self) -> bool:
        """Mirrors EngineCore.is_scheduler_paused (never paused here)."""
        return False

    def get_supported_tasks(self) -> tuple[str, ...]:
        """Mirrors EngineCore.get_supported_tasks for a generate-only model."""
        return ("generate",)

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        """Mirrors EngineCore.reset_prefix_cache (always succeeds here)."""
        return True

    def reset_mm_cache(self) -> None:
        """Mirrors EngineCore.reset_mm_cache."""
        return None

    def reset_encoder_cache(self) -> None:
        """Mirrors EngineCore.reset_encoder_cache."""
        return None

    def list_loras(self) -> set[int]:
        """Mirrors EngineCore.list_loras (no LoRA support: empty)."""
        return set()

    def set_weight_version(self, weight_version: str) -> None:
        """Mirrors EngineCore.set_weight_version (stamped on every later step)."""
        self._weight_version = weight_version

    def get_weight_version(self) -> str:
        """Mirrors EngineCore.get_weight_version."""
        return self._weight_version


# ---------------------------------------------------------------------------
# TokenSpeed (--protocol tokenspeed)
# ---------------------------------------------------------------------------
#
# TokenSpeed's opt-in ``--zmq-msgpack`` mode (lightseekorg/tokenspeed @
# f4d8ec6e03, 2026-08-22) keeps vLLM's sockets and HELLO/INIT/READY maps but
# carries its own payloads. The brief is /work/tokenspeed-zmq-notes.md; every
# mirror below names the TokenSpeed function it follows. Paths are relative to
# that repository (``python/tokenspeed/runtime/...`` shortened to ``runtime/``).

# python/tokenspeed/version.py :: __version__ (sent as "tokenspeed-<version>")
TS_VERSION = "0.1.0"
# runtime/engine/zmq_wire.py :: REQ_TYPE_ADD, REQ_TYPE_ABORT (the only two types)
TS_REQ_TYPE_ADD = b"\x00"
TS_REQ_TYPE_ABORT = b"\x01"
# runtime/engine/zmq_msgpack.py :: _INIT_TIMEOUT_MS, _INIT_POLL_SLICE_MS
TS_INIT_TIMEOUT_MS = 600_000
TS_INIT_POLL_SLICE_MS = 30_000
# runtime/sampling/sampling_params.py :: _SAMPLING_EPS, _TOP_K_DISABLED, _TOP_K_FUSED_MAX
_TS_SAMPLING_EPS = 1e-6
_TS_TOP_K_DISABLED = 1 << 30
_TS_TOP_K_FUSED_MAX = 128
# runtime/engine/generation_output_processor.py :: OutputProcesser._PENDING_ABORT_TTL_S
TS_PENDING_ABORT_TTL_S = 300.0
# runtime/engine/generation_output_processor.py :: DEFAULT_FORCE_STREAM_INTERVAL
TS_DEFAULT_FORCE_STREAM_INTERVAL = 50
# Input-queue item types of the TokenSpeed busy loop (stand-in internal).
TS_ADD = "ts-add"
TS_ABORT = "ts-abort"


class TsSamplingParams(msgspec.Struct, kw_only=True, array_like=True):
    """Mirrors runtime/sampling/sampling_params.py :: SamplingParams.

    Untagged ``array_like``: a positional 29-element array nested in the
    request, no ``omit_defaults`` (all 29 always encoded). Same field order,
    types and defaults. ``__post_init__`` runs on construction *and* on
    msgpack decode, as in TokenSpeed.
    """

    max_new_tokens: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: set[int] | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    structural_tag: str | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    thinking_budget: int | None = None
    custom_params: dict[str, Any] | None = None
    stream_interval: int | None = None
    logit_bias: dict[str, float] | None = None
    seed: int | None = None
    logprobs: int | None = None
    n: int = 1
    stop_strs: str | list[str] | None = None
    stop_str_max_len: int = 0
    is_normalized: bool = False

    def __post_init__(self) -> None:
        """Mirrors SamplingParams.__post_init__: greedy rewrite and the top_k sentinel."""
        if self.is_normalized:
            return
        self.stop_strs = self.stop
        if self.stop_token_ids:
            self.stop_token_ids = set(self.stop_token_ids)
        else:
            self.stop_token_ids = None
        if self.temperature < _TS_SAMPLING_EPS:
            self.temperature = 1.0
            self.top_k = 1
        if self.top_k == -1:
            self.top_k = _TS_TOP_K_DISABLED

    def verify(self, vocab_size: int) -> None:
        """Mirrors SamplingParams.verify (same checks, same order, same messages)."""
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.top_k < -1 or self.top_k == 0:
            raise ValueError(f"top_k must be -1 (disable), or at least 1, got {self.top_k}.")
        if self.top_k != _TS_TOP_K_DISABLED and self.top_k >= _TS_TOP_K_FUSED_MAX:
            raise ValueError(
                f"top_k must be < {_TS_TOP_K_FUSED_MAX} (fused kernel limit) "
                f"or -1 (disable), got {self.top_k}."
            )
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise ValueError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise ValueError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not 0.0 <= self.repetition_penalty <= 2.0:
            raise ValueError(f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}.")
        if not 0 <= self.min_new_tokens:
            raise ValueError(f"min_new_tokens must be in (0, max_new_tokens], got {self.min_new_tokens}.")
        if self.max_new_tokens is not None:
            if self.max_new_tokens < 0:
                raise ValueError(f"max_new_tokens must be at least 0, got {self.max_new_tokens}.")
            if not self.min_new_tokens <= self.max_new_tokens:
                raise ValueError(
                    f"min_new_tokens must be in (0, max_new_tokens({self.max_new_tokens})], got "
                    f"{self.min_new_tokens}."
                )
        if self.logit_bias is not None:
            for token_id in self.logit_bias:
                if not 0 <= int(token_id) < vocab_size:
                    raise ValueError(
                        f"logit_bias must has keys in [0, {vocab_size - 1}], got {token_id}."
                    )
        if self.logprobs is not None and self.logprobs != 0:
            raise ValueError(
                f"logprobs={self.logprobs} is not supported; use logprobs=0 "
                "(the sampled token's logprob)."
            )
        if sum(x is not None for x in (self.json_schema, self.regex, self.ebnf)) > 1:
            raise ValueError("Only one of regex, json_schema, or ebnf can be set.")

    def resolve_seed(self, rid: str) -> None:
        """Mirrors SamplingParams.resolve_seed: a None seed becomes crc32(rid)."""
        if self.seed is None:
            self.seed = zlib.crc32(rid.encode("utf-8")) & 0xFFFFFFFF

    def normalize(self, tokenizer: Any = None) -> None:
        """Mirrors SamplingParams.normalize with tokenizer=None (the msgpack path)."""
        if self.stop_strs is None:
            self.stop_strs = []
            self.stop_str_max_len = 0
        else:
            if isinstance(self.stop_strs, str):
                self.stop_strs = [self.stop_strs]
            self.stop_str_max_len = max((len(s) for s in self.stop_strs), default=0)
        self.is_normalized = True


class TsSessionParams(msgspec.Struct, kw_only=True, array_like=True):
    """Mirrors runtime/engine/io_struct.py :: SessionParams (untagged array_like)."""

    id: str | None = None
    rid: str | None = None
    offset: int | None = None
    replace: bool | None = None


class BaseReq(msgspec.Struct, tag=True, tag_field="_tag", kw_only=True, array_like=True):
    """Mirrors runtime/engine/io_struct.py :: BaseReq.

    ``tag=True`` makes element 0 of the array the class name (the subclass's
    own name), ``array_like`` makes the rest positional, base fields first.
    """

    rid: str | list[str] | None = None
    http_worker_ipc: str | None = None


class BaseBatchReq(msgspec.Struct, tag=True, tag_field="_tag", kw_only=True, array_like=True):
    """Mirrors runtime/engine/io_struct.py :: BaseBatchReq."""

    rids: list[str] | None = None


class TokenizedGenerateReqInput(BaseReq, kw_only=True):
    """Mirrors runtime/engine/io_struct.py :: TokenizedGenerateReqInput (the ADD payload).

    On the wire: ``["TokenizedGenerateReqInput", rid, http_worker_ipc,
    input_text, input_ids, sampling_params, ...]``, 24 elements in all as
    TokenSpeed encodes it. ``sampling_params`` has no default, so a decoder
    needs at least the first 6 elements; later ones default. The multimodal
    payload (``MultimodalInputs``) is typed ``Any``: this stand-in is text-only.
    """

    input_text: str | None = None
    input_ids: list[int] | None = None
    sampling_params: TsSamplingParams
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    token_ids_logprob: list[int] | None = None
    stream: bool = False
    input_embeds: list | None = None
    session_params: TsSessionParams | None = None
    custom_logit_processor: str | None = None
    return_hidden_states: bool = False
    created_time: float = 0.0
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None
    input_multi_ids: list[list[int]] | None = None
    input_extra_infos: list[dict] | None = None
    input_ids_unpadded: list[int] | None = None
    multimodal_inputs: Any = None
    validation_error: str | None = None


class AbortReq(BaseReq, kw_only=True):
    """Mirrors runtime/engine/io_struct.py :: AbortReq (built from each id of an ABORT payload)."""


class BatchTokenIDOutSlim(BaseBatchReq, kw_only=True):
    """Mirrors runtime/engine/io_struct.py :: BatchTokenIDOutSlim (the only output message).

    On the wire: ``["BatchTokenIDOutSlim", rids, output_ids, finished_reasons,
    prompt_tokens, completion_tokens, cached_tokens, output_token_logprobs_val,
    output_token_logprobs_idx, engine_index]`` (10 elements). Columns are
    parallel to ``rids``; ``output_ids`` holds each request's new ids of this
    message only; ``finished_reasons`` is "" while running, else "stop",
    "length" or "abort".
    """

    output_ids: list[list[int]]
    finished_reasons: list[str]
    prompt_tokens: list[int]
    completion_tokens: list[int]
    cached_tokens: list[int]
    output_token_logprobs_val: list[list[float]]
    output_token_logprobs_idx: list[list[int]]
    engine_index: int = 0


class WireReadyMessage(msgspec.Struct):
    """Mirrors runtime/engine/zmq_wire.py :: WireReadyMessage (HELLO / READY, a 4-key map)."""

    status: str | None = None
    local: bool | None = None
    headless: bool | None = None
    parallel_config_hash: str | None = None


class WireHandshakeAddresses(msgspec.Struct):
    """Mirrors runtime/engine/zmq_wire.py :: WireHandshakeAddresses."""

    inputs: list[str] = []
    outputs: list[str] = []
    coordinator_input: str | None = None
    coordinator_output: str | None = None
    frontend_stats_publish_address: str | None = None


class WireHandshakeInitMessage(msgspec.Struct):
    """Mirrors runtime/engine/zmq_wire.py :: WireHandshakeInitMessage (INIT; unknown keys ignored)."""

    addresses: WireHandshakeAddresses
    parallel_config: dict = {}


class WireEngineCoreReadyResponse(msgspec.Struct):
    """Mirrors runtime/engine/zmq_wire.py :: WireEngineCoreReadyResponse (registration, a 19-key map)."""

    max_model_len: int = 0
    num_gpu_blocks: int = 0
    prefix_granularity: int = 0
    dp_stats_address: str | None = None
    dtype: str = "bfloat16"
    multimodal_encoder_dtype: str | None = None
    vllm_version: str = ""
    world_size: int = 1
    data_parallel_size: int = 1
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    data_parallel_rank: int = 0
    max_num_seqs: int = 0
    max_num_batched_tokens: int = 0
    instance_id: str = ""
    kv_cache_size_tokens: int | None = None
    kv_cache_max_concurrency: float | None = None
    kv_events_config: dict | None = None


def make_ts_add_decoder() -> msgspec.msgpack.Decoder:
    """Mirrors zmq_wire.py :: _DEC_ADD = MsgpackDecoder(TokenizedGenerateReqInput).

    Decoded as the one tagged type (not a union): element 0 must be
    "TokenizedGenerateReqInput", extra trailing elements are ignored.
    """
    return msgspec.msgpack.Decoder(TokenizedGenerateReqInput, ext_hook=_ext_hook)


_TS_DEC_ABORT = msgspec.msgpack.Decoder(list[str])


def ts_decode_request_frames(frames: list[bytes], add_decoder: msgspec.msgpack.Decoder) -> list:
    """Mirrors zmq_wire.py :: decode_request_frames + _finalize_generate_request.

    ``frames`` is ``[type_byte, payload, *aux]`` (the DEALER strips the
    identity). Raises on anything malformed; the caller drops the message.
    """
    if len(frames) < 2:
        raise ValueError(f"msgpack request needs >=2 frames (type, payload), got {len(frames)}")
    type_byte = frames[0]
    if type_byte == TS_REQ_TYPE_ADD:
        io: TokenizedGenerateReqInput = add_decoder.decode(frames[1])
        sp = io.sampling_params
        sp.resolve_seed(io.rid)
        sp.normalize(tokenizer=None)
        if sp.n != 1:
            io.validation_error = (
                f"n={sp.n} is not supported on the msgpack "
                "wire; the frontend must fan out n > 1 itself"
            )
        return [io]
    if type_byte == TS_REQ_TYPE_ABORT:
        return [AbortReq(rid=rid) for rid in _TS_DEC_ABORT.decode(frames[1])]
    raise ValueError(f"unknown msgpack request type byte: {type_byte!r}")


class TsRequest:
    """One request in the TokenSpeed busy loop: a slice of
    runtime/engine/generation_output_processor.py :: RequestState."""

    def __init__(self, io: TokenizedGenerateReqInput):
        self.request_id: str = io.rid
        self.prompt_token_ids: list[int] = list(io.input_ids or [])
        self.sampling_params = io.sampling_params
        self.max_new_tokens: int = 0  # set on admission (handle_generate_request)
        self.stream = io.stream
        self.return_logprob = io.return_logprob
        self.output_token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.finish_type: str | None = None  # "stop" | "length" | "abort"
        self.matched: int | None = None
        self.send_token_offset = 0
        self.finished_output = False
        self.prefilled = False
        self.hung = False
        self.stream_thread = None

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)


class TokenSpeedEngine(EngineCoreProc):
    """One TokenSpeed scheduler rank in ``--zmq-msgpack`` mode (mock generation only).

    Mirrors runtime/engine/zmq_msgpack.py (the transport),
    runtime/engine/request_handler.py :: RequestHandler.handle_generate_request,
    runtime/engine/generation_output_processor.py :: RequestState.check_finished,
    OutputProcesser.{mark_abort, register, stream_output} and the checks of
    tokenspeed-scheduler/csrc/scheduler/scheduler.cpp :: Scheduler::SubmitRequests.
    The thread layout (input thread, busy loop, output thread) is the
    stand-in's; TokenSpeed drains its DEALER non-blocking from the scheduler
    loop, which puts the same bytes on the wire.
    """

    def __init__(self, args: argparse.Namespace):
        super().__init__(args)
        self.add_decoder = make_ts_add_decoder()
        self.pending_aborts: dict[str, float] = {}
        self.eos_ids = {args.eos_id}
        kv_tokens = args.num_gpu_blocks * args.prefix_granularity
        # EventLoop.__init__: max_model_len = min(context_len, scheduler's
        # max_single_request_tokens); the registration reports context_len.
        self.effective_max_model_len = min(self.max_model_len, kv_tokens)
        self.ts_pending: dict[str, TsRequest] = {}

    # -- startup -----------------------------------------------------------

    def run(self) -> None:
        """Mirrors EventLoop.__init__ (model load first) + zmq_msgpack.py :: connect_msgpack_engine.

        HELLO → INIT → READY on the handshake DEALER, then the input DEALER
        registers (WireEngineCoreReadyResponse) and the output PUSH connects;
        the handshake DEALER is closed.
        """
        args = self.args
        if args.load_ms > 0:
            # TokenSpeed loads the model and sizes the KV cache before it dials.
            time.sleep(args.load_ms / 1000.0)
        hs_ctx = zmq.Context()
        handshake = self._ts_dealer(hs_ctx, args.handshake)
        handshake.send(msgspec.msgpack.encode(WireReadyMessage(status="HELLO", local=True, headless=True)))
        event("hello", rank=self.engine_index, dp_size=args.dp_size)
        waited = 0
        while not handshake.poll(TS_INIT_POLL_SLICE_MS):
            waited += TS_INIT_POLL_SLICE_MS
            if waited >= TS_INIT_TIMEOUT_MS:
                raise TimeoutError(
                    f"SMG msgpack handshake timed out waiting for INIT after {TS_INIT_TIMEOUT_MS} ms"
                )
            log(f"msgpack handshake: waiting for SMG INIT ({waited // 1000}s elapsed)")
        init = msgspec.msgpack.decode(handshake.recv_multipart()[-1], type=WireHandshakeInitMessage)
        addrs = init.addresses
        self._print_init(init)
        handshake.send(msgspec.msgpack.encode(WireReadyMessage(status="READY", local=True, headless=True)))
        event("ready", rank=self.engine_index)
        if not addrs.inputs or not addrs.outputs:
            raise ValueError(
                "SMG INIT message did not carry both input and output addresses: "
                f"inputs={addrs.inputs} outputs={addrs.outputs}"
            )
        self._hold_if_no_registration()
        self.addresses = addrs
        registered = threading.Event()
        threading.Thread(
            target=self.ts_input_thread, args=(addrs.inputs[0], registered), daemon=True, name="input"
        ).start()
        registered.wait()
        self.output_thread = threading.Thread(
            target=self.ts_output_thread, args=(addrs.outputs[0],), daemon=True, name="output"
        )
        self.output_thread.start()
        handshake.close(linger=0)
        hs_ctx.term()
        self._serve()

    def _ts_dealer(self, ctx: zmq.Context, address: str) -> zmq.Socket:
        """A plain DEALER (default options) with this rank's identity, connected to ``address``."""
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, self.identity)
        sock.connect(address)
        return sock

    def _make_ts_ready_response(self) -> WireEngineCoreReadyResponse:
        """Mirrors EventLoop._init_msgpack_transport's WireEngineCoreReadyResponse(...)."""
        a = self.args
        return WireEngineCoreReadyResponse(
            max_model_len=self.max_model_len,
            num_gpu_blocks=a.num_gpu_blocks,
            prefix_granularity=a.prefix_granularity,
            dtype="bfloat16",
            multimodal_encoder_dtype=None,
            vllm_version=f"tokenspeed-{TS_VERSION}",
            world_size=a.dp_size,
            data_parallel_size=a.dp_size,
            tensor_parallel_size=1,
            data_parallel_rank=self.engine_index,
            max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=max(0, a.max_num_batched_tokens),
            instance_id=a.instance_id,
            kv_cache_size_tokens=a.num_gpu_blocks * a.prefix_granularity,
        )

    # -- input thread ------------------------------------------------------

    def ts_input_thread(self, input_address: str, registered: threading.Event) -> None:
        """Mirrors connect_msgpack_engine's registration + MsgpackRecvSocket.recv_pyobj.

        A message that does not decode (bad msgpack, wrong tag, a type byte
        other than ADD/ABORT, fewer than 2 frames) is dropped with a warning
        and the engine reads on: the front-end hears nothing back. A request
        that decodes but is invalid is marked (``validation_error``) and
        answered with a terminal "abort" output by the busy loop.
        """
        ctx = self.input_ctx = zmq.Context()
        sock = self._ts_dealer(ctx, input_address)
        try:
            sock.send(msgspec.msgpack.encode(self._make_ts_ready_response()))
            event("registered", rank=self.engine_index)
            registered.set()
            while True:
                frames = sock.recv_multipart()
                try:
                    decoded = ts_decode_request_frames(frames, self.add_decoder)
                except Exception as e:  # noqa: BLE001 - MsgpackRecvSocket drops it
                    event("dropped", rank=self.engine_index, why="malformed", error=f"{type(e).__name__}:{e}")
                    log(
                        "msgpack input: dropping malformed message "
                        f"({len(frames)} frames, sizes={[len(f) for f in frames]}, "
                        f"head={frames[0][:8].hex() if frames else ''}): {e}"
                    )
                    continue
                aborts = [obj.rid for obj in decoded if isinstance(obj, AbortReq)]
                if aborts:
                    event("abort", rank=self.engine_index, ids=aborts)
                    self.input_queue.put_nowait((TS_ABORT, aborts))
                for obj in decoded:
                    if isinstance(obj, TokenizedGenerateReqInput):
                        reason = obj.validation_error or self._ts_validation_error(obj)
                        if reason is not None:
                            log(f"msgpack input: aborting invalid request {obj.rid}: {reason}")
                            obj.validation_error = reason
                        self._print_ts_add(obj)
                        self.input_queue.put_nowait((TS_ADD, obj))
        except zmq.ContextTerminated:
            pass
        except BaseException as e:  # noqa: BLE001
            self._report_thread_death("input", e)
        finally:
            registered.set()
            sock.close(linger=0)

    def _ts_validation_error(self, obj: TokenizedGenerateReqInput) -> str | None:
        """Mirrors MsgpackRecvSocket._validation_error (+ the error-on-prompt fault)."""
        if obj.return_logprob and not self.args.enable_output_logprobs:
            return (
                "logprobs were requested but the server was started without "
                "--enable-output-logprobs"
            )
        try:
            obj.sampling_params.verify(self.args.vocab_size)
        except ValueError as exc:
            return str(exc)
        hit = self._error_on_prompt_hit(obj.input_ids)
        if hit is not None:
            return f"token id {hit} is not allowed in the prompt (fault error-on-prompt)"
        return None

    def _print_ts_add(self, io: TokenizedGenerateReqInput) -> None:
        """The ``add`` event line, with the sampling values as the engine holds them after decode."""
        sp = io.sampling_params
        event(
            "add",
            rank=self.engine_index,
            id=io.rid,
            prompt=io.input_ids,
            max_tokens=sp.max_new_tokens,
            temperature=sp.temperature,
            top_p=sp.top_p,
            top_k=sp.top_k,
            min_p=sp.min_p,
            seed=sp.seed,
            min_tokens=sp.min_new_tokens,
            ignore_eos=sp.ignore_eos,
            stop_token_ids=sorted(sp.stop_token_ids) if sp.stop_token_ids else None,
            n=sp.n,
            logprobs=sp.logprobs,
            return_logprob=io.return_logprob,
            stream=io.stream,
            invalid=io.validation_error is not None,
        )

    # -- output thread -----------------------------------------------------

    def ts_output_thread(self, output_address: str) -> None:
        """Mirrors MsgpackSendSocket: a plain PUSH (default options) connected to outputs[0].

        Each item is one BatchTokenIDOutSlim, sent as the single frame
        MsgpackEncoder produces. ENGINE_CORE_DEAD goes out alone, NOBLOCK
        (send_engine_dead). TokenSpeed then just exits; the stand-in closes
        with a 4 s linger so the sentinel is flushed.
        """
        encoder = MsgpackEncoder()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.PUSH)
        sock.connect(output_address)

        def send_dead() -> None:
            try:
                sock.send(ENGINE_CORE_DEAD, zmq.NOBLOCK)
            except zmq.ZMQError as e:
                log(f"msgpack output: ENGINE_CORE_DEAD send failed: {e}")

        def send(item: Any) -> None:
            sock.send_multipart(encoder.encode(item), copy=False)

        self._output_loop(ctx, [sock], send, send_dead, linger=4000, shutdown_linger=4000)

    # -- busy loop ---------------------------------------------------------

    def _handle_client_request(self, request_type: Any, request: Any) -> None:
        """Mirrors RequestHandler.process_requests + EventLoop._process_new_requests."""
        if request_type == EngineCoreRequestType.WAKEUP:
            return
        if request_type == TS_ADD:
            self.add_request(request)
        elif request_type == TS_ABORT:
            self.abort_requests(request)
        else:
            raise RuntimeError(f"unexpected input item {request_type!r}")

    def add_request(self, io: TokenizedGenerateReqInput) -> None:  # type: ignore[override]
        """Mirrors handle_generate_request, OutputProcesser.register and SubmitRequests' checks.

        - ``validation_error`` set, or a ``session_params.id``: admitted
          pre-finished, one terminal "abort" output (publish_finished_at_admission).
        - ``max_new_tokens`` = min(sent or 2**30, (max_model_len-1) - len(prompt) - 1).
        - Fatal, as SubmitRequests throws in the scheduler loop: an empty
          prompt, a live duplicate rid, a negative max_new_tokens (prompt too
          long); ``input_ids`` None fails in make_spec. Out-of-vocabulary
          prompt ids are fatal here by emulation (unverified on a GPU).
        - A rid with a pending abort (an ABORT that arrived first, within
          300 s) is admitted already aborted: no output at all.
        """
        rid = io.rid
        if io.input_ids is None:
            raise EngineDead("input-ids-none")
        req = TsRequest(io)
        if io.validation_error or (io.session_params is not None and io.session_params.id is not None):
            self.pending_aborts.pop(rid, None)
            req.finish_type = "abort"
            self._ts_publish([req])
            self._print_finish(rid, "abort")
            return
        sp = io.sampling_params
        req.max_new_tokens = min(
            sp.max_new_tokens if sp.max_new_tokens is not None else 1 << 30,
            (self.effective_max_model_len - 1) - len(req.prompt_token_ids) - 1,
        )
        self._sweep_pending_aborts()
        if self.pending_aborts.pop(rid, None) is not None:
            event("dropped", rank=self.engine_index, id=rid, why="pending-abort")
            return
        if not req.prompt_token_ids:
            self._fatal("empty-prompt", rid)
        if rid in self.requests:
            self._fatal("duplicate-request-id", rid)
        if req.max_new_tokens < 0:
            self._fatal("negative-max-new-tokens", rid)
        self._check_prompt_in_vocab(rid, req.prompt_token_ids)
        self.requests[rid] = req
        self.waiting.append(req)

    def _sweep_pending_aborts(self) -> None:
        """Mirrors OutputProcesser.sweep_pending_aborts (TTL 300 s)."""
        cutoff = time.monotonic() - TS_PENDING_ABORT_TTL_S
        for rid in [r for r, t in self.pending_aborts.items() if t < cutoff]:
            del self.pending_aborts[rid]

    def abort_requests(self, request_ids: list[str]) -> None:
        """Mirrors OutputProcesser.mark_abort for a client abort: no output, ever.

        A live request is dropped with what it had not yet sent. An unknown id
        (not yet arrived, or already finished) is remembered for 300 s; an ADD
        with that id in that window is dropped silently.
        """
        for rid in request_ids:
            req = self.requests.pop(rid, None)
            if req is None:
                self._sweep_pending_aborts()
                self.pending_aborts[rid] = time.monotonic()
                continue
            self._unschedule(req)
            self.ts_pending.pop(rid, None)

    def _schedule(self) -> None:
        """Admits waiting requests FIFO up to ``--max-num-seqs`` (no KV accounting)."""
        for _ in self._admit_fifo():
            pass

    def _mock_token(self, req: TsRequest) -> int:  # type: ignore[override]
        """Echo the prompt, cycling, one id per step (min_new_tokens is a no-op in TokenSpeed)."""
        prompt = req.prompt_token_ids
        return prompt[req.num_output_tokens % len(prompt)]

    def _check_finished(self, req: TsRequest) -> bool:
        """Mirrors RequestState.check_finished: length first, then stop ids / EOS unless ignore_eos."""
        sp = req.sampling_params
        if req.num_output_tokens >= req.max_new_tokens:
            req.finish_type = "length"
            return True
        last = req.output_token_ids[-1]
        if not sp.ignore_eos and (last in (sp.stop_token_ids or ()) or last in self.eos_ids):
            req.finish_type = "stop"
            req.matched = last
            return True
        return False

    def _append_tokens(self, req: TsRequest, tokens: list[int], lp_rows: Any, force: Any = None) -> bool:  # type: ignore[override]
        """Mirrors OutputProcesser.post_process_forward_op for one request: append, check, stop."""
        if self.faults.hang_after_first:
            tokens = tokens[: max(0, 1 - req.num_output_tokens)]
        stopped = False
        for tok in tokens:
            req.output_token_ids.append(tok)
            req.logprobs.append(-0.125)
            if self._check_finished(req):
                stopped = True
                break
        if not tokens and not stopped:
            return False
        req.prefilled = True
        self.ts_pending[req.request_id] = req
        if stopped:
            self._finish(req)
        elif self.faults.hang_after_first:
            req.hung = True
        return stopped

    def _finish(self, req: TsRequest) -> None:  # type: ignore[override]
        self.requests.pop(req.request_id, None)
        self.running.pop(req.request_id, None)
        self._print_finish(req.request_id, req.finish_type, req.num_output_tokens, req.matched)

    def _ts_publish(self, reqs: list[TsRequest]) -> bool:
        """Mirrors OutputProcesser.stream_output + BatchTokenIDOutSlim.from_full.

        A finished request always goes out (once). A running one goes out when
        stream=True and ``len(output) % interval == 0`` (interval 1) or
        ``== 1`` (interval > 1), interval = sampling_params.stream_interval or
        --stream-interval; with stream=False only at the 1st token and every
        50th. ``output_ids`` is what was not yet sent. Returns True if sent.
        """
        cols: dict[str, list] = {k: [] for k in (
            "rids", "output_ids", "finished_reasons", "prompt_tokens", "completion_tokens",
            "cached_tokens", "lp_val", "lp_idx")}
        for req in reqs:
            n = req.num_output_tokens
            if req.finish_type is not None:
                if req.finished_output:
                    continue
                req.finished_output = True
            elif req.stream:
                interval = req.sampling_params.stream_interval or self.args.stream_interval
                if not (n % interval == 1 if interval > 1 else n % interval == 0):
                    continue
            elif not (n == 1 or n % TS_DEFAULT_FORCE_STREAM_INTERVAL == 0):
                continue
            off = req.send_token_offset
            new = req.output_token_ids[off:]
            req.send_token_offset = n
            cols["rids"].append(req.request_id)
            cols["output_ids"].append(new)
            cols["finished_reasons"].append(req.finish_type or "")
            cols["prompt_tokens"].append(len(req.prompt_token_ids))
            cols["completion_tokens"].append(n)
            cols["cached_tokens"].append(0)
            if req.return_logprob:
                cols["lp_val"].append(req.logprobs[off:])
                cols["lp_idx"].append(list(new))
            else:
                cols["lp_val"].append([])
                cols["lp_idx"].append([])
        if not cols["rids"]:
            return False
        self.output_queue.put_nowait(
            BatchTokenIDOutSlim(
                rids=cols["rids"],
                output_ids=cols["output_ids"],
                finished_reasons=cols["finished_reasons"],
                prompt_tokens=cols["prompt_tokens"],
                completion_tokens=cols["completion_tokens"],
                cached_tokens=cols["cached_tokens"],
                output_token_logprobs_val=cols["lp_val"],
                output_token_logprobs_idx=cols["lp_idx"],
                engine_index=self.engine_index,
            )
        )
        return True

    def _flush_step(self) -> None:
        """One forward step's output (at most one BatchTokenIDOutSlim), then the step faults.

        die-after / exit-after count forward steps in which some request got a
        token, whether or not the stream rules sent anything.
        """
        if not self.ts_pending:
            return
        reqs = list(self.ts_pending.values())
        self.ts_pending = {}
        self._ts_publish(reqs)
        self._count_step()

    def _handle_shutdown(self) -> None:
        """SIGTERM, as run_event_loop: the loop stops, EventLoop.close sends ENGINE_CORE_DEAD, exit 0.

        In-flight requests get no output of their own (no abort outputs).
        """
        inflight = list(self.requests)
        event("shutdown", rank=self.engine_index, aborted=[], dropped=inflight)
        self.output_queue.put_nowait(ENGINE_CORE_DEAD)
        event("dead", rank=self.engine_index, error="shutdown")
        self._exit_after_shutdown()


# ---------------------------------------------------------------------------
# Faults and CLI
# ---------------------------------------------------------------------------


@dataclass
class Faults:
    """The ``--fault`` switches, parsed."""

    die_after: int | None = None
    exit_after: int | None = None
    error_on_prompt: set[int] = field(default_factory=set)
    no_registration: bool = False
    hang_after_first: bool = False


def parse_faults(specs: list[str]) -> Faults:
    """Parses ``die-after=K``, ``exit-after=K``, ``error-on-prompt=ID``, ``no-registration``, ``hang-after-first``."""
    faults = Faults()
    for spec in specs:
        name, _, value = spec.partition("=")
        if name == "die-after":
            faults.die_after = int(value)
        elif name == "exit-after":
            faults.exit_after = int(value)
        elif name == "error-on-prompt":
            faults.error_on_prompt.add(int(value))
        elif name == "no-registration" and not value:
            faults.no_registration = True
        elif name == "hang-after-first" and not value:
            faults.hang_after_first = True
        else:
            raise SystemExit(f"engine.py: unknown --fault {spec!r}")
    return faults


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Stand-in for one vLLM 0.33.0 engine-core rank (ZMQ headless engine), "
        "or with --protocol tokenspeed one TokenSpeed --zmq-msgpack scheduler rank.",
    )
    p.add_argument("--handshake", required=True, help="front-end handshake ROUTER, tcp://HOST:PORT")
    p.add_argument(
        "--protocol",
        choices=("vllm", "tokenspeed"),
        default="vllm",
        help="payloads and handshake order: vLLM 0.33 engine core (default) or TokenSpeed's "
        "--zmq-msgpack scheduler (mock mode only)",
    )
    p.add_argument("--rank", type=int, default=0, help="DP rank = engine index = identity (u16 LE)")
    p.add_argument("--dp-size", type=int, default=1, help="DP size the rank was launched with")
    p.add_argument(
        "--parallel-config-hash",
        default=None,
        help="put this parallel_config_hash in READY. vLLM does so only for MoE DP ranks: "
        "independent (non-MoE) ranks have data_parallel_size reset to 1 first, so they omit it",
    )
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--eos-id", type=int, default=2, help="EOS id llama mode appends when upstream omits it")
    p.add_argument("--vocab-size", type=int, default=49152)
    p.add_argument("--num-gpu-blocks", type=int, default=1000)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--instance-id", default=None, help="reported in the registration (default: random)")
    p.add_argument("--mode", choices=("mock", "llama"), default="mock")
    p.add_argument("--llama-url", default="http://127.0.0.1:8080")
    p.add_argument("--llama-wait-s", type=float, default=120.0, help="how long to wait for llama-server /props")
    p.add_argument("--ttft-ms", type=float, default=0.0, help="mock: duration of a step holding a prefill")
    p.add_argument("--token-ms", type=float, default=0.0, help="mock: duration of a decode step")
    p.add_argument(
        "--skip-ids",
        type=lambda v: {int(x) for x in v.split(",") if x},
        default=set(),
        help="mock: ids the echo never emits (e.g. the EOS a chat prompt holds, so a load's "
        "streams run to max_tokens as the gRPC mock's do)",
    )
    p.add_argument("--load-ms", type=float, default=0.0, help="delay between INIT and registration")
    p.add_argument(
        "--log-stats",
        action="store_true",
        help="attach QUEUED/SCHEDULED events to outputs, as an engine with stats logging does "
        "(scheduler_stats is never sent)",
    )
    p.add_argument("--fault", action="append", default=[], help="see README.md; repeatable")
    p.add_argument(
        "--prefix-granularity",
        type=int,
        default=64,
        help="tokenspeed: registration prefix_granularity; KV capacity = num_gpu_blocks * this",
    )
    p.add_argument(
        "--stream-interval",
        type=int,
        default=1,
        help="tokenspeed: the server's --stream-interval (a request's stream_interval overrides it)",
    )
    p.add_argument(
        "--enable-output-logprobs",
        action="store_true",
        help="tokenspeed: accept return_logprob (without it such a request is aborted)",
    )
    args = p.parse_args(argv)
    if args.protocol == "tokenspeed" and args.mode != "mock":
        p.error("--protocol tokenspeed supports --mode mock only")
    if args.instance_id is None:
        args.instance_id = uuid.uuid4().hex
    parse_faults(args.fault)
    return args


# The running engine, for the SIGTERM path (None until the busy loop starts).
_running_engine: EngineCoreProc | None = None


def install_signal_handlers(rank: int) -> None:
    """SIGTERM / SIGINT: shut down cleanly, exit 0.

    Must run first in the process, before any thread or ZMQ context exists.
    The two signals are blocked in every thread (threads, libzmq's I/O
    threads included, inherit the mask) and one thread takes them with
    ``sigwait``. A Python-level handler would only run on the main thread,
    and only once that thread wakes up: a signal delivered to another thread
    while the busy loop sleeps in ``queue.get()`` would never be acted on.

    Before the busy loop runs there is no request state: exit at once. After,
    the signal thread sets the flag and puts a WAKEUP on the input queue, as
    vLLM's SignalCallback does.
    """
    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def waiter() -> None:
        signal.sigwait(signals)
        engine = _running_engine
        if engine is None:
            event("shutdown", rank=rank, aborted=[])
            os._exit(0)
        engine.shutdown_requested = True
        engine.input_queue.put_nowait((EngineCoreRequestType.WAKEUP, None))

    threading.Thread(target=waiter, daemon=True, name="signal").start()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_signal_handlers(args.rank)
    engine = TokenSpeedEngine(args) if args.protocol == "tokenspeed" else EngineCoreProc(args)
    try:
        engine.run()
    except Exception as e:  # noqa: BLE001 - "EngineCore failed to start": no sentinel
        event("start-failed", rank=args.rank, error=f"{type(e).__name__}:{e}")
        log("EngineCore failed to start:\n" + traceback.format_exc())
        sys.stdout.flush()
        os._exit(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
