"""``noterag reproduce``: a paper's published table, re-run and set beside the published numbers.

``tables`` reads the published tables (``tables/*.yaml``, one file per table: rows, columns,
datasets and every published cell, transcribed exactly from the paper); ``plan`` says what a
table's reproduction runs (runs, skipped rows, missing inputs, estimated cost); ``run`` makes
the runs that are not done (ordinary eval run directories); ``report`` sets our values beside
the published ones (Δ, bootstrap interval) and writes table.md, table.json and table.png.
"""
