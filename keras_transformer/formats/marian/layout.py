"""The names of Marian models, as `keras_transformer.formats.marian.hf` (Hugging Face
`MarianMTModel` directories, in and out) and `keras_transformer.formats.marian.npz` (Marian NMT
`.npz` checkpoints, in) read and write them: files, reserved pieces, weight names.
Framework-free."""

# A Hugging Face `MarianMTModel` directory's files besides its weights.
FILES = ("config.json", "vocab.json", "source.spm", "target.spm")
# What our `Transformer` pads with; added at id 0 (a name no Marian vocabulary uses).
PAD_PIECE = "[PAD]"
# The output logit given to the padding ids (ours and Marian's, which is the start token).
BANNED_LOGIT = -1e4

# A `.npz` checkpoint's settings: YAML bytes under this array name.
CONFIG_ARRAY = "special:model.yml"
# Marian's decoder start (a zero embedding), added after its vocabulary.
START_PIECE = "<pad>"
# Marian array name suffix -> Hugging Face name suffix, per layer.
PROJECTIONS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}


def block_names(num_layers, num_decoder_layers):
    """The layers of a model's blocks under their Marian names (without `model.`), in order:
    `(kind, name, path, (inputs, outputs))`, `kind` `"dense"` or `"norm"`, `path` the
    attributes from the model to the layer (an int: an index); the widths are `"d"`
    (d_model, the residual stream), `"h"` (d_model, the attention heads) or `"ff"` (ff_dim)."""
    for stack, count in (("encoder", num_layers), ("decoder", num_decoder_layers)):
        for i in range(count):
            prefix, block = f"{stack}.layers.{i}.", (f"{stack}_blocks", i)
            attentions = [("self_attn", "self_attention")]
            if stack == "decoder":
                attentions.append(("encoder_attn", "cross_attention"))
            for name, attention in attentions:
                for projection, dense in (
                    ("q_proj", "query_dense"),
                    ("k_proj", "key_dense"),
                    ("v_proj", "value_dense"),
                    ("out_proj", "output_dense"),
                ):
                    widths = ("h", "d") if projection == "out_proj" else ("d", "h")
                    yield (
                        "dense",
                        f"{prefix}{name}.{projection}",
                        (*block, attention, dense),
                        widths,
                    )
                yield (
                    "norm",
                    f"{prefix}{name}_layer_norm",
                    (*block, f"{attention}_norm"),
                    ("d", "d"),
                )
            feed_forward = (*block, "feed_forward")
            yield "dense", f"{prefix}fc1", (*feed_forward, "inner_dense"), ("d", "ff")
            yield "dense", f"{prefix}fc2", (*feed_forward, "output_dense"), ("ff", "d")
            yield "norm", f"{prefix}final_layer_norm", (*block, "feed_forward_norm"), ("d", "d")
