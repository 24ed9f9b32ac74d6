"""The server's Prometheus metrics (`GET /metrics`), in a registry of its own per app.

| metric | type | labels |
| --- | --- | --- |
| `keras_transformer_requests_total` | counter | `route`, `status` |
| `keras_transformer_request_seconds` | histogram | `route` |
| `keras_transformer_sentences_total` | counter | `model` |
| `keras_transformer_characters_total` | counter | `model` |
| `keras_transformer_batch_sentences` | histogram | `model` |
| `keras_transformer_batch_requests` | histogram | `model` |
| `keras_transformer_batch_seconds` | histogram | `model` |
| `keras_transformer_queue_sentences` | gauge | `model` |
| `keras_transformer_model_version` | gauge | `model` (`-1`: no versions) |
| `keras_transformer_warm_sentences` | gauge | `model` (most sentences per engine call: below `--max-batch-sentences` during a background warm-up, 0 before warm) |
| `keras_transformer_ready` | gauge | (1 once warm, 0 while warming or draining) |
"""

import prometheus_client

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """The metric objects of one server (a fresh `CollectorRegistry`, so that several apps in
    one process do not share counts)."""

    def __init__(self):
        self.registry = prometheus_client.CollectorRegistry()
        prefix = "keras_transformer_"

        def metric(kind, name, documentation, labels=(), **kwargs):
            return kind(prefix + name, documentation, labels, registry=self.registry, **kwargs)

        Counter, Gauge, Histogram = (
            prometheus_client.Counter,
            prometheus_client.Gauge,
            prometheus_client.Histogram,
        )
        self.requests = metric(Counter, "requests", "HTTP requests answered", ("route", "status"))
        self.latency = metric(
            Histogram,
            "request_seconds",
            "Seconds to answer a request",
            ("route",),
            buckets=LATENCY_BUCKETS,
        )
        self.sentences = metric(Counter, "sentences", "Sentences translated", ("model",))
        self.characters = metric(Counter, "characters", "Characters translated", ("model",))
        self.batch_sentences = metric(
            Histogram,
            "batch_sentences",
            "Sentences per engine call",
            ("model",),
            buckets=SIZE_BUCKETS,
        )
        self.batch_requests = metric(
            Histogram,
            "batch_requests",
            "Requests merged into one engine call",
            ("model",),
            buckets=SIZE_BUCKETS,
        )
        self.batch_seconds = metric(
            Histogram,
            "batch_seconds",
            "Seconds per engine call",
            ("model",),
            buckets=LATENCY_BUCKETS,
        )
        self.queue = metric(Gauge, "queue_sentences", "Sentences waiting", ("model",))
        self.version = metric(Gauge, "model_version", "Version served (-1: none)", ("model",))
        self.warm_sentences = metric(
            Gauge, "warm_sentences", "Most sentences per engine call for now", ("model",)
        )
        self.ready = metric(Gauge, "ready", "1 when the server takes translations")

    def batch_observer(self, model):
        """The `Batcher`'s `on_batch` for `model` (its name)."""

        def observe(sentences, requests, seconds):
            self.batch_sentences.labels(model).observe(sentences)
            self.batch_requests.labels(model).observe(requests)
            self.batch_seconds.labels(model).observe(seconds)

        return observe

    def exposition(self):
        """`(body, content type)` of the text format."""
        return prometheus_client.generate_latest(
            self.registry
        ), prometheus_client.CONTENT_TYPE_LATEST
