"""What nvidia-smi says about the GPUs (pure parsers; the launcher runs the command).

Queried as `nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free
--format=csv,noheader,nounits` (MiB) and `--query-compute-apps=gpu_uuid,pid,process_name,used_memory`.
nvidia-smi's total is the board's (an H100 "80 GB": 81,559 MiB); CUDA reports less (79.19 GiB),
which is the figure the plan wants: the check below compares free memory with what vLLM will
request, the way vLLM itself refuses to start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from validator.errors import InfraError
from validator.units import GiB, MiB

GPU_QUERY = ["--query-gpu=index,name,memory.total,memory.used,memory.free", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"]


@dataclass(frozen=True, kw_only=True)
class Gpu:
    index: int
    name: str
    total_bytes: int
    used_bytes: int
    free_bytes: int

    def to_json(self) -> dict:
        return asdict(self)


def parse_gpus(text: str) -> list[Gpu]:
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            idx, total, used, free = int(parts[0]), int(parts[2]), int(parts[3]), int(parts[4])
        except ValueError:
            continue  # "[N/A]" fields: nothing to judge on
        out.append(Gpu(index=idx, name=parts[1], total_bytes=total * MiB, used_bytes=used * MiB, free_bytes=free * MiB))
    return out


def parse_apps(text: str) -> list[dict]:
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[1].isdigit():
            used = int(parts[3]) * MiB if parts[3].isdigit() else None
            out.append({"gpu_uuid": parts[0], "pid": int(parts[1]), "name": parts[2], "used_bytes": used})
    return out


def check_free(gpus: list[Gpu], ranks: int, requested_bytes: int, apps: list[dict] | None = None) -> None:
    """Refuse before launching when the GPUs vLLM will use cannot give it what it will request."""
    if len(gpus) < ranks:
        raise InfraError(
            f"hardware: the plan needs {ranks} GPU(s) (tensor x pipeline parallel); nvidia-smi shows {len(gpus)}"
        )
    short = [g for g in gpus[:ranks] if g.free_bytes < requested_bytes]
    if short:
        g = short[0]
        others = (
            ", ".join(
                f"pid {a['pid']} {a['name']} {a['used_bytes'] / GiB:.1f} GiB"
                for a in (apps or [])
                if a.get("used_bytes")
            )
            or "none listed"
        )
        raise InfraError(
            f"GPU {g.index} ({g.name}) has {g.free_bytes / GiB:.2f} GiB free of "
            f"{g.total_bytes / GiB:.2f} GiB; vLLM will request {requested_bytes / GiB:.2f} GiB "
            f"(utilization x total). Other processes: {others}"
        )
