"""Named embedding models for dense retrieval as the papers ran it, found on this machine only.

``dense:<dir>?model=bge-base-en-v1.5`` (and ``noterag index CORPUS --dense --embedding-model
bge-base-en-v1.5``) names a preset; noterag downloads nothing at run time, so a preset
resolves to the model's folder in the Hugging Face cache (``huggingface-cli download REPO``
puts it there; ``HF_HOME``/``HF_HUB_CACHE`` move the cache) and is a one-line error when it
is not there. A folder path is taken as it is.

* ``bge-base-en-v1.5`` (``BAAI/bge-base-en-v1.5``): DeepNote's and Adaptive-Note's dense
  retriever for HotpotQA, 2WikiMQA and MuSiQue. Their code (thunlp/DeepNote
  ``src/main.py`` and ``src/build_index/emb/index.py`` at
  cc2f0132737e04ec2d895e8c21673cee612ca1e7) embeds passages as ``title + "\\n" + text``
  (noterag's ``passage_text``) and queries as they are, *without* BGE's query instruction;
  ``&instruction=bge`` adds it (``Represent this sentence for searching relevant passages:
  ``, the BGE model card's instruction for short queries and long passages).
* ``gtr-t5-xxl`` (``sentence-transformers/gtr-t5-xxl``): ALCE's retriever for ASQA, which
  DeepNote used for ASQA and StrategyQA over DPR's Wikipedia (princeton-nlp/ALCE
  ``retrieval.py`` at 246c476a4edfc564266b7346b6e29ef4861ae937: passages ``title + "\\n" +
  text``, queries as they are, vectors normalised, inner product).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from langchain_core.embeddings import Embeddings

from noterag.base.errors import ConfigError

# The BGE model card's instruction for retrieval with short queries (BAAI/bge-base-en-v1.5).
BGE_INSTRUCTION = "Represent this sentence for searching relevant passages: "
INSTRUCTIONS = {"none": "", "bge": BGE_INSTRUCTION}


@dataclass(frozen=True)
class EmbeddingPreset:
    name: str
    repo: str  # on the Hugging Face hub
    instruction: str  # the INSTRUCTIONS key the papers' code used for queries
    used_by: str


PRESETS = {
    preset.name: preset
    for preset in (
        EmbeddingPreset(
            "bge-base-en-v1.5",
            "BAAI/bge-base-en-v1.5",
            "none",
            "DeepNote/Adaptive-Note dense retrieval for HotpotQA, 2WikiMQA, MuSiQue",
        ),
        EmbeddingPreset(
            "gtr-t5-xxl",
            "sentence-transformers/gtr-t5-xxl",
            "none",
            "ALCE's (and DeepNote's) retrieval for ASQA and StrategyQA",
        ),
    )
}


def find_preset(value: str) -> EmbeddingPreset | None:
    """The preset named ``value`` (by its name or its hub name), if any."""
    return PRESETS.get(value) or next((p for p in PRESETS.values() if p.repo == value), None)


def resolve_model(value: str) -> tuple[str, EmbeddingPreset | None]:
    """A model folder for ``value`` (a preset name, a hub name of a preset, or a folder) and its
    preset; ``ConfigError`` naming how to get the model when it is not on this machine."""
    preset = find_preset(value)
    if preset is None:
        path = Path(value).expanduser()
        if path.is_dir():
            return str(path.resolve()), None
        known = ", ".join(sorted(PRESETS))
        raise ConfigError(
            f"embedding model {value!r} is neither a preset ({known}) nor a model folder"
        )
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = snapshot_download(preset.repo, local_files_only=True)
    except LocalEntryNotFoundError:
        raise ConfigError(
            f"the embedding model {preset.repo} (preset {preset.name}) is not on this machine "
            f"and noterag downloads nothing while it runs: get it once with "
            f"`huggingface-cli download {preset.repo}`, or give its folder (model=/path)"
        ) from None
    return str(folder), preset


def query_instruction(name: str | None, preset: EmbeddingPreset | None) -> str:
    """The text put before each query: ``name`` (``none``/``bge``), else the preset's."""
    key = name if name is not None else (preset.instruction if preset else "none")
    if key not in INSTRUCTIONS:
        raise ConfigError(
            f"unknown query instruction {key!r} (known: {', '.join(sorted(INSTRUCTIONS))})"
        )
    return INSTRUCTIONS[key]


class InstructedEmbeddings(Embeddings):
    """``base`` with ``instruction`` put before every query (passages are embedded as they are)."""

    def __init__(self, base: Embeddings, instruction: str) -> None:
        self.base = base
        self.instruction = instruction

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.base.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.base.embed_query(self.instruction + text)


def check_index_model(index_model: str, preset: EmbeddingPreset | None, folder: str) -> None:
    """Refuse a query model other than the one the index was embedded with (by name)."""
    if preset is None:
        return  # a folder given by path: the user's word (the dimensions are still checked)
    recorded = index_model.lower()
    if preset.name.lower() in recorded or Path(index_model) == Path(folder):
        return
    raise ConfigError(
        f"the dense index was embedded with {index_model!r}, not {preset.repo}: queries embedded "
        f"with another model would not match it; build it with `noterag index CORPUS --dense "
        f"--embedding-model {preset.name} --out DIR`"
    )
