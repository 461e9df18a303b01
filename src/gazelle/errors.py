"""`RunError`: a fault that ends a run with a one-line reason (no traceback on the CLI).

Raised where gazelle knows exactly what went wrong and what to do about it, e.g. a private
Ray instance that is not on loopback, a cluster that lost the nodes a run needs. The CLI
prints `gazelle <command>: error: <reason>` and exits 1; the API raises it as it is.
"""

from __future__ import annotations


class RunError(RuntimeError):
    """A run stopped (or refused to start) for a reason `str(err)` says in one line."""
