"""EngineAdapter: everything the worker manager needs to know about one kind of engine."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class LaunchSpec:
    """One replica to launch: its index in the fleet, where it listens, which devices."""

    index: int
    host: str
    port: int
    gpus: tuple[int, ...] = ()
    extra_args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


class EngineAdapter(Protocol):
    name: str
    ready_path: str
    """GET path that answers 200 once the engine takes requests."""
    startup_timeout_s: float

    def command(self, spec: LaunchSpec) -> list[str]:
        """The argv that starts one replica."""
        ...

    def environment(self, spec: LaunchSpec) -> dict[str, str]:
        """Variables added to the parent's environment for this replica."""
        ...

    def capacity_blocks(self) -> int | None:
        """KV capacity in blocks, when known before the engine starts."""
        ...
