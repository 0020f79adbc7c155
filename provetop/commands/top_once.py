"""``provetop top --once`` and ``--json``: the machine's GPUs, their processes and the pools
of every attached engine and traced process, printed once (as ``nvitop --once``), then exit.

Why without the dashboard: for a script, a log or a quick look over ssh the picture is text.
Every figure comes from the code the dashboard uses: the GPUs from
:func:`provetop.sources.nvml.sample` (NVML, then ``/proc`` for each process's host figures,
read twice a quarter second apart for its %CPU), the engines and traces from their own
sockets (:func:`provetop.sources.discovery.local_engines`), folded by the one reducer. Without
NVML one line says so and the engines and traces are still printed.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

from provetop.base import nvml
from provetop.recordings.state import State, phantom_bytes
from provetop.sources.client import EngineClient
from provetop.sources.discovery import answers, local_engines
from provetop.sources.nvml import sample
from provetop.sources.procstat import ProcStat
from provetop.tui.style import size
from provetop.tui.widgets.processes import run_time

CPU_SAMPLE_S = 0.25  # between the two /proc readings that give a process's %CPU
READ_S = 2.0  # the most time spent reading one engine's first events
POOL_FIELDS = ("async_used", "async_reserved", "sync_used", "sync_cached", "driver_free")


def read_gpus(only: set[int] | None) -> tuple[list[dict[str, Any]], str | None, str | None]:
    """(one ``gpu`` sample per GPU shown, why NVML is unavailable or None, the driver)."""
    nv = nvml.module()
    if nv is None:
        return [], nvml.error() or "NVML unavailable", None
    devices = [d for d in nvml.local_devices(nv) if only is None or d["index"] in only]
    if not devices:
        return [], None if only else "NVML lists no GPU", nvml.driver_version(nv)
    procs = ProcStat()
    for d in devices:  # the first reading: each process's %CPU starts from here
        sample(nv, d, 0, None, procs)
    time.sleep(CPU_SAMPLE_S)
    out = []
    for d in devices:
        event = sample(nv, d, 0, None, procs)
        event["name"] = d.get("name", "GPU")
        out.append(event)
    return out, None, nvml.driver_version(nv)


def read_engine(path: str) -> State | None:
    """The state an engine or trace at ``path`` sends a client that joins (hello, snapshot,
    recent events), folded; None when it does not answer."""
    state = State()
    try:
        client = EngineClient(path, timeout=1.0)
    except (OSError, ValueError):
        return None
    deadline = time.monotonic() + READ_S
    try:
        while time.monotonic() < deadline:
            frames = client.read(timeout=0.3)
            if frames is None:
                break
            if not frames and state.hello is not None:
                break  # it went quiet after its picture: that is the picture
            for frame in frames:
                state.apply(frame)
    except (OSError, ValueError):
        pass
    finally:
        client.close()
    return state if state.hello is not None else None


def pools_of(state: State, only: set[int] | None) -> list[dict[str, Any]]:
    """Per device (per lane for a trace: ``gpu0 pid 4242``), the newest pool figures."""
    config = (state.hello or {}).get("config") or {}
    stride = config.get("lane_stride")
    out = []
    for lane, m in sorted(state.memory.items()):
        gpu = lane % stride if isinstance(stride, int) and stride > 0 else lane
        if only is not None and gpu not in only:
            continue
        label = f"gpu{gpu}" + (f" pid {m['pid']}" if isinstance(m.get("pid"), int) else "")
        entry: dict[str, Any] = {"lane": label, "device": gpu, "t": m.get("t")}
        entry.update({k: m.get(k) for k in POOL_FIELDS})
        entry["phantom"] = phantom_bytes(m)
        entry["modeled"] = bool(m.get("modeled"))
        if isinstance(m.get("pid"), int):
            entry["pid"] = m["pid"]
        out.append(entry)
    return out


def gather(only: set[int] | None, pids: set[int] | None) -> dict[str, Any]:
    """Everything ``--once`` prints, as plain data (``--json`` prints it as it is)."""
    gpus, why, driver = read_gpus(only)
    attached: list[dict[str, Any]] = []
    for path in reversed(local_engines()):
        if not answers(path):
            continue
        state = read_engine(path)
        if state is None:
            continue
        hello = state.hello or {}
        attached.append(
            {
                "kind": "trace" if hello.get("source") == "trace" else "engine",
                "id": hello.get("engine_id"),
                "pid": hello.get("pid"),
                "address": f"unix:{path}",
                "state": state.engine_state,
                "backend": hello.get("backend"),
                "modeled": bool(hello.get("modeled")),
                "command": (hello.get("config") or {}).get("command_line"),
                "pools": pools_of(state, only),
            }
        )
    own = {os.getpid(): "provetop top"}
    for a in attached:
        if isinstance(a["pid"], int):
            own[a["pid"]] = f"provetop {a['kind']}"
        for p in a["pools"]:
            own.setdefault(p.get("pid", -1), "traced by provetop")
    processes = []
    for g in gpus:
        for p in g.get("processes") or ():
            if pids is not None and p.get("pid") not in pids:
                continue
            entry = {"gpu": g["device"], **p}
            mark = own.get(p.get("pid", -1)) or (
                f"provetop {p['provetop']}" if p.get("provetop") else None
            )
            if mark:
                entry["provetop"] = mark
            processes.append(entry)
    processes.sort(key=lambda p: (-int(p.get("used") or 0), p["gpu"]))
    return {
        "host": socket.gethostname(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime()),
        "nvml": {"error": why} if why else {"driver": driver},
        "gpus": [{k: v for k, v in g.items() if k not in ("k", "t", "processes")} for g in gpus],
        "processes": processes,
        "attached": attached,
    }


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def text(report: dict[str, Any]) -> str:
    """The report as lines of text, a block per part (GPUs, processes, attached)."""
    lines = [f"provetop top · {report['host']} · {report['time']}"]
    why = report["nvml"].get("error")
    if why:
        lines.append(f"no NVIDIA GPU visible to NVML on this machine ({why})")
    else:
        driver = report["nvml"].get("driver")
        lines.append(f"{len(report['gpus'])} GPUs" + (f", driver {driver}" if driver else ""))
    for g in report["gpus"]:
        figures = [f"gpu{g['device']} {g.get('name', 'GPU')}"]
        if g.get("sm_util_pct") is not None:
            figures.append(f"SM {g['sm_util_pct']} %")
        if g.get("mem_used") is not None:
            figures.append(f"memory {size(g['mem_used'])} / {size(g.get('mem_total'))}")
        if g.get("power_mw") is not None:
            limit = g.get("power_limit_mw")
            watts = f"{g['power_mw'] / 1000:.0f} W"
            figures.append(f"power {watts}" + (f" / {limit / 1000:.0f} W" if limit else ""))
        if g.get("temp_c") is not None:
            figures.append(f"{g['temp_c']} °C")
        if g.get("xid_count"):
            figures.append(f"XID {g['xid_count']}")
        lines.append("  " + " · ".join(figures))
    if report["gpus"]:
        lines.append("processes")
        lines.append(
            f"  {'GPU':>3}   {'PID':>7} {'USER':<10} {'GPU MEM':>10} {'%CPU':>6} {'%MEM':>5} "
            f"{'TIME':>9}  COMMAND"
        )
        for p in report["processes"]:
            mark = "◆ " if p.get("provetop") else "  "
            command = str(p.get("command", "–"))
            if p.get("provetop"):
                command = f"{p['provetop']} · {command}"
            used = size(p["used"]) if p.get("used") is not None else "–"
            lines.append(
                f"  {p['gpu']:>3} {mark}{p.get('pid', '?'):>7} {str(p.get('user', '–'))[:10]:<10} "
                f"{used:>10} {_pct(p.get('cpu_pct')):>6} {_pct(p.get('mem_pct')):>5} "
                f"{run_time(p.get('run_s')):>9}  {command}"
            )
        if not report["processes"]:
            lines.append("  no compute processes")
    lines.append(f"attached: {len(report['attached'])} (engines and traced processes)")
    for a in report["attached"]:
        modeled = " modeled" if a["modeled"] else ""
        lines.append(
            f"  {a['kind']} {a['id']} pid {a['pid']} · {a['state']} · "
            f"{a['backend']}{modeled} · {a['address']}"
        )
        if a.get("command"):
            lines.append(f"    command: {a['command']}")
        for p in a["pools"]:
            lines.append(
                f"    {p['lane']}: PHANTOM {size(p['phantom'])} · async used "
                f"{size(p['async_used'])} of {size(p['async_reserved'])} reserved · sync used "
                f"{size(p['sync_used'])}, cached {size(p['sync_cached'])} · cudaMemGetInfo free "
                f"{size(p['driver_free'])}" + (" (modeled)" if p["modeled"] else "")
            )
        if not a["pools"]:
            lines.append("    no memory sample yet")
    return "\n".join(lines)


def print_once(only: set[int] | None, pids: set[int] | None, as_json: bool) -> int:
    report = gather(only, pids)
    print(json.dumps(report, indent=1, default=str) if as_json else text(report), flush=True)
    return 0
