"""The layout of a SavedModel written by `keras_transformer.formats.saved_model.writer`: its
signature and input names, where its settings and TensorFlow Serving warm-up records lie, and
the functions that read them (and write the records).

Framework-free at import: the engines and the HTTP service read an export through this module,
not through the writer (which imports Keras). TensorFlow and `tensorflow-serving-api` load
when warm-up records are read or written.
"""

import json
import os

METADATA_PATH = os.path.join("assets.extra", "keras_transformer.json")
# TensorFlow Serving replays the PredictionLog records of this file when it loads a version.
WARMUP_PATH = os.path.join("assets.extra", "tf_serving_warmup_requests")
SIGNATURE_NAME = "serving_default"
N_BEST_SIGNATURE_NAME = "translate_n_best"
PREFIX_SIGNATURE_NAME = "translate_with_prefix"
INPUT_NAME = "inputs"
# The most sentences one request to an exported SavedModel may hold (`max_request_size`).
MAX_REQUEST_SIZE = 1024
PREFIX_INPUT_NAME = "target_prefix"


def write_warmup_requests(path, requests):
    """Writes TensorFlow Serving warm-up records: one `PredictionLog` per request.

    Args:
        path: str. The file, `assets.extra/tf_serving_warmup_requests` of a SavedModel.
        requests: list of `(signature_name, sentences)` or `(signature_name, sentences,
            target_prefixes)`, each a list of `bytes`.
    """
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    with tf.io.TFRecordWriter(path) as writer:
        for signature_name, *inputs in requests:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(signature_name=signature_name)
            )
            for name, strings in zip((INPUT_NAME, PREFIX_INPUT_NAME), inputs, strict=False):
                request.inputs[name].CopyFrom(
                    tf.make_tensor_proto(strings, dtype=tf.string, shape=[len(strings)])
                )
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())


def read_warmup_requests(path):
    """The requests of a SavedModel's warm-up file, as `(signature_name, inputs)` pairs.

    `inputs` maps each input name to a NumPy array. Replaying them (calling the signature of
    each with its inputs) compiles every shape, as a model server does on load.

    Args:
        path: str or `os.PathLike`. A SavedModel directory written by `export_saved_model`.

    Returns:
        A list of `(str, dict)`.
    """
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    requests = []
    for record in tf.data.TFRecordDataset(os.path.join(os.fspath(path), WARMUP_PATH)):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        inputs = {name: tf.make_ndarray(proto) for name, proto in request.inputs.items()}
        requests.append((request.model_spec.signature_name, inputs))
    return requests


def read_metadata(path):
    """The translator settings stored with a SavedModel by `export_saved_model` (or `{}`)."""
    try:
        with open(os.path.join(os.fspath(path), METADATA_PATH), encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError):
        return {}
