"""Training a WordPiece vocabulary with tensorflow-text's learner.

TensorFlow and tensorflow-text are imported lazily, inside `train_tokenizer`.
"""

import collections
import logging
import math
import time

from keras_transformer.text.normalization import normalized_batches
from keras_transformer.text.tokenizer import RESERVED_TOKENS, SUFFIX_INDICATOR, Tokenizer

logger = logging.getLogger("keras_transformer")

# Keyword arguments forwarded to `tensorflow_text`'s `wordpiece_tokenizer_learner_lib.learn`.
LEARN_ARGUMENTS = (
    "upper_thresh",
    "lower_thresh",
    "num_iterations",
    "max_input_tokens",
    "max_token_length",
    "max_unique_chars",
    "slack_ratio",
)


def train_tokenizer(
    sentences,
    vocabulary_size=8000,
    lowercase=False,
    strip_accents=False,
    reserved_tokens=None,
    extra_characters=None,
    max_bytes_per_word=100,
    batch_size=4096,
    **learn_kwargs,
):
    """Trains a WordPiece vocabulary on `sentences` and returns a `Tokenizer`.

    Sentences are normalized and split on spaces exactly as `Tokenizer.tokenize` does, the words
    are counted, and tensorflow-text's WordPiece learner
    (`tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib`, the trainer behind
    `bert_vocab_from_dataset` and keras-hub's `compute_word_piece_vocabulary`) picks the pieces.
    The vocabulary is then reordered as `[PAD] [UNK] [START] [END]`, extra reserved tokens, every
    character `c` seen, every continuation `##c`, then the learned pieces by frequency, and cut to
    `vocabulary_size`: so ids 0-3 are fixed and any word made of seen characters can be
    tokenized without `[UNK]`, which makes `detokenize(tokenize(x))` exact.

    For a shared source-target vocabulary (the paper's setup), pass both sides of the pairs.

    Args:
        sentences: iterable of str. The training corpus.
        vocabulary_size: int. Maximum vocabulary size, reserved tokens included. The learner
            may return fewer tokens on small corpora. Defaults to `8000`.
        lowercase: bool. Lower-case the text. Defaults to `False`.
        strip_accents: bool. Remove accents. Defaults to `False`.
        reserved_tokens: list of str. Extra reserved tokens placed right after
            `[PAD] [UNK] [START] [END]`. Defaults to `None`.
        extra_characters: str or iterable of str. Characters to put in the vocabulary (with
            their `##` continuations) even if the corpus lacks them, e.g. `string.digits` (the
            Bible has no digit). Defaults to `None`.
        max_bytes_per_word: int. Passed to `Tokenizer`. Defaults to `100`.
        batch_size: int. Sentences normalized per TensorFlow call. Defaults to `4096`.
        **learn_kwargs: forwarded to the learner: `lower_thresh` (minimum count of a piece,
            default 10), `upper_thresh`, `num_iterations` (default 4), `max_input_tokens`,
            `max_token_length` (default 50), `max_unique_chars` (default 1000), `slack_ratio`.

    Returns:
        A `Tokenizer`.

    Example:

    >>> tokenizer = train_tokenizer(["hola mundo", "hello world"], vocabulary_size=64)
    >>> tokenizer.get_vocabulary()[:4]
    ['[PAD]', '[UNK]', '[START]', '[END]']
    """
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

    unknown = sorted(set(learn_kwargs) - set(LEARN_ARGUMENTS))
    if unknown:
        raise ValueError(
            f"Unknown keyword arguments {unknown}; expected some of {list(LEARN_ARGUMENTS)}. "
            f"Received: {learn_kwargs}"
        )
    check_training_arguments(sentences, vocabulary_size)
    reserved = list(RESERVED_TOKENS)
    for token in reserved_tokens or ():
        if token not in reserved:
            reserved.append(token)

    start = time.perf_counter()
    sentences = list(sentences)

    word_counts = collections.Counter()
    for batch in normalized_batches(sentences, lowercase, strip_accents, batch_size):
        word_counts.update(tf.strings.split(batch, sep=" ").flat_values.numpy().tolist())
    word_counts.pop(b"", None)
    word_counts = {word.decode("utf-8"): count for word, count in word_counts.items()}
    if not word_counts:
        raise ValueError(f"`sentences` contains no words. Received: {len(sentences)} sentences")
    learned = _learn(
        learner, word_counts, vocabulary_size, reserved, SUFFIX_INDICATOR, learn_kwargs
    )
    extra = set()
    for char in extra_characters or ():
        if len(char) != 1 or char.isspace():
            raise ValueError(
                "`extra_characters` must hold single non-space characters. "
                f"Received: extra_characters={extra_characters!r}"
            )
        extra.add(char)
    characters = sorted(
        {token for token in learned if len(token) == 1 and token not in reserved} | extra
    )
    required = reserved + characters + [SUFFIX_INDICATOR + char for char in characters]
    if len(required) > vocabulary_size:
        raise ValueError(
            f"`vocabulary_size` is too small: the corpus has {len(characters)} distinct "
            f"characters, which with their `##` continuations and {len(reserved)} reserved "
            f"tokens need {len(required)} entries. Received: vocabulary_size={vocabulary_size}"
        )
    vocabulary = list(dict.fromkeys(required + list(learned)))[:vocabulary_size]
    tokenizer = Tokenizer(
        vocabulary,
        lowercase=lowercase,
        strip_accents=strip_accents,
        max_bytes_per_word=max_bytes_per_word,
    )
    logger.info(
        "Trained a WordPiece vocabulary of %d tokens (%d characters) on %d sentences "
        "(%d distinct words) in %.1f s.",
        len(vocabulary),
        len(characters),
        len(sentences),
        len(word_counts),
        time.perf_counter() - start,
    )
    return tokenizer


def check_training_arguments(sentences, vocabulary_size):
    """Raises `ValueError` unless `sentences` is an iterable of str (not one str) and
    `vocabulary_size` an int with room for the reserved tokens and two more."""
    if (
        isinstance(vocabulary_size, bool)
        or not isinstance(vocabulary_size, int)
        or vocabulary_size < len(RESERVED_TOKENS) + 2
    ):
        raise ValueError(
            f"`vocabulary_size` must be an int >= {len(RESERVED_TOKENS) + 2}. "
            f"Received: vocabulary_size={vocabulary_size}"
        )
    if isinstance(sentences, str):
        raise ValueError(
            "`sentences` must be an iterable of strings, not one string. "
            f"Received: sentences={sentences[:50]!r}"
        )


def _learn(learner, word_counts, vocabulary_size, reserved, joiner, learn_kwargs):
    """`learner.learn` with a geometric instead of arithmetic search for the count threshold.

    The vocabulary size falls roughly as a power of the threshold (the minimum count of a
    piece), so bisecting `log(threshold)` reaches the target size in ~6 learner passes instead
    of ~15 (8k pieces on the Bible: ~80 s instead of ~200 s). Everything else is the learner's:
    its parameters, word filtering and `learn_with_thresh`.
    """
    defaults = {
        "upper_thresh": int(1e7),
        "lower_thresh": 10,
        "num_iterations": 4,
        "max_input_tokens": int(5e6),
        "max_token_length": 50,
        "max_unique_chars": 1000,
        "slack_ratio": 0.05,
    }
    defaults.update(learn_kwargs)
    params = learner.Params(
        vocab_size=vocabulary_size,  # tensorflow-text's name
        include_joiner_token=True,
        joiner=joiner,
        reserved_tokens=reserved,
        **defaults,
    )
    word_counts = list(word_counts.items())
    upper, lower = learner.get_search_threshs(word_counts, params.upper_thresh, params.lower_thresh)
    counts = learner.get_input_words(word_counts, params.reserved_tokens, params.max_token_length)
    allowed_chars = learner.get_allowed_chars(counts, params.max_unique_chars)
    counts = learner.filter_input_words(counts, allowed_chars, params.max_input_tokens)
    upper = max(1, upper)
    lower = max(1, min(lower, upper))  # a tiny corpus: every count is below lower_thresh
    smallest_acceptable = vocabulary_size * (1 - params.slack_ratio)
    best_fit, smallest = None, None  # largest vocabulary <= size; smallest vocabulary
    while lower <= upper:
        threshold = max(lower, min(upper, round(math.sqrt(lower * upper))))
        vocabulary = learner.learn_with_thresh(counts, threshold, params)
        if len(vocabulary) <= vocabulary_size:
            if best_fit is None or len(vocabulary) > len(best_fit):
                best_fit = vocabulary
            if len(vocabulary) >= smallest_acceptable:
                break
            upper = threshold - 1  # too few pieces: lower the threshold
        else:
            if smallest is None or len(vocabulary) < len(smallest):
                smallest = vocabulary
            lower = threshold + 1  # too many pieces: raise the threshold
    return best_fit if best_fit is not None else smallest
