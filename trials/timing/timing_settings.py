"""The timing pass's settings (`trials time`'s flags; a spec's `timing:`), apart from the pass
itself so that a spec's checks read them without the pass's imports."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimingSettings:
    """The pass's knobs (the CLI's flags of the same names)."""
    rounds: int = 5  # R: every run once per round, each round in a fresh random order
    warmup: int = 1  # W: untimed repetitions of a run before its timed one, every round
    prompts: int = 8  # P: prompts a drafter-stage repetition decodes both ways
    steps: int = 20  # S: training steps a backbone-stage repetition times
    seed: int = 0  # seeds the rounds' orders (with the round) and the backbone's batches

    def __post_init__(self):
        # 3 rounds at least: with 2, a busy round cannot be told from the other (both depart
        # from their median alike), so the busy check would have nothing to stand on
        for name, least in (("rounds", 3), ("warmup", 0), ("prompts", 1), ("steps", 1), ("seed", None)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or (least is not None and v < least):
                raise ValueError(f"--{name}: an integer{f' >= {least}' if least is not None else ''}, got {v!r}")


def again_command(name: str, given: dict | None = None) -> str:
    """`trials time NAME --again` with the flags of the pass it repeats (`given`: a pass's
    record or summary, or its settings as a dict; those at their defaults left out), so that
    the pass is timed again as it was, not with the defaults."""
    flags = "".join(f" --{k} {given[k]}" for k in TimingSettings.__dataclass_fields__
                    if given and k in given and given[k] != TimingSettings.__dataclass_fields__[k].default)
    return f"trials time {name} --again{flags}"
