"""The engine, and the method declaration every graph module fills in.

Top down (pyproject.toml's second layers contract): the question entry, the stop decisions, the
task check and the checks of a method's declaration made when its graph is built (``question``,
``decision``, ``tasks``, ``checks``); the step runner (``step``); the method
declaration (``spec``); fidelity profiles, prompt rendering, the operator's run policy and the
answer-only Runnable (``profiles``, ``prompt``, ``policy``, ``lcel``); reply parsing, settings,
the typed state, retry policies and the progress lines as data (``parsing``, ``context``,
``state``, ``retry``, ``progress``). It stands on
``noterag.retrievers``, ``noterag.models``, ``noterag.datasets`` and ``noterag.base``.
"""
