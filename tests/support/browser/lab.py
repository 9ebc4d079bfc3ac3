"""JupyterLab in Playwright: the gpuhub panels as a person opens them."""

from __future__ import annotations

from typing import Any


def jobs_panel(page: Any) -> Any:
    """Open the Jobs sidebar panel (its tab in the left bar) and return it."""
    panel = page.locator("#gpuhub-jobs-panel")
    if not panel.is_visible():
        page.locator('.jp-SideBar .lm-TabBar-tab[data-id="gpuhub-jobs-panel"]').click()
    panel.wait_for(state="visible")
    return panel
