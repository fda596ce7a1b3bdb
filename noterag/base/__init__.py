"""What every layer stands on: the error types (``errors``), safe file writes (``files``),
redaction of secrets (``redact``) and escaping of untrusted text for the terminal
(``terminal``). It imports nothing of noterag."""
