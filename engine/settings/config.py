"""The run's configuration: one dataclass, five presets, and the checks that turn a bad value
into one clear line.

Why a dataclass and not argparse's namespace: ``provetop engine``, ``provetop run``, the tests
and the benchmark all build engines, and they should share defaults, presets and validation
instead of re-implementing them. The configuration is also what ``hello`` carries, so a
recording says exactly how the run was set up.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from provetop.recordings.schema import SYNTH_WORKER_BASE

# Synthesis lanes: with the look-ahead, a worker's next partition is synthesised while its
# current one runs, and those phases are drawn on lane SYNTH_LANE_BASE + worker of the device
# (telemetry ``worker``); the number is the schema's, which the cuzk adapter draws on too.
SYNTH_LANE_BASE = SYNTH_WORKER_BASE

MAX_DEVICES = 64  # device indices 0..63 (a bound on threads and modeled devices, not hardware)
MAX_DOMAIN_LOG = 28  # 2^28 is the largest domain the engine plans for (Fr allows 2^32)
ALLOCATORS = ("naive", "aware")
VERIFY_MODES = ("always", "sampled", "never")
# What a run does when its recording cannot be written (disk full): "stop" ends intake and lets
# the partitions in flight finish (the default: a run nobody can review afterwards is rarely
# wanted); "continue" runs to the end without a recording. Either way the exit code says so.
RECORD_ERROR_POLICIES = ("stop", "continue")
BACKENDS = ("cpu", "cuda")
DEFAULT_PROFILE = (0.48, 0.48, 0.04)  # zeros, ones, dense: synthetic PoRep-like aux witness
PROFILE_LABEL = "synthetic approximation of a PoRep witness"
DEFAULT_MODELED_MEMORY = 16 << 30  # the seed's card (RTX 5070 Ti, 16 GiB)
EXACT_VERIFY_MAX_LOG = 14  # verify="auto": every partition up to 2^14, sampled above


class ConfigError(ValueError):
    """A configuration value that cannot run; the message is one line for the CLI."""


NVML_INTERVAL_MAX = 3600.0
DURATION_MAX = (
    7 * 24 * 3600.0
)  # --duration: a week  # seconds: the dashboard keeps an hour of samples


@dataclass(frozen=True)
class EngineConfig:
    """Everything that decides what a run computes and how it uses the device(s)."""

    backend: str = "cpu"
    preset: str | None = None
    domain_log: int = 8
    partitions: int = 2
    proofs: int = 1
    # intake closes this many seconds after the first partition starts (proofs started then
    # finish); ``proofs`` stays the cap. A run that should last a while, not a count (demo).
    duration_s: float | None = None
    concurrency: int = 1  # proofs in flight
    workers_per_device: int = 2
    devices: tuple[int, ...] = (0,)
    device_memory: int | None = None  # bytes; None: the preset's or the backend's default
    allocator: str = "aware"
    witness_profile: tuple[float, float, float] = DEFAULT_PROFILE
    verify: str = "auto"  # always | sampled | never | auto (always when small)
    verify_every: int = 4  # with "sampled": one partition in this many is checked exactly
    seed: int | None = None
    prestage_margin: int | None = None  # bytes; None: need/24 (cuzk's 512 MiB on 12 GiB)
    sample_hz: float = 10.0
    nvml_interval: float = 1.0  # seconds between NVML ``gpu`` samples (--nvml-interval)
    # each worker synthesises its next partition while its current one runs (a second
    # witness buffer per worker; on CUDA 2 x 17 GB of pinned host memory at 2^27)
    synthesis_ahead: bool = False
    on_record_error: str = "stop"  # one of RECORD_ERROR_POLICIES
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Domain size 2^K."""
        return 1 << self.domain_log

    @property
    def verify_mode(self) -> str:
        """The effective verification mode ("auto" resolved by the domain size)."""
        if self.verify != "auto":
            return self.verify
        return "always" if self.domain_log <= EXACT_VERIFY_MAX_LOG else "sampled"

    def validate(self) -> EngineConfig:
        """Raise :class:`ConfigError` with one line naming the bad value; return self."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown backend {self.backend!r} (expected cpu or cuda)")
        if not 1 <= self.domain_log <= MAX_DOMAIN_LOG:
            raise ConfigError(
                f"--domain-log must be between 1 and {MAX_DOMAIN_LOG}, got {self.domain_log}"
            )
        for name in ("partitions", "proofs", "concurrency", "workers_per_device", "verify_every"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be at least 1, got {getattr(self, name)}")
        if self.duration_s is not None and not 0 < self.duration_s <= DURATION_MAX:
            raise ConfigError(
                f"--duration must be above 0 and at most {DURATION_MAX:.0f} seconds, "
                f"got {self.duration_s:g}"
            )
        if self.workers_per_device >= SYNTH_LANE_BASE:  # worker ids below the synthesis lanes
            raise ConfigError(
                f"--workers-per-device must be below {SYNTH_LANE_BASE}, "
                f"got {self.workers_per_device}"
            )
        if not self.devices:
            raise ConfigError("--devices needs at least one device")
        if len(set(self.devices)) != len(self.devices) or min(self.devices) < 0:
            raise ConfigError(f"--devices must be distinct non-negative ints, got {self.devices}")
        if max(self.devices) >= MAX_DEVICES:
            top = max(self.devices)
            raise ConfigError(f"--devices: no device {top} (indices 0..{MAX_DEVICES - 1})")
        if self.allocator not in ALLOCATORS:
            raise ConfigError(f"--allocator must be naive or aware, got {self.allocator!r}")
        if self.on_record_error not in RECORD_ERROR_POLICIES:
            raise ConfigError(
                f"--on-record-error must be stop or continue, got {self.on_record_error!r}"
            )
        if self.verify not in (*VERIFY_MODES, "auto"):
            raise ConfigError(f"--verify must be always, sampled or never, got {self.verify!r}")
        prof = self.witness_profile
        if len(prof) != 3 or min(prof) < 0 or abs(sum(prof) - 1.0) > 1e-6:
            raise ConfigError(
                f"--witness-profile needs three fractions (zeros,ones,dense) summing to 1, "
                f"got {','.join(str(p) for p in prof)}"
            )
        if self.device_memory is not None and self.device_memory < 1 << 12:
            raise ConfigError(f"--device-memory is too small: {self.device_memory} bytes")
        if self.sample_hz <= 0:
            raise ConfigError("the memory sampling rate must be positive")
        if not 0 < self.nvml_interval <= NVML_INTERVAL_MAX:
            raise ConfigError(
                f"--nvml-interval must be above 0 and at most {NVML_INTERVAL_MAX:.0f} seconds, "
                f"got {self.nvml_interval:g}"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain data for ``hello.config`` (msgpack-able)."""
        d = asdict(self)
        d["devices"] = list(self.devices)
        d["witness_profile"] = list(self.witness_profile)
        d["witness_profile_label"] = PROFILE_LABEL
        d["verify_mode"] = self.verify_mode
        if self.synthesis_ahead:  # where the dashboard draws the look-ahead's synthesis
            d["synth_worker_base"] = SYNTH_LANE_BASE
        return d


# Presets: the values a preset sets; anything given explicitly on the command line wins.
PRESETS: dict[str, dict[str, Any]] = {
    # A 32 GiB PoRep sector: n = 2^27 per partition, 10 partitions (domain.md section 2).
    "porep-32g": {"domain_log": 27, "partitions": 10, "proofs": 1, "verify": "sampled"},
    # A few seconds per proof on a laptop; enough to see overlap and the pool graphs.
    "small": {"domain_log": 10, "partitions": 4, "proofs": 2, "concurrency": 2},
    # The CI run: tiny domain, every partition checked exactly.
    "ci": {"domain_log": 5, "partitions": 2, "proofs": 1, "verify": "always"},
    # The seed's failure: a modeled capacity (computed from the partition's real sizes, see
    # provetop.engine.memory.allocator.phantom_capacity) at which naive pre-staging OOMs from
    # partition 1 on
    # while the pools hold enough free memory. One worker keeps the order deterministic.
    "phantom": {
        "domain_log": 6,
        "partitions": 4,
        "proofs": 1,
        "workers_per_device": 1,
        "allocator": "naive",
        "verify": "always",
        "extra": {"phantom": True},
    },
    # The quick start: the phantom's capacity with two workers, for a minute by the clock
    # whatever the machine's speed (a proof count ran 36 to 145 s on 2-core machines: at
    # 2^10, 3.3 to 13 partitions a second). Naive pre-staging leaves the caching pool's
    # blocks behind, the phantom grows, partitions OOM and recover on the fallback path.
    "demo": {
        "domain_log": 10,
        "partitions": 8,
        "proofs": 100_000,  # the cap; the run lasts duration_s
        "duration_s": 60.0,
        "concurrency": 1,
        "workers_per_device": 2,
        "allocator": "naive",
        "verify": "sampled",
        "extra": {"phantom": True},
    },
}


def from_preset(preset: str | None, **overrides: Any) -> EngineConfig:
    """A config from a preset (or the defaults), with explicit values (not None) on top."""
    values: dict[str, Any] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r} (expected one of {', '.join(PRESETS)})")
        values.update(PRESETS[preset])
        values["preset"] = preset
        if overrides.get("proofs") is not None and overrides.get("duration_s") is None:
            values.pop("duration_s", None)  # a count asked for: the preset's clock gives way
    known = {f.name for f in fields(EngineConfig)}
    for key, value in overrides.items():
        if key not in known:
            raise ConfigError(f"unknown configuration key {key!r}")
        if value is not None:
            values[key] = value
    if "devices" in values:
        values["devices"] = tuple(values["devices"])
    if "witness_profile" in values:
        values["witness_profile"] = tuple(float(p) for p in values["witness_profile"])
    return EngineConfig(**values).validate()


def with_changes(config: EngineConfig, **changes: Any) -> EngineConfig:
    """A validated copy with some fields changed."""
    return replace(config, **changes).validate()
