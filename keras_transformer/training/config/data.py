"""`[data]`: the corpus, the tokenizer and the batches, and the rules between its settings."""

import dataclasses
import inspect

from keras_transformer import datasets
from keras_transformer.buckets import check_bucket_boundaries
from keras_transformer.training.config.fields import TYPE_NAMES, ConfigError, has_type

DATASETS = ("number_words", "sword_bible", "tsv", "corpus")
TOKENIZERS = ("wordpiece", "sentencepiece")
# The keyword arguments of each dataset function that the trainer sets itself.
DATASET_ARGUMENTS = {
    "number_words": ("num_validation", "num_test"),
    "sword_bible": ("num_validation", "num_test"),
    "tsv": ("path",),
    "corpus": (),
}
# The `[data]` settings of `dataset = "corpus"`: given without `dataset`, they select it.
CORPUS_SETTINGS = ("source", "target", "corpora")


def _off_or_at_least_one(ratio):
    return ratio == 0 or ratio >= 1


@dataclasses.dataclass
class DataConfig:
    """`[data]`: the corpus, the tokenizer and the batches.

    Args:
        dataset: str. `"number_words"` (Spanish -> English number names, embedded, see
            `keras_transformer.datasets.number_words`), `"sword_bible"` (the verse-aligned
            Reina-Valera 1909 / World English Bible), `"tsv"` (your own `source<TAB>target`
            file, read in memory and split with `keras_transformer.datasets.split_pairs`),
            `"corpus"` (your own corpora as they come: `source` and `target`, or `corpora`;
            chosen when one of them is set and `dataset` is not). Defaults to
            `"number_words"`.
        path: str. The TSV file, for `dataset = "tsv"`. Defaults to `""`.
        source: str. `dataset = "corpus"`: the source file, one sentence per line, aligned
            line by line with `target` (`.gz` files are decompressed). Defaults to `""`.
        target: str. The target file of `source`. Defaults to `""`.
        corpora: list of tables. `dataset = "corpus"`: several corpora, each
            `{source = "...", target = "...", weight = 1.0}` or `{path = "x.tsv", weight = 1.0}`
            (a `source<TAB>target` file); training draws from them in proportion to their
            weights (streaming). Defaults to `[]`.
        streaming: bool or `"auto"`. `dataset = "corpus"`: stream the training pairs from the
            files through `tf.data` (bounded memory, for corpora larger than memory) instead of
            reading them into memory; `"auto"` streams when `corpora` lists several corpora or
            the files hold more than 1 GiB. Both give the same pairs and held-out splits.
            Defaults to `"auto"`.
        max_length_ratio: float. Filter (`tsv` and `corpus`): remove a pair whose one side has
            more than this many times the words (whitespace-separated) of the other; `0` is
            off (for scripts written without spaces, e.g. Chinese or Japanese, set `0`).
            Pairs with an empty or whitespace-only side are always removed, and each filter's
            count is reported. Defaults to `3.0`.
        remove_duplicates: bool. Filter (`tsv` and `corpus`): remove exact duplicates of an
            earlier pair. Defaults to `True`.
        tokenizer_sample: int. Streaming: the tokenizer learns from a uniform sample of at
            most this many training pairs. Defaults to `200000`.
        shuffle_buffer: int. Streaming: pairs in the shuffle buffer (its memory bound).
            Defaults to `100000`.
        options: dict. Extra keyword arguments of the dataset function (e.g. `num_train`,
            `max_number` or `source_lang` of `number_words`; `source` and `target` module
            names of `sword_bible`; `source_column`, `target_column`, `num_columns` of
            `read_tsv`). Defaults to `{}`.
        num_validation: int. Validation pairs (BLEU during training). Defaults to `None`:
            1000 for the built-in datasets; for a TSV, `held_out_size(pairs)`:
            min(1000, 5 % of the pairs), at least 1 (a 700-pair file holds out 35).
        num_test: int. Test pairs (the final evaluation). Defaults to `None`: as
            `num_validation`.
        tokenizer: str. `"wordpiece"` (`keras_transformer.text.train_tokenizer`) or
            `"sentencepiece"` (`keras_transformer.text.train_sentencepiece`, a unigram model by
            default; needs the `sentencepiece` package). Defaults to `"wordpiece"`.
        sentencepiece_model: str. With `tokenizer = "sentencepiece"`: the path of an existing
            `.model` file to use instead of training one (`vocabulary_size` is then the
            model's). Defaults to `""`.
        sentencepiece_options: dict. Extra keyword arguments of `train_sentencepiece`
            (`model_type = "bpe"`, `max_sentences`, `character_coverage`, ...). Defaults to
            `{}`.
        vocabulary_size: int. Size of the shared vocabulary, trained on both sides of the
            training pairs (paper: a shared vocabulary of about 37,000 tokens).
            Defaults to `37000`.
        lowercase: bool. Lower-case the text before tokenizing. Defaults to `False`.
        max_length: int. Longest kept sequence in tokens, `[START]`/`[END]` included; longer
            training pairs are dropped (and counted). Defaults to `128`.
        tokens_per_batch: int. Padded positions per side and batch (paper: batches of about
            25,000 source and 25,000 target tokens). The global batch: it is split across
            replicas and processes. Defaults to `25000`.
        bucket_boundaries: list of int. Padded lengths of the length buckets; each is one
            batch shape (one compilation). Defaults to `[]`:
            `keras_transformer.data.default_bucket_boundaries(max_length)`.
    """

    dataset: str = dataclasses.field(default="number_words", metadata={"choices": DATASETS})
    path: str = ""
    source: str = ""
    target: str = ""
    corpora: list = dataclasses.field(default_factory=list)
    streaming: bool | str = dataclasses.field(
        default="auto", metadata={"choices": (True, False, "auto")}
    )
    max_length_ratio: float = dataclasses.field(
        default=3.0, metadata={"check": (_off_or_at_least_one, "0 (off) or a number >= 1")}
    )
    remove_duplicates: bool = True
    tokenizer_sample: int = dataclasses.field(default=200000, metadata={"min": 1})
    shuffle_buffer: int = dataclasses.field(default=100000, metadata={"min": 0})
    options: dict = dataclasses.field(default_factory=dict)
    num_validation: int | None = dataclasses.field(default=None, metadata={"min": 0})
    num_test: int | None = dataclasses.field(default=None, metadata={"min": 0})
    tokenizer: str = dataclasses.field(default="wordpiece", metadata={"choices": TOKENIZERS})
    sentencepiece_model: str = ""
    sentencepiece_options: dict = dataclasses.field(default_factory=dict)
    vocabulary_size: int = dataclasses.field(default=37000, metadata={"min": 8})
    lowercase: bool = False
    max_length: int = dataclasses.field(default=128, metadata={"min": 3})
    tokens_per_batch: int = 25000
    bucket_boundaries: list = dataclasses.field(default_factory=list)


def check_data(data):
    """The rules between `[data]` settings (each setting's own: `check_fields`)."""
    if (data.sentencepiece_model or data.sentencepiece_options) and data.tokenizer != "sentencepiece":
        raise ConfigError(
            "`data.sentencepiece_model` and `data.sentencepiece_options` need "
            f"`data.tokenizer = 'sentencepiece'`. Received: data.tokenizer={data.tokenizer!r}"
        )
    if data.dataset == "tsv" and not data.path:
        raise ConfigError(f"`data.path` is required with dataset='tsv'. Received: data.path={data.path!r}")
    _check_corpus(data)
    if data.tokens_per_batch < data.max_length:
        raise ConfigError(
            f"`data.tokens_per_batch` must be an int >= {data.max_length}. "
            f"Received: data.tokens_per_batch={data.tokens_per_batch!r}"
        )
    if data.bucket_boundaries:
        try:
            if not all(has_type(length, int) for length in data.bucket_boundaries):
                raise ValueError("not ints")
            check_bucket_boundaries(data.bucket_boundaries, data.max_length)
        except ValueError:
            raise ConfigError(
                "`data.bucket_boundaries` must be a strictly increasing list of positive "
                f"ints. Received: data.bucket_boundaries={data.bucket_boundaries!r}"
            ) from None
    _check_dataset_options(data)


def _check_dataset_options(data):
    """`data.options` must be keyword arguments of the dataset function, of its defaults' types."""
    if data.dataset == "corpus":
        return  # `_check_corpus`
    function = {
        "number_words": datasets.number_words,
        "sword_bible": datasets.sword_bible,
        "tsv": datasets.read_tsv,
    }[data.dataset]
    parameters = {
        name: parameter
        for name, parameter in inspect.signature(function).parameters.items()
        if name not in DATASET_ARGUMENTS[data.dataset]
    }
    unknown = sorted(set(data.options) - set(parameters))
    if unknown:
        raise ConfigError(
            f"Unknown `data.options` {unknown} for dataset {data.dataset!r}; known: "
            f"{sorted(parameters)}. Received: data.options={data.options!r}"
        )
    for name, value in data.options.items():
        default = parameters[name].default
        kind = type(default)
        if kind in TYPE_NAMES and default is not None and not has_type(value, kind):
            raise ConfigError(
                f"`data.options.{name}` must be {TYPE_NAMES[kind]}. "
                f"Received: data.options.{name}={value!r}"
            )


def corpus_list(data):
    """The `keras_transformer.datasets.Corpus` list of a `dataset = "corpus"` `DataConfig`."""
    if data.corpora:
        return [datasets.Corpus(**entry) for entry in data.corpora]
    return [datasets.Corpus(source=data.source, target=data.target)]


def _check_corpus(data):
    """The `dataset = "corpus"` settings: files given one way, weights, streaming."""
    given = [key for key in CORPUS_SETTINGS if getattr(data, key)]
    if data.dataset != "corpus":
        if given:
            raise ConfigError(
                f"`data.{given[0]}` needs dataset='corpus'. Received: data.dataset={data.dataset!r}"
            )
        if data.streaming is True:
            raise ConfigError(
                "`data.streaming` needs dataset='corpus' (data.source and data.target, or "
                f"data.corpora). Received: data.dataset={data.dataset!r}"
            )
        return
    if data.corpora and (data.source or data.target):
        raise ConfigError(
            "Give `data.source` and `data.target`, or `data.corpora`, not both. Received: "
            f"data.source={data.source!r}, data.corpora={data.corpora!r}"
        )
    if not data.corpora and not (data.source and data.target):
        raise ConfigError(
            "dataset='corpus' needs `data.source` and `data.target` (aligned files), or "
            f"`data.corpora`. Received: data.source={data.source!r}, data.target={data.target!r}"
        )
    for index, entry in enumerate(data.corpora):
        name = f"data.corpora[{index}]"
        if not isinstance(entry, dict) or set(entry) - {"source", "target", "path", "weight"}:
            raise ConfigError(
                f"`{name}` must be a table of `source` and `target`, or `path`, and an "
                f"optional `weight`. Received: {name}={entry!r}"
            )
        try:
            datasets.Corpus(**entry)
        except ValueError as error:
            raise ConfigError(f"`{name}`: {error}") from None
    weights = {entry.get("weight", 1.0) for entry in data.corpora}
    if data.streaming is False and len(weights) > 1:
        raise ConfigError(
            "Weighted `data.corpora` are mixed while streaming: set data.streaming = true or "
            f"'auto'. Received: data.streaming=false, weights {sorted(weights)}"
        )
    if data.options:
        raise ConfigError(
            f"dataset='corpus' takes no `data.options`. Received: data.options={data.options!r}"
        )
