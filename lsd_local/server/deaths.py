"""Why the engine process died, in words: what a request whose run killed it is told, and
when deaths by one signal mean the server should stop restarting it."""

from __future__ import annotations

import signal

# deaths by the same signal with no request finished in between that make a crash count as
# deterministic (a CPU trapping an instruction llama.cpp uses): the server stops restarting
SAME_SIGNAL_DEATHS = 3


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def death_message(exitcode: int | None, stalled: bool, round_timeout: float) -> str:
    """What a request whose run killed the engine process is told."""
    if stalled:
        return (f"this request made no progress for {round_timeout:.0f} s (--round-timeout): "
                "the engine process was restarted and the request ended")
    if exitcode is not None and exitcode < 0:
        number = -exitcode
        how = f"was killed by {_signal_name(number)} ({signal.strsignal(number) or number})"
        hint = (" (this CPU may trap an instruction llama.cpp uses: try --no-repack)"
                if number == signal.SIGILL else "")
    else:
        how, hint = f"exited with code {exitcode}", ""
    return (f"the engine process {how} while running this request{hint}; the request is not "
            "retried, and the engine is restarted for the next one")


def repeated_signal(deaths: list[int | None]) -> str | None:
    """Why to stop restarting, when the last SAME_SIGNAL_DEATHS deaths (exit codes since a
    request last finished) were all by one signal; else None."""
    last = deaths[-SAME_SIGNAL_DEATHS:]
    if len(last) < SAME_SIGNAL_DEATHS or len(set(last)) != 1 or last[0] is None \
            or last[0] >= 0:
        return None
    number = -last[0]
    name = _signal_name(number)
    what = signal.strsignal(number) or name
    hint = (" (this CPU may trap an instruction llama.cpp uses: try --no-repack)"
            if number == signal.SIGILL else "")
    return (f"the engine process was killed by {name} ({what}) {len(last)} times in a row "
            f"with no request finished in between; it is not restarted again{hint}")
