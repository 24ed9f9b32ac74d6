"""`load_translator(path, engine)`: the engine at a path, and `check_options`, the check of a
call's search options against any engine."""

import os
import warnings

from keras_transformer.engines.ctranslate2 import CTranslate2Translator
from keras_transformer.engines.location import Location, locate
from keras_transformer.engines.names import KERAS, KERAS_FILE, SAVED_MODEL
from keras_transformer.engines.saved_model import SavedModelTranslator
from keras_transformer.saving.checks import file_refusal
from keras_transformer.saving.weights import check_finite
from keras_transformer.translation import SearchOptions
from keras_transformer.translator import load_keras_translator


def load_translator(path, engine=None):
    """The translator at `path`: a Keras `Translator`, a `SavedModelTranslator` or a
    `CTranslate2Translator` (see `keras_transformer.engines`).

    Args:
        path: str or `os.PathLike`. A `.keras` file, a run directory, a preset, SavedModel or
            CTranslate2 directory, or a base path of numbered versions of one (its highest
            version is opened), or a hub handle of a preset.
        engine: str. `"keras"`, `"saved_model"` or `"ctranslate2"`. Defaults to `None`: the
            engine the files are for (`detect_engine`).

    Returns:
        An engine (`keras_transformer.translation.Engine`), also callable on strings.

    Raises:
        FileNotFoundError: nothing at `path`.
        ValueError: `engine` is unknown, or `path` holds nothing that engine opens.

    Example:

    ```python
    translator = load_translator("runs/demo")  # its translator.keras
    translator(["dos mil"])
    ```
    """
    return open_engine(locate(path, engine))


def open_engine(location):
    """The engine of a `Location` (`locate`'s), opened without resolving its path again."""
    if not isinstance(location, Location):
        raise ValueError(
            f"`location` must be a `keras_transformer.engines.Location` (`locate`'s). "
            f"Received: location={location!r}"
        )
    path = os.fspath(location.path)
    if location.engine == KERAS:
        if os.path.isdir(path) and not os.path.isfile(os.path.join(path, KERAS_FILE)):
            return load_keras_translator(path)  # a preset: its own checks and messages
        return load_checked_keras(path)
    if location.engine == SAVED_MODEL:
        return SavedModelTranslator(path)
    return CTranslate2Translator(path)


def load_checked_keras(path):
    """`load_keras_translator(path)`, its refusals one line of at most 300 characters naming
    the file (`keras_transformer.saving.checks.file_refusal`; Keras wraps some errors in
    copies of the whole configuration), and its weights checked finite as a preset's are.

    Keras' warnings while loading (e.g. about containers it skipped) are shown only when
    the file loads: a refused file is the one line of its refusal.

    Raises:
        FileNotFoundError: nothing at `path`.
        ValueError: the file is refused (the message names it and says why).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            translator = load_keras_translator(path)
            check_finite(translator.model)
        except (ValueError, TypeError, KeyError) as error:
            raise file_refusal(path, error) from None
    for warning in caught:
        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return translator


def check_options(
    translator,
    beam_size=None,
    num_hypotheses=None,
    target_prefix=False,
    sampling_topk=None,
    sampling_topp=None,
    sampling_temperature=None,
    seed=0,
    alignments=False,
    alpha=None,
):
    """Checks a call's search options against an engine before it runs (a SavedModel's
    search is fixed at export; `target_prefix`: bool, whether prefixes will be given): the
    engine's `check` of these `SearchOptions`. Raises a `ValueError` naming them."""
    translator.check(
        SearchOptions(
            beam_size=beam_size,
            num_hypotheses=num_hypotheses,
            sampling_topk=sampling_topk,
            sampling_topp=sampling_topp,
            sampling_temperature=sampling_temperature,
            seed=seed,
            prefixed=bool(target_prefix),
            alpha=alpha,
            alignments=bool(alignments),
        )
    )
