"""The trace page: a run's steps as one HTML file (``page``), rendered from the Jinja2 templates
under ``templates/``."""
