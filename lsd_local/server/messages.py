"""What the HTTP process and the engine process say to each other over their pipe: small frozen
dataclasses (picklable plain values), read by type and by field name, never by position."""

from __future__ import annotations

from dataclasses import dataclass

# --- from the engine process ---------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """The models are loaded: pid, n_ctx, notices, placement, draft, parallel."""

    info: dict


@dataclass(frozen=True)
class LoadFailed:
    """The models could not be loaded; why."""

    message: str


@dataclass(frozen=True)
class Received:
    """The engine took the job: from here on a crash is this job's."""

    job_id: str


@dataclass(frozen=True)
class Progress:
    """A llama_decode returned (the watchdog's sign that the engine is not stuck in C)."""


@dataclass(frozen=True)
class Started:
    """The job's generation started; its prompt's length in tokens."""

    job_id: str
    prompt_tokens: int


@dataclass(frozen=True)
class Delta:
    """One round's released text, reasoning, tool call pieces, logprobs
    (worker.event_payload's dict)."""

    job_id: str
    payload: dict


@dataclass(frozen=True)
class Done:
    """The job's answer ended: why, its statistics, and whether its time ran out."""

    job_id: str
    finish_reason: str
    stats: dict
    timed_out: bool


@dataclass(frozen=True)
class Failed:
    """The job ended with an error: the HTTP status, its message and the field at fault."""

    job_id: str
    status: int
    message: str
    param: str | None = None


# --- to the engine process -------------------------------------------------------------------


@dataclass(frozen=True)
class RunJob:
    """A job to run (protocol.Job)."""

    job: object


@dataclass(frozen=True)
class Cancel:
    """Stop this job at its next round (the client left)."""

    job_id: str


@dataclass(frozen=True)
class Stop:
    """Finish the running jobs, then exit."""
