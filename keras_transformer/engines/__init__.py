"""Engines: one way from a path to something that translates, whatever wrote the files.

`load_translator(path, engine=None)` opens

- a Keras `Translator` (`engine="keras"`): a `.keras` file, a directory holding
  `translator.keras` (a training run's output directory or its `best/`), a preset directory;
- a TensorFlow SavedModel written by `keras_transformer.export.export_saved_model`
  (`"saved_model"`, `SavedModelTranslator`: TensorFlow and tensorflow-text only);
- a CTranslate2 model directory written by `keras_transformer.export.export_ctranslate2`
  (`"ctranslate2"`, `CTranslate2Translator`);

and, given a model server's base path (numbered version directories), the highest version
(`locate` resolves a path once: hub handle, version, kind). Every engine implements the
`keras_transformer.translation.Engine` protocol (`run`, `check`, `capabilities`,
`warmup_requests`, `concurrency`, `expect`), translates with `engine(sentences)` (strings)
and `engine.translate(sentences, beam_size=None, num_hypotheses=None, ...)`
(`keras_transformer.translation.Translation`s), and follows the same translation contract.
The command line, the server, fine-tuning (`init_from`) and training (the samples of its
exported SavedModel) open models through here.

The package's names load on first use (`names`, framework-free, loads nothing else).
"""

from keras_transformer._lazy import lazy_attributes

_EXPORTS = {
    "ENGINES": "names",
    "WARMUPS": "names",
    "SAVED_MODEL_FILE": "names",
    "Location": "location",
    "locate": "location",
    "detect_engine": "location",
    "load_translator": "loading",
    "open_engine": "loading",
    "check_options": "loading",
    "use_compilation_cache": "compilation",
    "SavedModelTranslator": "saved_model",
    "CTranslate2Translator": "ctranslate2",
    "PATIENCE": "ctranslate2",
    "N_BEST_PATIENCE": "ctranslate2",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
