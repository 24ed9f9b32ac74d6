"""The layout of a CTranslate2 model directory written by
`keras_transformer.formats.ctranslate2.writer`: beside CTranslate2's own `model.bin`,
`config.json` and vocabulary, our settings file and one folder per tokenizer. Framework-free."""

from keras_transformer.engines.names import CTRANSLATE2_SETTINGS_FILE

# Our settings (the translator's search and length settings, the tokenizers' configurations).
METADATA_FILENAME = CTRANSLATE2_SETTINGS_FILE
# The tokenizers' keys in the settings, each also the folder of its assets.
TOKENIZERS = ("tokenizer", "target_tokenizer")
# CTranslate2's weight types an export may be converted to (`quantization`).
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)
