"""Built-in datasets, each returning `Splits(train, validation, test)` of pairs.

Pure Python: importing this package (or using it) never imports TensorFlow. `num2words` and
`pysword` are imported lazily by `number_words` and `sword_bible`.

- `copy_task`: synthetic sequences copied to themselves (ids, not text).
- `number_words`: "trescientos cuarenta y dos" -> "three hundred and forty-two" (`make demo`).
- `sword_bible`: the verse-aligned Reina-Valera 1909 / World English Bible (31,077 pairs).
- `read_tsv` + `split_pairs`: your own parallel corpus in memory.
- `Corpus` + `scan_corpora`: your own corpora as they come (aligned files, TSV, `.gz`, weights),
  filtered and split by a hash of the source in one bounded-memory pass.

No built-in split ever trains on a held-out source sentence: sentences are compared by
`normalized_source` (case, accents, Unicode composition and whitespace aside).
"""

from keras_transformer.datasets.cache import get_cache_dir
from keras_transformer.datasets.copy_task import copy_task, to_model_inputs
from keras_transformer.datasets.corpus import (
    Corpus,
    CorpusFormatError,
    CorpusScan,
    filter_pairs,
    filter_summary,
    scan_corpora,
)
from keras_transformer.datasets.number_words import number_words
from keras_transformer.datasets.splits import Splits, normalized_source, split_pairs, stable_hash
from keras_transformer.datasets.sword_bible import SwordModuleNotFoundError, sword_bible
from keras_transformer.datasets.tsv import TsvFormatError, TsvPairs, read_tsv

__all__ = [
    "Corpus",
    "CorpusFormatError",
    "CorpusScan",
    "Splits",
    "SwordModuleNotFoundError",
    "TsvFormatError",
    "TsvPairs",
    "copy_task",
    "filter_pairs",
    "filter_summary",
    "get_cache_dir",
    "normalized_source",
    "number_words",
    "read_tsv",
    "scan_corpora",
    "split_pairs",
    "stable_hash",
    "sword_bible",
    "to_model_inputs",
]
