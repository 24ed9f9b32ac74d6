"""CTranslate2 model directories: `layout` (file names, quantizations; framework-free),
`writer` (`export_ctranslate2`) and `reader` (our settings and tokenizers stored beside the
model)."""
