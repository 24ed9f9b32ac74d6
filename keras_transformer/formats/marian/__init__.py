"""Marian / OPUS-MT models: `layout` (files, pieces, weight names; framework-free), `hf`
(Hugging Face `MarianMTModel` directories in and out) and `npz` (Marian NMT `.npz`
checkpoints in)."""
