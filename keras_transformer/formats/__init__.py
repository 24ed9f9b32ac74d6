"""File formats, one folder each, both directions: `saved_model` (TensorFlow SavedModel),
`ctranslate2` (CTranslate2 model directories), `marian` (Hugging Face `MarianMTModel`
directories and Marian NMT `.npz` checkpoints), and `versions` (the numbered folders a model
server watches).

Each folder's `layout` module names the format's files, signatures and settings without
importing a framework: readers (`keras_transformer.engines`, `keras_transformer.serving`)
import it, never the writer. The public functions are re-exported by
`keras_transformer.export`.
"""
