"""A graph served by ``langgraph dev`` (or LangGraph Platform), used as a local Runnable.

    NOTERAG_MODEL=local langgraph dev --no-browser     # in the repo, serves langgraph.json
    python examples/remote_graph.py http://127.0.0.1:2024

``RemoteGraph`` speaks the server's API; ``invoke``/``stream`` take the same input, context and
stream modes as the local graph, so the progress events stream over HTTP too.
"""

from __future__ import annotations

import sys

from langgraph.pregel.remote import RemoteGraph

QUESTION = "In which year was the architect of the Velmora Bridge born?"


def remote(url: str, method: str = "deepnote") -> RemoteGraph:
    # The assistant id of a graph from langgraph.json is its graph id.
    return RemoteGraph(method, url=url)


if __name__ == "__main__":
    graph = remote(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:2024")
    for part in graph.stream(
        {"question": QUESTION},
        context={"max_steps": 2, "max_tokens": 96},
        stream_mode=["custom", "values"],
        version="v2",  # parts as {"type": mode, "data": ...}
    ):
        event = part["data"]
        if part["type"] == "custom":
            print(f"[{event['type']}]", {k: v for k, v in event.items() if k != "type"})
        elif event.get("answer"):
            print("answer:", event["answer"])
