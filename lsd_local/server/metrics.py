"""`GET /metrics`: Prometheus counters, gauges and histograms of one server (its own
registry: nothing global, so that tests can run several apps in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
SPEED_BUCKETS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200, 300, 500, 1000)


class Metrics:
    """What `lsd serve` counts (names prefixed lsd_)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("lsd_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("lsd_prompt_tokens", "prompt tokens of finished requests",
                                     registry=r)
        self.cached_prompt_tokens = Counter(
            "lsd_cached_prompt_tokens", "prompt tokens served from the KV cache (not evaluated)",
            registry=r)
        self.generated_tokens = Counter("lsd_generated_tokens", "tokens generated", registry=r)
        self.rounds = Counter("lsd_rounds", "verification rounds", registry=r)
        self.drafted = Counter("lsd_drafted_tokens", "draft tokens verified", registry=r)
        self.accepted = Counter("lsd_accepted_tokens", "draft tokens kept, by kind",
                                ["kind"], registry=r)
        self.queue = Gauge("lsd_queue_length", "requests waiting for the engine", registry=r)
        self.busy = Gauge("lsd_requests_processing",
                          "requests the engine is running (at most --parallel)", registry=r)
        self.restarts = Counter("lsd_engine_restarts", "engine processes restarted after dying",
                                registry=r)
        self.ttft = Histogram("lsd_time_to_first_token_seconds",
                              "arrival to the first generated text", buckets=TTFT_BUCKETS,
                              registry=r)
        self.speed = Histogram("lsd_decode_tokens_per_second",
                               "decode speed of each finished request (prefill excluded)",
                               buckets=SPEED_BUCKETS, registry=r)

    def record_stats(self, stats: dict) -> None:
        """A finished request's GenerationStats.as_dict()."""
        self.prompt_tokens.inc(stats["prompt_tokens"])
        self.cached_prompt_tokens.inc(stats["cached_prompt_tokens"])
        self.generated_tokens.inc(stats["generated_tokens"])
        self.rounds.inc(stats["rounds"])
        self.drafted.inc(stats["drafted"])
        self.accepted.labels("exact").inc(stats["accepted_exact"])
        self.accepted.labels("loose").inc(stats["accepted_loose"])
        if stats["generated_tokens"] and stats["decode_seconds"] > 0:
            self.speed.observe(stats["decode_tokens_per_second"])

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
