"""A workload's config and shared artifacts as the engine handles them: `ConfigView` (the
values of its fields, and what the workload's own code gets), `SharedView` (its shared
artifacts' hooks given its own config), and a spec's value checked against a field's
type."""

from __future__ import annotations

from typing import Any


class ConfigView:
    """A workload's config as the engine handles it: the values of its fields, read as
    attributes, copied with `replace`, compared by `objective_dict`; `native()` is what the
    workload's own code gets (an instance of its dataclass, what its `make_config` built, or
    a dict). The engine's own values (a replicate's `seed`, a trial's `out_dir`) ride along
    where the config lacks such a field. `wl` is the `trials.workload_defaults.Loaded` it
    belongs to (not imported here: that module builds these)."""

    def __init__(self, wl: Any, values: dict, native=None):
        self._wl, self._values, self._native = wl, dict(values), native

    def __getattr__(self, name: str):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __eq__(self, other) -> bool:
        return isinstance(other, ConfigView) and other._values == self._values

    def __repr__(self) -> str:
        return f"{self._wl.name}({self._values})"

    def to_dict(self) -> dict:
        return dict(self._values)

    def replace(self, **changes) -> ConfigView:
        return self._wl.config({**self._values, **changes})

    def objective_dict(self) -> dict:
        """What a run's results depend on: the workload's `objective(config)` where it says,
        else every field but the plumbing."""
        if self._wl.has("objective"):  # found once, as the workload loaded
            return dict(self._wl.hook("objective", None, self.native()))
        return {k: v for k, v in self._values.items() if self._wl.role(k) != "plumbing"}

    def native(self):
        if self._native is None:
            kept = {k: v for k, v in self._values.items() if k in self._wl.own_fields}
            self._native = self._wl.build(kept)
        return self._native


def own(cfg):
    """The workload's own config for one of its hooks: a ConfigView's `native()`, else as given."""
    return cfg.native() if isinstance(cfg, ConfigView) else cfg


class SharedView:
    """A workload's shared artifacts (`SharedArtifacts`) as the engine calls them: its hooks
    get the workload's own config, and `bind` hands the engine's config back."""

    def __init__(self, wl: Any, art: Any):
        self._wl, self._art = wl, art

    def needed(self, cfg) -> bool:
        return bool(self._art.needed(own(cfg)))

    def address(self, cfg, cache: dict):
        return self._art.address(own(cfg), cache)

    def describe(self, cfg) -> str:
        return self._art.describe(own(cfg))

    def bind(self, cfg, path: str) -> ConfigView:
        bound = self._art.bind(own(cfg), path)  # the workload's own config, built (and checked) by it once
        return ConfigView(self._wl, {**cfg.to_dict(), **plain_values(bound, self._wl.own_fields)}, bound)

    def file(self, storage, key: str):
        return self._art.file(storage, key)

    def read(self, path) -> dict:
        return self._art.read(path)

    def train(self, config: dict, path: str, progress_file: str | None = None) -> dict:
        return self._art.train(config, path, progress_file)


def plain_values(native, names) -> dict:
    """A workload's own config read back field by field, sequences as lists (the values a
    spec, a run's params and the sweep's fingerprint hold)."""
    values = dict(native) if isinstance(native, dict) else {k: getattr(native, k) for k in names}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def field_types(given, defaults: dict) -> dict:
    """Each config field's type: a dataclass's annotations (resolved), else its default's type."""
    import typing

    if isinstance(given, dict):
        return {k: type(v) for k, v in defaults.items() if v is not None}
    cls = given if isinstance(given, type) else type(given)
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001  an annotation that cannot be resolved: left unchecked
        return {}


def type_problem(name: str, value, want) -> str | None:
    """Why a spec's value does not fit a config field's type (None where it does, or where the
    type is one this check does not read): a number for a float (not a bool), an int for an
    int, true/false for a bool, text for a str, one of a Literal's values, any arm of a Union."""
    import typing

    if want is None or want is typing.Any:
        return None
    args = typing.get_args(want)
    origin = typing.get_origin(want)
    if origin is typing.Literal:
        return None if value in args else f"{name}: one of {', '.join(map(repr, args))}, got {value!r}"
    if origin is typing.Union or type(want).__name__ == "UnionType":
        fits = [a for a in args if (a is type(None) and value is None) or
                (a is not type(None) and type_problem(name, value, a) is None)]
        return None if fits else f"{name}: {type_words(want)}, got {value!r} ({type(value).__name__})"
    simple = {bool: lambda v: isinstance(v, bool), int: lambda v: isinstance(v, int) and not isinstance(v, bool),
              float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), str: lambda v: isinstance(v, str)}
    ok = simple.get(origin or want)
    if ok is None or ok(value):
        return None
    return f"{name}: {type_words(want)}, got {value!r} ({type(value).__name__})"


def type_words(t) -> str:
    return {bool: "true or false", int: "an integer", float: "a number", str: "text"}.get(t, str(t).replace("typing.", ""))
