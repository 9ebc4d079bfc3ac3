"""``%gpu``: this server's GPUs, as a table in the notebook.

It asks the kernel's own Jupyter server for ``/gpuhub/api/metrics`` (the same sampler as the
sidebar, with notebook paths for the GPU memory); when that server cannot be reached (a plain
IPython, a server without gpuhub) it reads NVML (or the simulated GPUs) in this kernel with
the same reading code. In a job (``GPUHUB_JOB_ID``) it shows the job's own GPUs, and the job's
kernel as "this job".

``%gpu --watch [SECONDS]`` keeps the table live in an ipywidgets output for that long, from
the server's metrics stream (``/gpuhub/api/metrics/stream``: each sample pushed as the sampler
takes it), or by polling once a second where the stream is refused (a proxy without
WebSockets, an older gpuhub) or there is no server.

Imports stay inside the functions: ``%load_ext gpuhub_lab`` must be fast.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable
from typing import Any

GIB = 2**30
#: ``%gpu --watch`` redraws at most this often, however fast the server samples.
WATCH_REDRAW_S = 0.2
#: and polls this often where the stream is refused.
WATCH_POLL_S = 1.0


def fetch_metrics(timeout: float = 5.0) -> dict[str, Any]:
    """Metrics from this kernel's Jupyter server, else from NVML in this process; in a job,
    of the job's GPUs only."""
    from gpuhub.core.env import JOB_ID_ENV

    job = os.environ.get(JOB_ID_ENV)
    if job and in_own_pod():
        # A cluster job's pod has no Jupyter server to ask (the kernel's parent is the job's
        # runner): its GPUs are the pod's, read here.
        return _for_job(_from_nvml(), job)
    try:
        data = _from_server(timeout)
        holdings = _holdings(timeout)  # one request for both
        data["budgets"] = _budgets(holdings)
        data["claimed"] = _claimed(holdings, job)
    except Exception as exc:  # no server, no gpuhub there, refused...: fall back
        data = _from_nvml()
        what = "the simulated GPUs" if data.get("source") == "simulated" else "NVML"
        data["note"] = (
            f"Read {what} in this kernel, as its Jupyter server did not answer ({exc}); "
            "notebook names are not known here."
        )
    return _for_job(data, job) if job else data


def in_own_pod(environ: dict[str, str] | None = None) -> bool:
    """Whether this job's kernel runs in a pod of its own (a Kubernetes job) rather than under
    its user's server: a local job is told its server's pid, and a server's address may be
    given outright; a cluster job's pod gets neither."""
    from gpuhub.core.env import SERVER_PID_ENV, SERVER_URL_ENV

    env = os.environ if environ is None else environ
    return not (env.get(SERVER_PID_ENV) or env.get(SERVER_URL_ENV))


def _for_job(data: dict[str, Any], job: str) -> dict[str, Any]:
    """A job's view: the GPUs the job was given (its own ``CUDA_VISIBLE_DEVICES``, a part of
    its server's), not every GPU of the server."""
    from .metrics.assigned import assignment

    assigned = assignment()
    devices = set(assigned["devices"]) if assigned else set()
    gpus = [g for g in data.get("gpus") or [] if g.get("index") in devices]
    out = {**data, "job": job, "assigned": assigned, "gpus": gpus}
    if not assigned:
        out.update(available=False, reason="This job runs on CPU only; it was given no GPU.")
    return out


def _from_server(timeout: float) -> dict[str, Any]:
    from urllib import request

    from .jobs_client import find_server

    server = find_server()
    headers = {"Accept": "application/json"}
    if server.token:
        headers["Authorization"] = f"token {server.token}"
    req = request.Request(server.url + "gpuhub/api/metrics?since=9e99", headers=headers)
    with request.urlopen(req, timeout=timeout) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


def _holdings(timeout: float) -> dict[str, Any]:
    """What the hub says this user holds (through the server's ``/gpuhub/api/holdings``);
    empty when the hub cannot be asked (an older gpuhub, no hub): the GPUs are still shown."""
    from urllib import request

    from .jobs_client import find_server

    server = find_server()
    headers = {"Accept": "application/json"}
    if server.token:
        headers["Authorization"] = f"token {server.token}"
    try:
        req = request.Request(server.url + "gpuhub/api/holdings", headers=headers)
        with request.urlopen(req, timeout=timeout) as response:
            answer = json.loads(response.read())
    except Exception:
        return {}
    return answer if isinstance(answer, dict) else {}


def _budgets(answer: dict[str, Any]) -> list[str]:
    """The user's GPU-hour budget sentences, as the hub says them; none when none applies."""
    found = answer.get("budgets") or []
    return [str(b["text"]) for b in found if isinstance(b, dict) and b.get("text")]


def _claimed(answer: dict[str, Any], job: str | None) -> list[str]:
    """The devices this server (or job) was allocated through DRA, as the hub names them
    ("GPU 3 (A100-SXM4-80GB) on a100-7", the holdings' ``device_names``); none elsewhere."""
    kind, name = ("job", job) if job else ("server", os.environ.get("JUPYTERHUB_SERVER_NAME", ""))
    for holding in answer.get("holdings") or []:
        if isinstance(holding, dict) and (holding.get("kind"), holding.get("name")) == (kind, name):
            return [str(d) for d in holding.get("device_names") or []]
    return []


def _from_nvml() -> dict[str, Any]:
    from gpuhub.core.env import NVML_MODULE_ENV

    from .metrics.assigned import assignment
    from .metrics.nvml import NVMLSource
    from .metrics.simulated import module_name

    module = os.environ.get(NVML_MODULE_ENV) or module_name() or "pynvml"
    if module == module_name():
        from gpuhub.core.simulated import TRACKER

        TRACKER.count_self = True  # this kernel is a GPU user, unlike a server reading
    source = NVMLSource(module, visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
    try:
        gpus, reason = source.read()
    finally:
        source.close()
    return {
        "available": bool(gpus),
        "reason": reason,
        "gpus": gpus,
        "assigned": assignment(),
        "source": "simulated" if module == module_name() else "nvml",
    }


def _own_pids() -> set[int]:
    """This kernel and its children: their GPU memory is "this notebook"."""
    pids = {os.getpid()}
    try:
        import psutil

        pids.update(p.pid for p in psutil.Process().children(recursive=True))
    except Exception:
        pass
    return pids


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.1f} GiB"


def _num(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:g}{unit}"


def _owner(process: dict[str, Any], own: set[int], job: str | None = None) -> str:
    if process["pid"] in own:
        return "this job" if job else "this notebook"
    if process.get("path"):
        return str(process["path"])
    if process.get("kernel_id"):
        return f"kernel {str(process['kernel_id'])[:8]}"
    return f"pid {process['pid']} (not a kernel of this server)"


class GPUReport:
    """What ``%gpu`` displays: HTML in JupyterLab, a text table elsewhere."""

    def __init__(self, data: dict[str, Any], own_pids: set[int] | None = None) -> None:
        self.data = data
        self.own = own_pids if own_pids is not None else _own_pids()

    def _headline(self) -> str | None:
        """The assignment (and, for simulated GPUs, what their figures mean), or None."""
        from .metrics.assigned import describe

        assigned = self.data.get("assigned")
        if not assigned:
            return None
        text = f"{describe(assigned)} to this {'job' if self.data.get('job') else 'server'}."
        claimed = self.data.get("claimed")
        if claimed:
            text += f" Allocated: {', '.join(claimed)}."
        if not self.data.get("available"):
            reason = self.data.get("reason") or "they cannot be read here."
            return f"{text} No live figures: {reason}"
        if self.data.get("source") == "simulated":
            text += (
                " Simulated: utilization is the CPU activity of the processes using them, "
                "memory their resident memory."
            )
        return text

    def _owner(self, process: dict[str, Any]) -> str:
        return _owner(process, self.own, self.data.get("job"))

    def _label(self, gpu: dict[str, Any]) -> str:
        kind = "MIG slice of GPU" if gpu.get("mig") else "GPU"
        return f"{kind} {gpu['index']}: {gpu['name']}"

    def _budget_lines(self) -> list[str]:
        """ "GPU-hour budget: 14.2 of 20 GPU-hours used this week; resets Monday 00:00
        Europe/Berlin." (the hub's words)."""
        return [f"GPU-hour budget: {text}." for text in self.data.get("budgets") or []]

    def __repr__(self) -> str:
        headline = self._headline()
        if not self.data.get("available"):
            first = headline or f"No GPU: {self.data.get('reason') or 'unknown reason'}"
            return "\n".join([first, *self._budget_lines()])
        lines = [headline] if headline else []
        lines += self._budget_lines()
        for gpu in self.data["gpus"]:
            lines.append(self._label(gpu))
            if gpu.get("error"):
                lines.append(f"  {gpu['error']}")
                continue
            lines.append(
                f"  utilization {_num(gpu['utilization'], '%')}  memory "
                f"{_gib(gpu['memory_used'])} / {_gib(gpu['memory_total'])}  "
                f"{_num(gpu['temperature'], ' °C')}  {_num(gpu['power'], ' W')}"
            )
            for p in gpu["processes"]:
                lines.append(f"    {_gib(p['memory_used']):>10}  {self._owner(p)}")
        if self.data.get("note"):
            lines.append(self.data["note"])
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        esc = html.escape
        headline = self._headline()
        budgets = "".join(
            f'<div class="gpuhub-gpu-budget">{esc(line)}</div>' for line in self._budget_lines()
        )
        if not self.data.get("available"):
            if headline:
                return f'<div class="gpuhub-gpu-magic">{esc(headline)}</div>{budgets}'
            reason = self.data.get("reason") or "unknown reason"
            return f'<div class="gpuhub-gpu-magic"><b>No GPU</b>: {esc(reason)}</div>{budgets}'
        rows = []
        for gpu in self.data["gpus"]:
            if gpu.get("error"):
                rows.append(
                    f"<tr><td>{esc(self._label(gpu))}</td><td colspan='4'>"
                    f"{esc(gpu['error'])}</td></tr>"
                )
                continue
            used, total = gpu["memory_used"], gpu["memory_total"]
            share = 100 * used / total if used is not None and total else 0
            util = gpu["utilization"]
            procs = "".join(
                f"<li>{esc(_gib(p['memory_used']))}: {esc(self._owner(p))}</li>"
                for p in gpu["processes"]
            )
            rows.append(
                "<tr>"
                f"<td>{esc(self._label(gpu))}</td>"
                f"<td>{_bar(util or 0)} {esc(_num(util, '%'))}</td>"
                f"<td>{_bar(share)} {esc(_gib(used))} / {esc(_gib(total))}</td>"
                f"<td>{esc(_num(gpu['temperature'], ' °C'))}, {esc(_num(gpu['power'], ' W'))}</td>"
                f"<td><ul style='margin:0;padding-left:1em'>{procs or '<li>none</li>'}</ul></td>"
                "</tr>"
            )
        note = self.data.get("note")
        return (
            (f"<div><b>{esc(headline)}</b></div>" if headline else "")
            + budgets
            + '<table class="gpuhub-gpu-magic"><thead><tr><th>GPU</th><th>Utilization</th>'
            "<th>Memory</th><th>Temp, power</th><th>Memory held by</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>"
            + (f"<div><small>{esc(note)}</small></div>" if note else "")
        )


def _bar(percent: float) -> str:
    width = max(0.0, min(100.0, float(percent)))
    return (
        "<span style='display:inline-block;width:5em;height:0.7em;border:1px solid "
        "var(--jp-border-color1,#999);vertical-align:middle'><span style='display:block;"
        f"height:100%;width:{width:.0f}%;background:var(--jp-brand-color1,#1976d2)'></span></span>"
    )


def gpu(line: str = "") -> GPUReport | None:
    """%gpu [--watch [SECONDS]]: show this server's GPUs and which notebooks hold their memory."""
    args = line.split()
    if args and args[0] in ("--watch", "-w"):
        try:
            seconds = float(args[1]) if len(args) > 1 else 60.0
        except ValueError:
            raise ValueError(f"%gpu --watch takes a number of seconds, not {args[1]!r}.") from None
        if not 0 < seconds <= 3600:
            raise ValueError("%gpu --watch takes between 0 and 3600 seconds.")
        _watch(seconds)
        return None
    if args:
        raise ValueError(f"%gpu does not understand {line.strip()!r}; use %gpu or %gpu --watch.")
    return GPUReport(fetch_metrics())


def _watch(seconds: float) -> None:
    """Refresh an ipywidgets HTML view from a background thread, leaving the kernel free."""
    import threading

    import ipywidgets
    from IPython.display import display

    view = ipywidgets.HTML(GPUReport(fetch_metrics())._repr_html_())
    display(view)
    own = _own_pids()

    def show(data: dict[str, Any]) -> None:
        view.value = GPUReport(data, own)._repr_html_()

    threading.Thread(
        target=watch_metrics, args=(seconds, show), name="gpuhub-gpu-watch", daemon=True
    ).start()


def watch_metrics(seconds: float, show: Callable[[dict[str, Any]], None]) -> None:
    """Call ``show(metrics)`` with each update for ``seconds``: pushed by this kernel's server
    where its stream answers, else polled every ``WATCH_POLL_S`` (blocks; run it in a thread)."""
    import asyncio
    import time

    from gpuhub.core.env import JOB_ID_ENV

    deadline = time.monotonic() + seconds
    job = os.environ.get(JOB_ID_ENV)
    why: str | None
    if job and in_own_pod():
        why = "a cluster job's pod has no Jupyter server"
    else:
        try:
            from .jobs_client import find_server

            why = asyncio.run(_from_stream(find_server(), deadline, show, job))
        except Exception as exc:
            why = _refusal(exc)
    if why is None:
        return
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(WATCH_POLL_S, left))
        data = fetch_metrics()
        polled = (
            f"Refreshed every {WATCH_POLL_S:g} s by polling, as the server's metrics stream "
            f"is not available ({why})."
        )
        data["note"] = f"{data['note']} {polled}" if data.get("note") else polled
        show(data)


async def _from_stream(
    server: Any, deadline: float, show: Callable[[dict[str, Any]], None], job: str | None
) -> str | None:
    """Show each message of ``/gpuhub/api/metrics/stream`` until ``deadline``; None when it
    lasted, else why it could not (then the caller polls)."""
    import asyncio
    import time

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    headers = {"Authorization": f"token {server.token}"} if server.token else {}
    url = "ws" + server.url.removeprefix("http") + "gpuhub/api/metrics/stream"
    request = HTTPRequest(url, headers=headers, connect_timeout=5, request_timeout=5)
    connection = await websocket_connect(request)
    try:
        shown = 0.0
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = await asyncio.wait_for(connection.read_message(), left)
            except TimeoutError:
                return None
            if message is None:
                return "the server closed it"
            if time.monotonic() - shown < WATCH_REDRAW_S:
                continue  # the next sample comes soon; never redraw faster than a person reads
            data = json.loads(message)
            data.pop("history", None)
            data["note"] = f"Live: the server pushes every sample (each {data['interval']:g} s)."
            show(_for_job(data, job) if job else data)
            shown = time.monotonic()
    finally:
        connection.close()
    return None


def _refusal(exc: Exception) -> str:
    """Why the stream could not be opened, in a few words."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and code >= 400:
        return f"HTTP {code} when asked for a WebSocket"
    return str(exc) or type(exc).__name__


def register(ipython: Any) -> None:
    ipython.register_magic_function(gpu, magic_kind="line", magic_name="gpu")
