"""The models a server translates with: which path answers which language pair, the version
of a model server's base path being served, and the warm-up that compiles an engine's shapes
before it takes requests.

`--model PATH` opens anything `keras_transformer.engines.load_translator` opens and answers
any `source`/`target`; `--model es:en=PATH` serves that pair only. A base path of numbered
version directories (as `export --version N` writes them) serves its highest version, and a
`ServedModel` that watches it loads, warms and switches to a newer version when one appears,
while the old one answers the batches already under way (as TensorFlow Serving does).
Version directories are written under a temporary name and renamed when complete
(`keras_transformer.formats.versions`), so a version that appears is whole; one copied into
place (`cp -r`, `rsync`) is tried only once its listing (`version_listing`) has stayed the
same for one poll, and one that failed is tried again when its listing changes.
"""

import dataclasses
import logging
import os
import re
import threading
import time

from keras_transformer.engines.loading import open_engine
from keras_transformer.engines.location import Location, detect_engine, locate
from keras_transformer.engines.names import (  # noqa: F401 (WARMUPS: `--warmup`'s choices)
    DEFAULT_WARMUP,
    FULL_WARMUP,
    NO_WARMUP,
    WARMUPS,
)
from keras_transformer.formats.versions import latest_version
from keras_transformer.serving.settings import DEFAULT_BATCH_SENTENCES, OPTIONS

# `es:en=PATH`: a language pair, then the path. Codes as LibreTranslate's (`en`, `pt-BR`,
# `zh-Hans`): a letter, then letters, digits, `-` or `_`.
_CODE = r"[A-Za-z][A-Za-z0-9_-]{0,15}"
PAIR_PATTERN = re.compile(rf"^({_CODE}):({_CODE})=(.+)$", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A `--model` argument: the path and its language pair (`None`, `None` for any)."""

    path: str
    source: str = None
    target: str = None

    @property
    def name(self):
        """The model's name in logs and metrics: its pair, or `*:*` for a model of any pair."""
        return f"{self.source or '*'}:{self.target or '*'}"


def parse_model_spec(text):
    """The `ModelSpec` of a `--model` value: `PATH` or `SOURCE:TARGET=PATH`.

    Example:

    >>> parse_model_spec("es:en=runs/bible")
    ModelSpec(path='runs/bible', source='es', target='en')
    >>> parse_model_spec("hf://user/opus-mt-es-en").source is None
    True
    """
    if not isinstance(text, str) or not text:
        raise ValueError(f"`--model` must be PATH or SOURCE:TARGET=PATH. Received: {text!r}")
    match = PAIR_PATTERN.match(text)
    if match is None:
        return ModelSpec(text)
    source, target, path = match.groups()
    if source == target:
        raise ValueError(f"A model's source and target must differ. Received: {text!r}")
    return ModelSpec(path, source, target)


def check_specs(specs):
    """Refuses a set of `ModelSpec`s that cannot be told apart: two models of one pair, or a
    model of any pair beside others."""
    pairs = [(spec.source, spec.target) for spec in specs]
    if len(specs) > 1 and (None, None) in pairs:
        raise ValueError(
            "Several models are served by language pair: give each one as "
            "`--model SOURCE:TARGET=PATH`. Received: "
            + ", ".join(repr(spec.path) for spec in specs if spec.source is None)
            + " without a pair"
        )
    repeated = sorted({f"{s}:{t}" for s, t in pairs if pairs.count((s, t)) > 1})
    if repeated:
        raise ValueError(f"One model per language pair. Received twice: {', '.join(repeated)}")


def served_version(path):
    """`(directory, version)`: the directory to open for `path` and its version number, or
    `None` for a path that is no base path of numbered versions (or a hub handle)."""
    location = locate(path, "keras", fetch=False)  # The engine does not change the version.
    return location.path, location.version


def version_listing(directory):
    """What a version directory holds, to tell a version still being copied from a finished
    one: the sorted `(relative path, size, modification time in ns)` of every file and
    directory under it (links not followed), or `None` when it cannot be listed (something
    vanished while it was walked: a copy or a rename under way)."""
    entries = []
    try:
        for root, directories, files in os.walk(directory, onerror=_raise):
            for name in directories + files:
                path = os.path.join(root, name)
                stat = os.lstat(path)
                entries.append((os.path.relpath(path, directory), stat.st_size, stat.st_mtime_ns))
    except OSError:
        return None
    return tuple(sorted(entries))


def _raise(error):
    raise error


def warm(engine, max_batch_sentences, warmup=DEFAULT_WARMUP, extra_searches=()):
    """Runs the searches a served engine compiles, so that no request pays a compilation:
    the engine's `warmup_requests(max_batch_sentences)` (`keras_transformer.translation.
    Engine`), the target-prefix ones only with `warmup="full"`; each of its default-search
    calls again with each of `extra_searches` (`SearchOptions` fields as dicts: the other
    beam sizes and the sampling searches a server allows, `SearchPolicy.extra_searches`).

    A Keras `Translator` on TensorFlow or JAX compiles one search per (source bucket, padded
    batch size): it translates one batch of each, with 1, 2, 4, ... sentences up to
    `max_batch_sentences`. A SavedModel replays the warm-up requests it was exported with
    (`assets.extra/tf_serving_warmup_requests`). PyTorch and CTranslate2 compile nothing:
    one sentence loads what they load lazily.

    Returns:
        int, the number of warm-up calls made.
    """
    calls = warmup_calls(engine, max_batch_sentences, warmup, extra_searches)
    for options, request in calls:
        engine.run(request.sentences, options, request.prefixes)
    return len(calls)


def warmup_calls(engine, max_batch_sentences, warmup=DEFAULT_WARMUP, extra_searches=()):
    """`warm`'s calls, as `(options, WarmupRequest)`, by their number of sentences (the
    engine's order within each number): every search and source bucket of one sentence,
    then of two, and so on (a background warm-up serves meanwhile in batches of the sizes
    done)."""
    if warmup == NO_WARMUP:
        return []
    requests = [
        request
        for request in engine.warmup_requests(max_batch_sentences)
        if request.prefixes is None or warmup == FULL_WARMUP
    ]
    calls = [(request.options, request) for request in requests]
    for fields in extra_searches:
        calls += [
            (dataclasses.replace(request.options, **fields), request)
            for request in requests
            if request.options.num_hypotheses is None  # Not the n-best call: same searches.
        ]
    return sorted(calls, key=lambda call: len(call[1].sentences))  # Stable.


@dataclasses.dataclass(frozen=True)
class SearchPolicy:
    """The searches a server runs: which ones its clients may ask for.

    Each beam size and each sampling search is a program a compiled engine (the Keras
    `Translator` on TensorFlow or JAX) compiles for every shape, in seconds and megabytes
    that are never given back; a server that compiled whatever a client asked could be made
    to compile forever. So the operator names them (`serve --beam-sizes`, `--sampling`), the
    warm-up compiles them, and a request for any other is a 400 naming the allowed ones.
    Sampling's values (top-k, top-p, temperature) are inputs of the compiled search, not new
    programs (`keras_transformer.generation.Generator.function`).

    Attributes:
        beam_sizes: tuple of int. Beam sizes allowed besides each model's own (always
            allowed). Defaults to `()`: the model's own only.
        sampling: bool. Allow sampling (`sampling_topk`, `sampling_topp`,
            `sampling_temperature`). Defaults to `False`.
    """

    beam_sizes: tuple = ()
    sampling: bool = False

    def allowed_beam_sizes(self, engine):
        """The beam sizes a request may ask of `engine`, sorted."""
        return tuple(sorted({engine.beam_size or 1, *self.beam_sizes}))

    def check(self, engine, options):
        """Raises a `ValueError` naming the option and what is allowed unless the policy
        allows the search of `options` (`SearchOptions`) on `engine`."""
        if options.sampling:
            if not self.sampling:
                raise ValueError(
                    "sampling (sampling_topk, sampling_topp, sampling_temperature) is off on "
                    "this server (`serve --sampling` turns it on). Received: "
                    + _sampling_fields(options)
                )
            if options.beam_size in (None, 1):
                return
        beam_size = options.beam_size
        allowed = self.allowed_beam_sizes(engine)
        if beam_size is not None and beam_size not in allowed:
            raise ValueError(
                f"beam_size must be one of {', '.join(map(str, allowed))} on this server "
                f"(`serve --beam-sizes` names the others). Received: beam_size={beam_size}"
            )

    def extra_searches(self, engine):
        """The searches to warm up besides the engine's default one (`warm`'s
        `extra_searches`): each other allowed beam size, then sampling's two programs
        (temperature only; a top-k or top-p cut)."""
        searches = [
            {"beam_size": size}
            for size in self.allowed_beam_sizes(engine)
            if size != (engine.beam_size or 1)
        ]
        if self.sampling and engine.capabilities.sampling:
            searches += [{"sampling_temperature": 1.0}, {"sampling_topk": 2}]
        return searches


def _sampling_fields(options):
    names = ("sampling_topk", "sampling_topp", "sampling_temperature")
    return ", ".join(
        f"{name}={getattr(options, name)}" for name in names if getattr(options, name) is not None
    )


class ServedModel:
    """One served model: its engine, the version it serves, and the watch for newer ones.

    Args:
        spec: `ModelSpec`.
        engine: str or `None`. `engines.load_translator`'s `engine`. Defaults to `None`.
        max_batch_sentences: int. The largest batch the warm-up covers. Defaults to
            `settings.DEFAULT_BATCH_SENTENCES` (32).
        warmup: one of `WARMUPS`. Defaults to `"default"`.
        log: callable `(str)`, for the version changes. Defaults to `None`: the
            `keras_transformer.serving` logger.
        policy: `SearchPolicy`. The searches clients may ask for (warmed up too). Defaults
            to `None`: `SearchPolicy()`, the model's own beam size, no sampling.
        background_warmup: bool. `warm_up` runs the warm-up calls of one sentence only (every
            search and source bucket, which any request can then be cut into) and leaves the
            others to `warm_rest`; until those are done, `translate` cuts a batch into engine
            calls of the most sentences already warm (`warm_sentences`), so that no request
            compiles a search. Defaults to `False`: `warm_up` runs them all.
    """

    def __init__(
        self,
        spec,
        engine=None,
        max_batch_sentences=DEFAULT_BATCH_SENTENCES,
        warmup=OPTIONS["warmup"].default,
        log=None,
        policy=None,
        background_warmup=OPTIONS["background_warmup"].default,
    ):
        self.spec = spec
        self.policy = policy or SearchPolicy()
        self.engine_name = engine
        self.max_batch_sentences = max_batch_sentences
        self.warmup = warmup
        self.log = log or logging.getLogger("keras_transformer.serving").warning
        self.engine = None
        self.version = None
        self.directory = None
        self.warm = False
        self.background_warmup = background_warmup
        # The most sentences per engine call whose searches are all warm, while the
        # background warm-up runs (`None`: any number).
        self.warm_sentences = None
        self._pending = []  # The background warm-up's calls, by number of sentences.
        # `(version, listing)` of the newest version seen at the last poll, and of the last
        # one that failed to load (not tried again while its listing stays the same).
        self._seen = None
        self._failed = None
        self._lock = threading.Lock()  # One load at a time (start-up, the watch).

    def load(self):
        """Opens the highest version (or the path), its path resolved once
        (`engines.locate`). Raises what `load_translator` raises."""
        with self._lock:
            location = locate(self.spec.path, self.engine_name)
            engine = self._bound_batches(open_engine(location))
            self.engine, self.directory, self.version = engine, location.path, location.version

    def warm_up(self):
        """Warms the engine being served (with `background_warmup`, for one sentence per
        call); returns the number of warm-up calls made."""
        engine = self.engine
        calls = warmup_calls(
            engine, self.max_batch_sentences, self.warmup, self.policy.extra_searches(engine)
        )
        if self.background_warmup:
            self._pending = [call for call in calls if len(call[1].sentences) > 1]
            calls = calls[: len(calls) - len(self._pending)]
            if self._pending:
                self.warm_sentences = 1
        for options, request in calls:
            engine.run(request.sentences, options, request.prefixes)
        self.warm = True
        return len(calls)

    @property
    def warm_batch_sentences(self):
        """The most sentences per engine call for now, as `/health` and `/metrics` report
        it: `warm_sentences` while a background warm-up runs, `max_batch_sentences` once
        warm, `0` before."""
        return self.warm_sentences or (self.max_batch_sentences if self.warm else 0)

    def warm_rest(self, log=None):
        """Runs the warm-up calls `warm_up` left to the background, fewest sentences first,
        raising `warm_sentences` as each number of sentences is done; returns the number of
        calls made. Stops early (`warm_sentences` then `None`) if a newer version, warm
        already, replaced the engine meanwhile.

        Args:
            log: optional callable `(str)`: told each number of sentences done.
        """
        engine, pending, self._pending = self.engine, self._pending, []
        made = 0
        for number, (options, request) in enumerate(pending):
            if self.engine is not engine:
                break
            engine.run(request.sentences, options, request.prefixes)
            made += 1
            size = len(request.sentences)
            if number + 1 == len(pending) or len(pending[number + 1][1].sentences) > size:
                if self.engine is engine:
                    self.warm_sentences = size
                if log is not None:
                    log(f"model {self.spec.name}: warm for {size} sentences per call")
        self.warm_sentences = None
        return made

    def concurrent_calls(self):
        """How many engine calls the server runs at once for this model: a Keras
        `Translator`'s `concurrent_batches` (by default 2 for a compiled search on a machine of
        2 cores or more: each keeps about one core busy), CTranslate2's workers
        (`inter_threads`: 2 of one thread each on 2 cores or more), 1 for an eager search
        (PyTorch's already uses every core) and for a SavedModel."""
        return self.engine.concurrency

    def check_options(self, options):
        """Raises a `ValueError` naming the option unless the server allows that search
        (`policy`) and the engine can run it."""
        self.policy.check(self.engine, options)
        self.engine.check(options)

    def _bound_batches(self, engine):
        """`engine`, searching batches of at most `max_batch_sentences` rows when it compiles
        a search per shape (a Keras `Translator`: its `batch_size`, 64 by default): the
        warm-up compiles those (its largest batch), and a request of more sentences is
        searched in several of them (sorted by length, two at once) instead of compiling a
        larger shape after ready."""
        size = getattr(engine, "batch_size", None)
        if engine.capabilities.compiles_shapes and size and size > self.max_batch_sentences:
            engine.batch_size = self.max_batch_sentences
        return engine

    def _warm(self, engine):
        extra = self.policy.extra_searches(engine)
        return warm(engine, self.max_batch_sentences, self.warmup, extra)

    def translate(self, sentences, prefixes, options):
        """The engine's results for one batch (`Batcher`'s `translate`): the engine being
        served when the batch starts answers all of it, in calls of at most `warm_sentences`
        sentences while a background warm-up runs."""
        engine, most = self.engine, self.warm_sentences
        if most is None or len(sentences) <= most:
            return engine.run(sentences, options, prefixes)
        results = []
        for start in range(0, len(sentences), most):
            part = None if prefixes is None else prefixes[start : start + most]
            results += engine.run(sentences[start : start + most], options, part)
        return results

    def update(self):
        """Loads, warms and serves a newer version of a base path, once it is complete.

        A version newer than the served one is tried once its `version_listing` is the same
        at two polls in a row (a copy still arriving changes it); one that failed to load is
        not tried again until its listing changes (then stays the same for a poll).

        Returns:
            The new version number, or `None` when there is none (or it is still changing,
            or it failed to load: the error is logged once and the served version stays).
        """
        if self.version is None:
            return None
        directory = latest_version(self.spec.path)
        if directory == os.fspath(self.spec.path):
            return None
        version = int(os.path.basename(directory))
        if version <= self.version:
            return None
        seen, self._seen = self._seen, (version, version_listing(directory))
        if self._seen != seen or self._seen[1] is None or self._seen == self._failed:
            return None  # New or changed since the last poll, or failed as it is.
        with self._lock:
            try:
                location = Location(
                    directory, self.engine_name or detect_engine(directory), version
                )
                engine = self._bound_batches(open_engine(location))
                started = time.perf_counter()
                calls = self._warm(engine)
            except Exception as error:  # A bad version never stops the served one.
                self.log(
                    f"{self.spec.name}: version {version} ({directory}) failed to load, still "
                    f"serving version {self.version} (tried again when its files change): "
                    f"{type(error).__name__}: " + " ".join(str(error).split())[:500]
                )
                self._failed = self._seen
                return None
            previous = self.version
            self.engine, self.directory, self.version = engine, directory, version
            self.warm_sentences = None  # Warm for every shape (`warm` ran all its calls).
        self.log(
            f"{self.spec.name}: serving version {version} ({directory}; {calls} warm-up calls, "
            f"{time.perf_counter() - started:.1f} s), was {previous}"
        )
        return version
