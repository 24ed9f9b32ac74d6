"""TensorFlow SavedModel serving strings: `layout` (names, settings, warm-up records;
framework-free) and `writer` (`export_saved_model`)."""
