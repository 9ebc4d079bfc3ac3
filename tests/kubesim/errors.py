"""Kubernetes ``Status`` bodies for the errors the apiserver returns."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """An error the apiserver answers with a ``Status`` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def not_found(resource: str, name: str) -> APIError:
    return APIError(
        404,
        "NotFound",
        f'{resource} "{name}" not found',
        {"name": name, "kind": resource.split(".")[0]},
    )


def already_exists(resource: str, name: str) -> APIError:
    return APIError(
        409,
        "AlreadyExists",
        f'{resource} "{name}" already exists',
        {"name": name, "kind": resource.split(".")[0]},
    )


def conflict(resource: str, name: str) -> APIError:
    return APIError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        {"name": name, "kind": resource.split(".")[0]},
    )


def invalid(kind: str, name: str, causes: list[tuple[str, str, str]], group: str = "") -> APIError:
    """422 Invalid; each cause is ``(field, reason, message)`` e.g. ``("spec.x", "FieldValueRequired", "Required value")``."""
    text = "; ".join(f"{f}: {m}" if f else m for f, _, m in causes)
    if len(causes) > 1:
        text = "[" + ", ".join(f"{f}: {m}" if f else m for f, _, m in causes) + "]"
    return APIError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            **({"group": group} if group else {}),
            "kind": kind,
            "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
        },
    )


def bad_request(message: str) -> APIError:
    return APIError(400, "BadRequest", message)


def expired(requested: int | str, current: int) -> APIError:
    return APIError(410, "Expired", f"too old resource version: {requested} ({current})")
