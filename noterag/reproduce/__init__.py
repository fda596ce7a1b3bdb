"""``noterag reproduce``: a paper's published table, re-run and set beside the published numbers.

``tables`` reads the published tables (``tables/*.yaml``, one file per table: rows, columns,
datasets and every published cell, transcribed exactly from the paper).
"""
