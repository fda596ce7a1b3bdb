"""BM25 over an Elasticsearch index, through langchain-elasticsearch (the ``es`` extra).

Spec: ``"es:<url>/<index>"``, e.g. ``es:http://localhost:9200/hotpotqa``. Credentials come from
the environment: ``NOTERAG_ES_API_KEY``, or ``NOTERAG_ES_USER`` and ``NOTERAG_ES_PASSWORD``;
``NOTERAG_ES_CA_CERTS`` names a CA bundle for a cluster with a self-signed certificate (ES 8's
default security setup). Needs an Elasticsearch 8 or 9 server (the 8.x client it uses sends
``compatible-with=8`` headers, which ES 7 rejects).

The index (``build_es_index``) has an explicit, strict mapping: ``id`` as a keyword, ``title``
and ``text`` analyzed with Elasticsearch's built-in ``english`` analyzer and scored with BM25
(k1=1.2, b=0.75). The official Adaptive-Note indexing script sends a mapping that Elasticsearch
7+ rejects (a mapping type ``doc``, the removed ``string`` type, analyzers outside
``analysis.analyzer``) with ``ignore=400``, so its index silently falls back to dynamic mapping
with the standard analyzer. Here a rejected mapping is an error, and an existing index whose
mapping differs is never touched unless ``force`` is given.

Queries are the papers' BM25 setup (Adaptive-Note's ``es_retrieve.py``): a ``multi_match``
(``best_fields``) over ``title^1.25`` and ``text``.

``es:<url>/<index>?style=deepnote`` (or ``?style=ircot``) reproduces instead the index and query
of DeepNote's/Adaptive-Note's ``es_retrieve.py`` (with its re-ranking of the top 50 by title
match) or of IRCoT's retriever server, as they ran on Elasticsearch 7.10: ``styles.py`` says
what each does and where it comes from. Build such an index with
``noterag index CORPUS --es URL --index NAME --style deepnote``; a search refuses an index
whose mapping is not the style's.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from noterag.base.errors import ConfigError, IndexNotFoundError, NoteragError

from .extras import ES_HINT, MissingExtraError

try:
    import elasticsearch
    from elasticsearch import Elasticsearch, helpers
    from langchain_elasticsearch import ElasticsearchRetriever
except ImportError as exc:  # the extra is optional: say how to get it, in one line
    raise MissingExtraError(ES_HINT) from exc

from langchain_core.documents import Document
from pydantic import Field

from .base import SearchMixin, check_k
from .corpus import CorpusStats, Passage, check_corpus, iter_corpus
from .indexdir import ProgressReporter, require_passages
from .spec import split_options
from .styles import DEEPNOTE, DEFAULT_STYLE, IRCOT, Hit, Style, get_style

ENV_API_KEY = "NOTERAG_ES_API_KEY"
ENV_USER = "NOTERAG_ES_USER"
ENV_PASSWORD = "NOTERAG_ES_PASSWORD"
ENV_CA_CERTS = "NOTERAG_ES_CA_CERTS"

# One line that gets a throwaway single-node server going (security off: local testing only).
START_HINT = (
    "start one with: docker run -d --name es -p 9200:9200 -e discovery.type=single-node "
    "-e xpack.security.enabled=false docker.elastic.co/elasticsearch/elasticsearch:8.17.0"
)

SIMILARITY_NAME = "noterag_bm25"
TITLE_BOOST = 1.25  # Adaptive-Note's es_retrieve.py boosts title fields by 1.25
QUERY_FIELDS = (f"title^{TITLE_BOOST}", "text")

INDEX_SETTINGS: dict[str, Any] = {
    # One shard keeps BM25's document frequencies global, so scores do not depend on which
    # shard a passage landed in (fine up to tens of millions of passages).
    "number_of_shards": 1,
    "similarity": {SIMILARITY_NAME: {"type": "BM25", "k1": 1.2, "b": 0.75}},
}
INDEX_MAPPINGS: dict[str, Any] = {
    # A stray field is a per-document error, not a silent change of the mapping.
    "dynamic": "strict",
    "properties": {
        "id": {"type": "keyword"},
        "title": {"type": "text", "analyzer": "english", "similarity": SIMILARITY_NAME},
        "text": {"type": "text", "analyzer": "english", "similarity": SIMILARITY_NAME},
    },
}

# What Elasticsearch 7's dynamic mapping makes of a JSON string: the deepnote style's index
# (its own mapping was rejected, see styles.py), and IRCoT's "id", which its mapping omits.
_DYNAMIC_STRING: dict[str, Any] = {
    "type": "text",
    "fields": {"keyword": {"type": "keyword", "ignore_above": 256}},
}
_ENGLISH = {"type": "text", "analyzer": "english"}
# style name -> (settings, mappings). One shard, Elasticsearch 7's and 8's default, said
# explicitly so BM25's document frequencies are global whatever the cluster's template.
STYLE_LAYOUTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    DEFAULT_STYLE: (INDEX_SETTINGS, INDEX_MAPPINGS),
    "deepnote": (
        {"number_of_shards": 1},
        {
            "dynamic": "strict",
            "properties": {
                name: _DYNAMIC_STRING
                for name in (
                    "id",
                    "url",
                    "title",
                    "title_unescape",
                    "text",
                    "title_bigram",
                    "title_unescape_bigram",
                    "text_bigram",
                )
            },
        },
    ),
    # retriever_server/build_index.py's paragraphs_index_settings, plus the dynamic "id".
    "ircot": (
        {"number_of_shards": 1},
        {
            "dynamic": "strict",
            "properties": {
                "id": _DYNAMIC_STRING,
                "title": _ENGLISH,
                "paragraph_index": {"type": "integer"},
                "paragraph_text": _ENGLISH,
                "url": _ENGLISH,
                "is_abstract": {"type": "boolean"},
            },
        },
    ),
}

_MAX_FAILURE_EXAMPLES = 10


# --------------------------------------------------------------------------------------------
# Connecting


ES_OPTIONS = ("style",)


def parse_es_options(argument: str) -> tuple[str, str, Style]:
    """``"http://host:9200/index?style=deepnote"`` -> ``(url, index, style)``."""
    location, options = split_options(argument, ES_OPTIONS, "es")
    url, index = parse_es_spec(location)
    return url, index, get_style(options.get("style"))


def parse_es_spec(argument: str) -> tuple[str, str]:
    """``"http://host:9200/index"`` -> ``("http://host:9200", "index")``.

    The index is the last path segment; anything before it (a proxy path prefix) stays in the
    URL. A URL without a scheme gets ``http://``.
    """
    text = argument.strip()
    if "://" not in text:
        text = "http://" + text
    url, sep, index = text.rstrip("/").rpartition("/")
    if not sep or not index or url.endswith(":/") or not urlsplit(url).netloc:
        raise ConfigError(
            f"Elasticsearch spec {argument!r} names no index: expected es:<url>/<index>, "
            "e.g. es:http://localhost:9200/hotpotqa"
        )
    check_index_name(index)
    return url, index


_INDEX_NAME_FORBIDDEN = re.compile(r'[\\/*?"<>|,# :A-Z]')


def check_index_name(index: str) -> str:
    """Raise ``ConfigError`` unless ``index`` is a valid Elasticsearch index name."""
    if (
        not index
        or index in {".", ".."}
        or index[0] in "-_+"
        or _INDEX_NAME_FORBIDDEN.search(index)
        or len(index.encode("utf-8")) > 255
    ):
        raise ConfigError(
            f"{index!r} is not a valid Elasticsearch index name (lowercase, no spaces or "
            '\\/*?"<>|,#:, not starting with -, _ or +)'
        )
    return index


def credentials_from_env(
    api_key: str | None = None, user: str | None = None, password: str | None = None
) -> dict[str, Any]:
    """Client keyword arguments for the given credentials, else those in the environment."""
    api_key = api_key or os.environ.get(ENV_API_KEY) or None
    user = user or os.environ.get(ENV_USER) or None
    password = password or os.environ.get(ENV_PASSWORD) or None
    options: dict[str, Any] = {}
    if api_key:
        options["api_key"] = api_key
    elif user or password:
        if not (user and password):
            raise ConfigError(f"set both {ENV_USER} and {ENV_PASSWORD} (or {ENV_API_KEY})")
        options["basic_auth"] = (user, password)
    ca_certs = os.environ.get(ENV_CA_CERTS)
    if ca_certs:
        options["ca_certs"] = ca_certs
    return options


class ElasticsearchUnavailableError(NoteragError):
    """No Elasticsearch server answered at the URL, or it refused our credentials."""


def connect(
    url: str,
    *,
    api_key: str | None = None,
    user: str | None = None,
    password: str | None = None,
    request_timeout: float = 30,
) -> Elasticsearch:
    """A client for ``url`` that has answered once; otherwise one clear error line."""
    client = Elasticsearch(
        url,
        request_timeout=request_timeout,
        **credentials_from_env(api_key, user, password),
    )
    check_reachable(client, url)
    return client


def check_reachable(client: Elasticsearch, url: str) -> None:
    """Raise ``ElasticsearchUnavailableError`` (one line naming ``url``) unless the server answers."""
    # ping() returns False instead of raising; only then is info() asked why.
    if client.ping():
        return
    try:
        client.info()
    except elasticsearch.AuthenticationException:
        raise ElasticsearchUnavailableError(
            f"Elasticsearch at {url} rejected the credentials (set {ENV_API_KEY}, or "
            f"{ENV_USER} and {ENV_PASSWORD})"
        ) from None
    except elasticsearch.AuthorizationException as exc:
        raise ElasticsearchUnavailableError(
            f"Elasticsearch at {url} refused access: {_reason(exc)}"
        ) from None
    except elasticsearch.ApiError as exc:
        raise ElasticsearchUnavailableError(
            f"Elasticsearch at {url} answered HTTP {exc.meta.status}: {_reason(exc)}"
        ) from None
    except elasticsearch.UnsupportedProductError as exc:
        raise ElasticsearchUnavailableError(
            f"{url} is not an Elasticsearch server ({exc})"
        ) from None
    except elasticsearch.TransportError:
        pass  # unreachable: the message below
    else:
        return  # answered this time
    raise ElasticsearchUnavailableError(f"cannot reach Elasticsearch at {url}; {START_HINT}")


def _reason(exc: Exception) -> str:
    """The ``error.reason`` of an Elasticsearch API error, else its text, on one line."""
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        error = body.get("error")
        if isinstance(error, Mapping):
            cause = error.get("root_cause") or [error]
            first = cause[0] if isinstance(cause, list) and cause else error
            if isinstance(first, Mapping) and first.get("reason"):
                return f"{first.get('type', 'error')}: {first['reason']}"
        elif isinstance(error, str):
            return error
    return " ".join(str(exc).split())


# --------------------------------------------------------------------------------------------
# Building


@dataclass
class EsBuildStats:
    """What ``build_es_index`` did."""

    url: str
    index: str
    passages: int  # sent to Elasticsearch
    failed: int
    failures: list[tuple[str, str]] = field(default_factory=list)  # (id, reason), the first few
    skipped_lines: int = 0
    count: int = 0  # documents in the index afterwards
    created: bool = False  # False: an existing index with the same mapping was added to
    seconds: float = 0.0


class EsBulkError(NoteragError):
    """Some passages were rejected by Elasticsearch; ``stats`` says which and why."""

    def __init__(self, stats: EsBuildStats) -> None:
        self.stats = stats
        shown = ", ".join(f"{pid} ({reason})" for pid, reason in stats.failures[:3])
        more = stats.failed - min(3, len(stats.failures))
        super().__init__(
            f"{stats.failed:,} of {stats.passages:,} passages failed to index into "
            f"{stats.index!r} at {stats.url}: {shown}"
            + (f" and {more:,} more" if more > 0 else "")
            + f" (the other {stats.passages - stats.failed:,} were indexed)"
        )


def build_es_index(
    corpus_path: str | os.PathLike[str],
    url: str,
    index: str,
    *,
    progress: bool = True,
    skip_bad_lines: bool = False,
    force: bool = False,
    chunk_size: int = 500,
    client: Elasticsearch | None = None,
    style: str | None = None,
) -> EsBuildStats:
    """Index a corpus into the Elasticsearch index ``index`` at ``url``.

    A missing index is created with the ``style``'s layout (``STYLE_LAYOUTS``; the default:
    ``INDEX_SETTINGS``/``INDEX_MAPPINGS``) and its documents (``Style.source``). An existing one with
    exactly that layout is added to (a passage whose id is already there is replaced); one with
    any other layout is refused unless ``force``, which deletes and recreates it. Passages are
    streamed to the bulk API in chunks of ``chunk_size``. If any passage is rejected, every
    other one is still sent, then ``EsBulkError`` reports the count and the first few ids with
    Elasticsearch's reasons.
    """
    corpus_path = Path(corpus_path)
    check_index_name(index)
    chosen = get_style(style)
    check_corpus(corpus_path)  # a typo in the path fails before any request
    if client is None:
        client = connect(url)
    else:
        check_reachable(client, url)
    started = time.perf_counter()
    created = _prepare_index(client, url, index, force, chosen)

    stats = CorpusStats()
    passages = iter_corpus(corpus_path, skip_bad_lines=skip_bad_lines, stats=stats)
    failed = 0
    failures: list[tuple[str, str]] = []
    sent = 0
    try:
        with ProgressReporter(progress, corpus_path, stats) as report:
            for ok, item in helpers.streaming_bulk(
                client,
                _actions(index, passages, chosen),
                chunk_size=chunk_size,
                raise_on_error=False,  # per-document failures are collected, not fatal
                raise_on_exception=True,  # a failed request (connection, 413, 403) is fatal
                max_retries=3,  # 429 "too many requests": back off and resend
            ):
                sent += 1
                if not ok:
                    failed += 1
                    if len(failures) < _MAX_FAILURE_EXAMPLES:
                        failures.append(_failure(item))
                if sent % chunk_size == 0:
                    report()
            report()
        require_passages(corpus_path, stats)  # an empty index would answer from nothing
        client.indices.refresh(index=index)  # searchable as soon as we return
        count = int(client.count(index=index)["count"])
    except elasticsearch.ApiError as exc:
        raise NoteragError(
            f"Elasticsearch at {url} refused a request while indexing {index!r} after "
            f"{sent:,} passages: HTTP {exc.meta.status} {_reason(exc)}"
        ) from None
    except elasticsearch.TransportError as exc:
        raise ElasticsearchUnavailableError(
            f"lost the connection to Elasticsearch at {url} while indexing {index!r} after "
            f"{sent:,} passages: {exc}"
        ) from None

    result = EsBuildStats(
        url=url,
        index=index,
        passages=sent,
        failed=failed,
        failures=failures,
        skipped_lines=stats.skipped,
        count=count,
        created=created,
        seconds=time.perf_counter() - started,
    )
    if failed:
        raise EsBulkError(result)
    return result


def _prepare_index(client: Elasticsearch, url: str, index: str, force: bool, style: Style) -> bool:
    """Make ``index`` exist with the style's layout; True if it was (re)created."""
    settings, mappings = STYLE_LAYOUTS[style.name]
    try:
        if client.indices.exists(index=index):
            problem = layout_problem(client, index, style)
            if problem is None and not force:
                return False
            if problem is not None and not force:
                raise ConfigError(
                    f"Elasticsearch index {index!r} at {url} exists with another layout "
                    f"({problem}); refusing to touch it: choose another index name or pass "
                    "--force to delete and recreate it"
                )
            client.indices.delete(index=index)
        client.indices.create(index=index, settings=settings, mappings=mappings)
    except elasticsearch.ApiError as exc:
        # Never ignored (the official script's ignore=400 hid a rejected mapping).
        raise NoteragError(
            f"Elasticsearch at {url} refused to set up index {index!r}: "
            f"HTTP {exc.meta.status} {_reason(exc)}"
        ) from None
    return True


def layout_problem(client: Elasticsearch, index: str, style: Style | None = None) -> str | None:
    """How the existing ``index`` differs from the style's layout (``STYLE_LAYOUTS``), or None."""
    expected_settings, expected_mappings = STYLE_LAYOUTS[(style or get_style(None)).name]
    mappings = _single_value(client.indices.get_mapping(index=index)).get("mappings", {})
    if str(mappings.get("dynamic", "true")) != expected_mappings["dynamic"]:
        return f"dynamic mapping is {mappings.get('dynamic', 'true')!r}, not 'strict'"
    properties = mappings.get("properties", {})
    for name, expected in expected_mappings["properties"].items():
        actual = properties.get(name)
        if actual is None:
            return f"no field {name!r}"
        for key, value in expected.items():
            if actual.get(key) != value:
                return f"field {name!r} has {key} {actual.get(key)!r}, not {value!r}"
        extra = sorted(set(actual) - set(expected))
        if extra:
            return f"field {name!r} also sets {', '.join(extra)}"
    extra_fields = sorted(set(properties) - set(expected_mappings["properties"]))
    if extra_fields:
        return f"extra fields {', '.join(extra_fields)}"
    if "similarity" not in expected_settings:
        return None  # Elasticsearch's default BM25 (k1=1.2, b=0.75), as the papers ran it
    settings = _single_value(client.indices.get_settings(index=index)).get("settings", {})
    similarity = settings.get("index", {}).get("similarity", {}).get(SIMILARITY_NAME)
    expected_similarity = expected_settings["similarity"][SIMILARITY_NAME]
    # Elasticsearch returns setting values as strings ("1.2").
    if similarity is None or any(
        str(similarity.get(key)) != str(value) for key, value in expected_similarity.items()
    ):
        return f"similarity {SIMILARITY_NAME!r} is {similarity!r}, not {expected_similarity!r}"
    return None


def _single_value(response: Any) -> dict[str, Any]:
    # Keyed by the concrete index name, which differs from the one asked for behind an alias.
    body = dict(response)
    if len(body) != 1:
        raise ConfigError(f"expected one index, Elasticsearch answered for {sorted(body)}")
    return next(iter(body.values()))


def _actions(index: str, passages: Iterator[Passage], style: Style) -> Iterator[dict[str, Any]]:
    for passage in passages:
        yield {
            "_op_type": "index",
            "_index": index,
            "_id": passage["id"],
            "_source": style.source(passage),
        }


def _failure(item: Mapping[str, Any]) -> tuple[str, str]:
    """(id, reason) of a failed bulk item ``{"index": {"_id", "status", "error"}}``."""
    info: Mapping[str, Any] = next(iter(item.values()), {}) if item else {}
    error = info.get("error")
    if isinstance(error, Mapping):
        reason = f"{error.get('type', 'error')}: {error.get('reason', '')}".strip()
    elif error:
        reason = str(error)
    else:
        reason = f"HTTP {info.get('status')}"
    return str(info.get("_id", "?")), " ".join(reason.split())


# --------------------------------------------------------------------------------------------
# Retrieval


def bm25_query_body(query: str, k: int = 5) -> dict[str, Any]:
    """The search body sent for ``query``: the papers' multi_match over title and text."""
    return {
        "query": {
            "multi_match": {"query": query, "fields": list(QUERY_FIELDS), "type": "best_fields"}
        },
        "size": k,
        "_source": ["id", "title", "text"],
        # Exact hit totals cost time on big indexes and are never read.
        "track_total_hits": False,
    }


def deepnote_query_body(query: str, k: int = 5) -> dict[str, Any]:
    """DeepNote's/Adaptive-Note's ``single_text_query`` body (``es_retrieve.py``), with the
    ``size`` they pass as a parameter: ``max(topn, rerank_topn=50)``."""
    fields = [f"{name}^{boost:g}" if boost != 1 else name for name, boost in DEEPNOTE.fields]
    return {
        "query": {"multi_match": {"query": query, "fields": fields}},
        "timeout": "100s",
        "size": DEEPNOTE.hits_wanted(k),
    }


def ircot_query_body(query: str, k: int = 5) -> dict[str, Any]:
    """IRCoT's ``retrieve_paragraphs`` body for ``document_type="title_paragraph_text"``
    (``elasticsearch_retriever.py``; empty ``must`` dropped, as it does)."""
    return {
        "size": IRCOT.hits_wanted(k),
        "_source": ["id", "title", "paragraph_text", "url", "is_abstract", "paragraph_index"],
        "query": {
            "bool": {
                "should": [
                    {"match": {"paragraph_text": query}},
                    {"match": {"title": query}},
                ]
            }
        },
    }


QUERY_BODIES: dict[str, Callable[[str], dict[str, Any]]] = {
    DEFAULT_STYLE: bm25_query_body,
    "deepnote": deepnote_query_body,
    "ircot": ircot_query_body,
}


def hit_to_document(hit: Mapping[str, Any], style: Style | None = None) -> Document:
    return _document(_hit(hit, style or get_style(None)))


def _hit(hit: Mapping[str, Any], style: Style) -> Hit:
    source = hit.get("_source") or {}
    return Hit(
        id=str(source.get("id", hit.get("_id", ""))),
        title=source.get("title", ""),
        text=source.get(style.text_field, ""),
        score=float(hit.get("_score") or 0.0),
    )


def _document(hit: Hit) -> Document:
    return Document(
        page_content=hit.text,
        id=hit.id,
        metadata={"id": hit.id, "title": hit.title, "score": hit.score},
    )


class ElasticsearchBM25Retriever(SearchMixin, ElasticsearchRetriever):
    """langchain-elasticsearch's ``ElasticsearchRetriever`` with noterag's BM25 query and documents.

    ``k`` is the default number of passages; ``invoke(query, k=3)`` overrides it per call.
    ``style`` (``styles.py``) picks the query, how many hits it asks for and their
    re-ranking; ``body_func`` (query -> search body) replaces the style's query, its ``size``
    always set to ``k`` (or the style's buffer). Pass ``client`` or ``es_url`` (credentials as
    arguments or from the ``NOTERAG_ES_*`` environment).
    """

    k: int = Field(default=5, ge=0)
    url: str = ""
    style: Style = Field(default_factory=lambda: get_style(None))

    def __init__(
        self,
        index_name: str,
        body_func: Callable[[str], dict[str, Any]] | None = None,
        *,
        k: int = 5,
        client: Elasticsearch | None = None,
        es_url: str | None = None,
        es_api_key: str | None = None,
        es_user: str | None = None,
        es_password: str | None = None,
        style: str | Style | None = None,
    ) -> None:
        chosen = style if isinstance(style, Style) else get_style(style)
        if client is None:
            if es_url is None:
                raise ConfigError("ElasticsearchBM25Retriever needs client or es_url")
            client = connect(es_url, api_key=es_api_key, user=es_user, password=es_password)
        default_body = QUERY_BODIES[chosen.name]
        super().__init__(
            index_name=index_name,
            body_func=body_func or default_body,  # its size is set per search
            document_mapper=lambda hit: hit_to_document(hit, chosen),
            client=client,
        )
        self.k = check_k(k)
        self.url = es_url or _client_url(client)
        self.style = chosen

    def search(self, query: str, k: int | None = None) -> list[Document]:
        """The top ``k`` passages as Documents, without LangChain callbacks."""
        k = self.k if k is None else check_k(k)
        if k == 0:
            return []
        body = dict(self.body_func(query))
        body["size"] = self.style.hits_wanted(k)
        try:
            result = self.client.search(index=self.index_name, body=body)
        except elasticsearch.NotFoundError:
            raise IndexNotFoundError(
                f"no Elasticsearch index {self.index_name!r} at {self.url}; build it with "
                f"`noterag index CORPUS --es {self.url} --index {self.index_name}`"
            ) from None
        except elasticsearch.ApiError as exc:
            raise NoteragError(
                f"Elasticsearch at {self.url} refused the search: HTTP {exc.meta.status} "
                f"{_reason(exc)}"
            ) from None
        except elasticsearch.TransportError:
            raise ElasticsearchUnavailableError(
                f"cannot reach Elasticsearch at {self.url}; {START_HINT}"
            ) from None
        hits = [_hit(hit, self.style) for hit in result["hits"]["hits"]]
        return [_document(hit) for hit in self.style.postprocess(query, hits, k)]


def _client_url(client: Elasticsearch) -> str:
    try:
        node = client.transport.node_pool.all()[0].config
        return f"{node.scheme}://{node.host}:{node.port}{node.path_prefix}"
    except Exception:  # noqa: BLE001 - only used in messages
        return "the Elasticsearch server"


def load_es_retriever(argument: str, k: int = 5) -> ElasticsearchBM25Retriever:
    """The retriever for ``"es:<argument>"`` (``<url>/<index>[?style=NAME]``); fails now if the
    server or the index is missing, or the index was not built for the style."""
    url, index, style = parse_es_options(argument)
    client = connect(url)
    if not client.indices.exists(index=index):
        raise IndexNotFoundError(
            f"no Elasticsearch index {index!r} at {url}; build it with "
            f"`noterag index CORPUS --es {url} --index {index}{_style_flag(style)}`"
        )
    problem = layout_problem(client, index, style)
    if problem is not None and style.name != DEFAULT_STYLE:
        # A style's query names fields only its own layout has: refused now, not mid-run.
        raise ConfigError(
            f"Elasticsearch index {index!r} at {url} was not built for style {style.name!r} "
            f"({problem}); build one with `noterag index CORPUS --es {url} --index NAME"
            f"{_style_flag(style)}`"
        )
    return ElasticsearchBM25Retriever(index, client=client, k=k, es_url=url, style=style)


def _style_flag(style: Style) -> str:
    return "" if style.name == DEFAULT_STYLE else f" --style {style.name}"
