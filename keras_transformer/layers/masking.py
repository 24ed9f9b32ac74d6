"""Mask helpers shared by the attention layers and the model.

Masks are boolean tensors where `True` means "may attend" / "is a real token".
Scores at masked positions are replaced (never added to) by a finite, dtype-aware
large negative number, so float16 never overflows and fully masked rows stay finite.
"""

from keras import ops


def large_negative_number(dtype):
    """A finite, very negative number representable in `dtype`.

    Args:
        dtype: str or dtype. The floating dtype of the attention scores.

    Returns:
        A python float: `-3e4` for float16 (its max is 65504), `-1e9` otherwise.
    """
    if "float16" == str(dtype).split(".")[-1]:
        return -3e4
    return -1e9


def padding_mask(token_ids, pad_id=0):
    """Boolean mask `(batch, length)` that is `True` at real (non-padding) tokens."""
    return ops.not_equal(token_ids, pad_id)


def causal_mask(query_length, key_length, query_offset=0):
    """Boolean `(query_length, key_length)` mask, `True` where key position <= query position.

    Args:
        query_length: int or scalar tensor. Number of query positions.
        key_length: int or scalar tensor. Number of key positions.
        query_offset: int or scalar tensor. Absolute position of the first query
            (the cache index while decoding). Defaults to `0`.
    """
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(query_offset, "int32")
    key_positions = ops.arange(key_length, dtype="int32")
    return ops.greater_equal(query_positions[:, None], key_positions[None, :])


def merge_masks(
    query_length,
    key_length,
    query_mask=None,
    key_mask=None,
    attention_mask=None,
    use_causal_mask=False,
    query_offset=0,
):
    """Combines all masks into one boolean `(batch or 1, 1, q_len, k_len)` mask, or `None`.

    Args:
        query_length: int or scalar tensor.
        key_length: int or scalar tensor.
        query_mask: optional `(batch, q_len)` mask of real query positions.
        key_mask: optional `(batch, k_len)` mask of real key/value positions.
        attention_mask: optional `(batch, q_len, k_len)` mask (`True` = attend).
        use_causal_mask: bool. Also forbid attending to later positions.
        query_offset: int or scalar tensor. Absolute position of the first query.

    Returns:
        A boolean tensor broadcastable to `(batch, heads, q_len, k_len)`, or `None`
        when no mask applies.
    """
    mask = None

    def _and(a, b):
        return b if a is None else ops.logical_and(a, b)

    if query_mask is not None:
        mask = _and(mask, ops.cast(query_mask, "bool")[:, :, None])  # (batch, q_len, 1)
    if key_mask is not None:
        mask = _and(mask, ops.cast(key_mask, "bool")[:, None, :])  # (batch, 1, k_len)
    if attention_mask is not None:
        mask = _and(mask, ops.cast(attention_mask, "bool"))  # (batch, q_len, k_len)
    if use_causal_mask:
        causal = causal_mask(query_length, key_length, query_offset)[None]  # (1, q_len, k_len)
        mask = _and(mask, causal)
    if mask is None:
        return None
    return mask[:, None]  # (batch, 1, q_len, k_len)


def ensure_attendable(mask):
    """Gives query rows that may attend nowhere one key, position 0, so softmax stays finite.

    Such rows (an empty source sentence, a fully padded target row) carry no
    information either way. Position 0 keeps them causal and finite on every backend
    and on fused kernels (some of which return NaN for rows with no allowed key).
    """
    if mask is None:
        return None
    key_length = ops.shape(mask)[-1]
    first_key = ops.equal(ops.arange(key_length, dtype="int32"), 0)  # (k_len,)
    return ops.where(ops.any(mask, axis=-1, keepdims=True), mask, first_key)
