"""The window's extension panels: each package exposes ``install(host) -> part``.

``MainWindow.__init__`` installs every one listed here and keeps what ``install`` returns
(``window.training_panel``, ``window.diagnosis_panels``, ``window.run_panel``). All of them
are part of gradviz: one that fails to import or install is a bug, reported in the Errors
panel and in the log, while the rest of the window goes on working.
"""
from __future__ import annotations

import importlib
import logging
import traceback
from typing import Any

log = logging.getLogger(__name__)

EXTENSIONS = {
    "training": "gradviz.app.training",
    "diagnosis": "gradviz.app.diagnosis",
    "runs": "gradviz.app.runs",
    "attribution": "gradviz.app.attribution",
    "failing_forward": "gradviz.app.failing_forward",
    "compare": "gradviz.app.compare",
    "open_model": "gradviz.app.open_model",     # File ▸ Open model…, .pt2 programs, weights files (cli)
}


def load_extensions(host, extensions: dict[str, str] | None = None,
                    ) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Import each extension ({name: module}, ``EXTENSIONS`` by default) and call its ``install(host)``.

    Returns ({name: what install returned}, [(name, traceback text)] of the ones that failed).
    """
    parts: dict[str, Any] = {}
    failed: list[tuple[str, str]] = []
    for name, module in (EXTENSIONS if extensions is None else extensions).items():
        try:
            parts[name] = importlib.import_module(module).install(host)
        except Exception:  # noqa: BLE001 - a broken panel must not take the window down: it is reported
            text = traceback.format_exc()
            log.error("the %s extension could not be installed:\n%s", name, text)
            failed.append((name, text))
    return parts, failed
