"""Following a spawn's progress stream, as JupyterHub's spawn page does, for tests."""

from __future__ import annotations

import json
import threading
from typing import Any

import requests

from harness.hub.process import Hub


class Progress:
    """Follows a user's spawn progress stream in the background, as the spawn page does."""

    def __init__(self, hub: Hub, user: str) -> None:
        self.messages: list[str] = []
        self.end: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._follow, args=(hub, user), daemon=True)
        self._thread.start()

    def _follow(self, hub: Hub, user: str) -> None:
        with hub.api("GET", f"/users/{user}/server/progress", stream=True) as response:
            try:
                for line in response.iter_lines(decode_unicode=True):
                    if line and line.startswith("data:"):
                        event = json.loads(line[5:])
                        self.messages.append(event.get("message", ""))
                        if event.get("failed") or event.get("ready"):
                            self.end = event
                            return
            except requests.exceptions.ChunkedEncodingError:
                return  # the hub went away mid-stream (the restart test stops it)

    def said(self, text: str) -> bool:
        return any(text in m for m in self.messages)
