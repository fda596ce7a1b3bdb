"""One module per method (the registry, ``noterag.registry.methods.METHODS``, finds every module
here with a ``SPEC``). A method's module holds all that is its own:

- its algorithm box, as the module docstring, with the step that runs each line;
- ``SPEC``, its ``MethodSpec``: settings, state, outputs, model roles, prompt sets per profile,
  wiring, stop rules, eval-row fields, trace-page layout and progress lines (data);
- what only it uses of those: its settings dataclass and state (shared ones live in
  ``noterag.core.context`` and ``noterag.core.state``), its stop rule, its progress lines
  (``noterag.core.progress.Line``: what the CLI and the trace page show of its events), its
  trace template, and the wiring of its steps;
- ``make_graph``, the entry that langgraph.json names.

The modules without a ``SPEC`` are the shapes that several methods share: ``assemble`` (the
graph around every method's own wiring), ``note_loop`` (Adaptive-Note's and DeepNote's loop
and stop rule), ``single_pass`` (the baselines that run their steps once), and ``single_step``
(one retrieval, one call over the passages, then the answer).
"""
