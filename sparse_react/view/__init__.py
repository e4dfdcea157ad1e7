"""See and steer episodes in a browser: `sparse-react view RUN_DIR ...` (a Starlette app over the named
run folders) or `--static OUT_DIR` (the same pages as plain files)."""

from sparse_react.view.app import LOOPBACK_NAMES, create_app
from sparse_react.view.static import export_static

__all__ = ["LOOPBACK_NAMES", "create_app", "export_static"]
