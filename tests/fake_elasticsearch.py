"""A stand-in Elasticsearch 8 HTTP server on 127.0.0.1 that records every request.

No Elasticsearch server can be installed on these machines; this one answers the few
endpoints noterag uses (ping/info, index exists/create/delete, mapping and settings, bulk,
refresh, count, search) the way Elasticsearch does, so the real ``elasticsearch`` client and
``helpers.streaming_bulk`` run unchanged and the tests can read what went over the wire.
Search "scoring" is a word-overlap count in the query's structure (the best boosted field of a
``multi_match``, the sum of a ``bool``'s ``match`` clauses): enough to return documents and to
see a re-ranking move them, not to test BM25.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def ndjson(self) -> list[Any]:
        return [json.loads(line) for line in self.body.splitlines() if line.strip()]


@dataclass
class FakeElasticsearch:
    requests: list[Request] = field(default_factory=list)
    indices: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {settings, mappings}
    docs: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    reject_ids: set[str] = field(default_factory=set)  # bulk items that fail like a bad mapping
    reject_create: bool = False  # answer index creation like a mapping Elasticsearch refuses
    require_api_key: str | None = None  # then anything else gets 401

    def __post_init__(self) -> None:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                # Lower-case names: HTTP header names are case-insensitive.
                headers = {name.lower(): value for name, value in self.headers.items()}
                request = Request(self.command, self.path, headers, body)
                fake.requests.append(request)
                status, payload = fake.answer(request)
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                # The 8.x client refuses servers that do not send this header.
                self.send_header("X-Elastic-Product", "Elasticsearch")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ----------------------------------------------------------------------------- queries

    def sent(self, method: str, pattern: str) -> list[Request]:
        """The requests whose method and path (without query string) match these regexes."""
        return [
            r
            for r in self.requests
            if re.fullmatch(method, r.method) and re.fullmatch(pattern, urlsplit(r.path).path)
        ]

    def bulk_actions(self) -> list[Any]:
        """Every line of every bulk request, in order (the client sends bulk as PUT)."""
        return [line for r in self.sent("PUT|POST", "/_bulk") for line in r.ndjson()]

    # ----------------------------------------------------------------------------- answers

    def answer(self, request: Request) -> tuple[int, Any]:
        expected_key = self.require_api_key
        if (
            expected_key is not None
            and request.headers.get("authorization") != f"ApiKey {expected_key}"
        ):
            return 401, _error(401, "security_exception", "missing authentication")
        path = urlsplit(request.path).path.strip("/")
        parts = path.split("/") if path else []
        method = request.method
        if not parts:
            return 200, {
                "name": "fake",
                "cluster_name": "fake",
                "version": {"number": "8.17.0", "build_flavor": "default"},
                "tagline": "You Know, for Search",
            }
        if parts == ["_bulk"] or parts[-1] == "_bulk":
            return self._bulk(request.ndjson())
        index = parts[0]
        if len(parts) == 1:
            if method == "HEAD":
                return (200 if index in self.indices else 404), None
            if method == "PUT":
                if index in self.indices:
                    return 400, _error(400, "resource_already_exists_exception", "exists")
                if self.reject_create:
                    return 400, _error(
                        400, "mapper_parsing_exception", "Root mapping definition has unsupported"
                    )
                body = request.json()
                self.indices[index] = {
                    "settings": body.get("settings", {}),
                    "mappings": body.get("mappings", {}),
                }
                self.docs[index] = {}
                return 200, {"acknowledged": True, "index": index}
            if method == "DELETE":
                self.indices.pop(index, None)
                self.docs.pop(index, None)
                return 200, {"acknowledged": True}
        if index not in self.indices:
            return 404, _error(404, "index_not_found_exception", f"no such index [{index}]")
        action = parts[1]
        if action == "_mapping":
            return 200, {index: {"mappings": self.indices[index]["mappings"]}}
        if action == "_settings":
            settings = self.indices[index]["settings"]
            # Elasticsearch answers settings as strings under "index".
            as_strings = json.loads(json.dumps(settings), parse_float=str, parse_int=str)
            return 200, {index: {"settings": {"index": as_strings}}}
        if action == "_refresh":
            return 200, {"_shards": {"total": 1, "successful": 1, "failed": 0}}
        if action == "_count":
            return 200, {"count": len(self.docs[index])}
        if action == "_search":
            return 200, self._search(index, request.json() if request.body else {})
        return 400, _error(400, "illegal_argument_exception", f"fake has no {method} {path}")

    def _bulk(self, lines: list[Any]) -> tuple[int, Any]:
        items = []
        for header, source in zip(lines[::2], lines[1::2], strict=True):
            ((op, meta),) = header.items()
            index, doc_id = meta["_index"], meta["_id"]
            if doc_id in self.reject_ids or index not in self.indices:
                items.append(
                    {
                        op: {
                            "_index": index,
                            "_id": doc_id,
                            "status": 400,
                            "error": {
                                "type": "document_parsing_exception",
                                "reason": f"[1:9] failed to parse field [title] of document [{doc_id}]",
                            },
                        }
                    }
                )
                continue
            self.docs[index][doc_id] = source
            items.append({op: {"_index": index, "_id": doc_id, "status": 201, "result": "created"}})
        errors = any("error" in next(iter(item.values())) for item in items)
        return 200, {"took": 1, "errors": errors, "items": items}

    def _search(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        score = _scorer(body.get("query", {}))
        scored = []
        for doc_id, source in self.docs[index].items():
            value = score(source)
            if value > 0:
                scored.append((value, doc_id, source))
        scored.sort(key=lambda hit: (-hit[0], hit[1]))
        hits = [
            {"_index": index, "_id": doc_id, "_score": value, "_source": source}
            for value, doc_id, source in scored[: body.get("size", 10)]
        ]
        return {"took": 1, "timed_out": False, "hits": {"max_score": None, "hits": hits}}


def _words(text: Any) -> set[str]:
    return set(re.findall(r"\w+", str(text).lower()))


def _scorer(query: dict[str, Any]) -> Any:
    """A document -> score function with the query's structure and word overlap for BM25:
    ``multi_match`` takes the best boosted field (``best_fields``), a ``bool`` sums its
    ``should`` ``match`` clauses."""
    if "multi_match" in query:
        spec = query["multi_match"]
        words = _words(spec.get("query", ""))
        fields = []
        for entry in spec.get("fields", []):
            name, _, boost = entry.partition("^")
            fields.append((name, float(boost or 1)))
        return lambda source: max(
            (boost * len(words & _words(source.get(name, ""))) for name, boost in fields),
            default=0,
        )
    clauses = query.get("bool", {}).get("should", [])
    matches = [next(iter(clause["match"].items())) for clause in clauses if "match" in clause]
    return lambda source: sum(
        len(_words(text) & _words(source.get(name, ""))) for name, text in matches
    )


def _error(status: int, kind: str, reason: str) -> dict[str, Any]:
    return {
        "error": {"root_cause": [{"type": kind, "reason": reason}], "type": kind, "reason": reason},
        "status": status,
    }
