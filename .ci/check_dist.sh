#!/usr/bin/env bash
# Builds the sdist and the wheel (`python -m build`, into dist/), then installs the wheel into
# clean virtual environments and smoke-tests each from a temporary directory with `python -I`,
# so only the installed wheel can be imported, never the checkout:
#   [jax]         import, build the tiny preset, fit two steps; TensorFlow and keras-hub absent.
#   [tensorflow,serve]  load the committed translator (tests/fixtures/translator_v0_1.keras; a
#                 tiny one saved by the wheel itself while the fixture is absent) and translate;
#                 the server's package and its page are in the wheel.
# Prints the wheel size and each install time. Usage (PY needs the `build` package):
#   PY=.venv/bin/python bash .ci/check_dist.sh      (`make dist-check` does this)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-python3}
# The checks run from a temporary directory: a relative interpreter path is made absolute
# (without resolving links, which would leave the virtual environment).
case $PY in */*) PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY") ;; esac
export PIP_DISABLE_PIP_VERSION_CHECK=1
VERSION=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' keras_transformer/version.py)
FIXTURE=$ROOT/tests/fixtures/translator_v0_1.keras

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

rm -rf dist
"$PY" -m build --outdir dist . >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
WHEEL=$ROOT/dist/keras_transformer_nmt-$VERSION-py3-none-any.whl
SDIST=$ROOT/dist/keras_transformer_nmt-$VERSION.tar.gz
[ -f "$WHEEL" ] && [ -f "$SDIST" ] || { ls -l dist; echo "expected $WHEEL and $SDIST"; exit 1; }
echo "sdist and wheel built in $SECONDS s"

# The wheel holds the package and its metadata only, under the new name and version.
"$PY" - "$WHEEL" "$VERSION" <<'EOF'
import email, sys, zipfile
wheel, version = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
info = f"keras_transformer_nmt-{version}.dist-info/"
stray = [n for n in names if not n.startswith(("keras_transformer/", info))]
assert not stray, f"files outside the package: {stray}"
metadata = email.message_from_bytes(zipfile.ZipFile(wheel).read(info + "METADATA"))
assert (metadata["Name"], metadata["Version"]) == ("keras-transformer-nmt", version), metadata
scripts = zipfile.ZipFile(wheel).read(info + "entry_points.txt").decode()
assert "keras-transformer = keras_transformer.cli:main" in scripts, scripts
print(f"wheel {wheel.rsplit('/', 1)[1]}: {len(names)} files")
EOF
ls -l dist | awk 'NR > 1 {printf "  %-48s %8.1f KiB\n", $9, $5 / 1024}'

# Creates a clean venv named $1 and installs the wheel with the extras $2 into it, timed (this
# machine's pip keeps no HTTP cache: each run downloads again). Prints pip's messages but its
# notes on the machine's partial local indexes.
install() {
  "$PY" -m venv "$WORK/$1"
  local start=$SECONDS status=0
  "$WORK/$1/bin/pip" install -q "$WHEEL[$2]" >"$WORK/pip.log" 2>&1 || status=$?
  grep -v "is ignored: it is neither a file nor a directory" "$WORK/pip.log" || true
  [ "$status" = 0 ] || exit "$status"
  echo "[$2] installed into a clean venv in $((SECONDS - start)) s"
}

# Runs the TensorFlow venv's python on stdin; TensorFlow's start-up log is shown on failure only.
tf_python() {
  KERAS_BACKEND=tensorflow tf-venv/bin/python -I - 2>"$WORK/tf.log" || { cat "$WORK/tf.log" >&2; exit 1; }
}

cd "$WORK"
install jax-venv jax
KT_VERSION=$VERSION KERAS_BACKEND=jax jax-venv/bin/python -I - <<'EOF'
import importlib.metadata, importlib.util, os

import numpy as np

import keras_transformer as kt
from keras_transformer.datasets import copy_task, to_model_inputs

assert "site-packages" in kt.__file__, kt.__file__
version = os.environ["KT_VERSION"]
assert kt.__version__ == importlib.metadata.version("keras-transformer-nmt") == version
for module in ("tensorflow", "keras_hub", "torch"):
    assert importlib.util.find_spec(module) is None, f"[jax] installed {module}"

inputs, targets = to_model_inputs(copy_task(num_train=16, vocabulary_size=12, max_length=7).train)
model = kt.Transformer.from_preset("tiny", vocabulary_size=12, dropout=0.0)
model.compile(
    optimizer=kt.transformer_adam(d_model=64, warmup_steps=100),
    loss=kt.LabelSmoothedCrossentropy(),
)
history = model.fit(inputs, targets, batch_size=8, epochs=1, verbose=0)  # 16 / 8 = 2 steps
loss = history.history["loss"][0]
assert int(model.optimizer.iterations) == 2 and np.isfinite(loss), history.history
print(f"[jax] keras_transformer {kt.__version__}: tiny preset, 2 fit steps, loss {loss:.3f}")
EOF

install tf-venv tensorflow,serve
tf-venv/bin/keras-transformer --help >/dev/null 2>"$WORK/tf.log" || { cat "$WORK/tf.log"; exit 1; }
if [ -f "$FIXTURE" ]; then
  cp "$FIXTURE" translator.keras
  expected='{"cuarenta y dos": "forty-two", "tres": "three", "": ""}'
else
  # No committed fixture yet: the wheel saves a tiny untrained translator and records what it
  # answers, which the reloaded file must repeat.
  expected=$(tf_python <<'EOF'
import json

import keras

import keras_transformer as kt
from keras_transformer.text import Tokenizer

keras.utils.set_random_seed(0)
words = ["uno", "dos", "tres", "one", "two", "three"]
tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", *words])
model = kt.Transformer.from_preset("tiny", vocabulary_size=tokenizer.vocabulary_size(), num_layers=1)
translator = kt.Translator(
    model, tokenizer, max_source_length=8, extra_length=3, beam_size=2, jit_compile=False
)
sources = ["uno dos", "tres", ""]
translator.save("translator.keras")
print(json.dumps(dict(zip(sources, translator(sources), strict=True))))
EOF
)
fi
KT_EXPECTED=$expected tf_python <<'EOF'
import importlib.util, json, os

import keras_transformer as kt

assert "site-packages" in kt.__file__, kt.__file__
assert importlib.util.find_spec("keras_hub") is None, "[tensorflow] installed keras_hub"
expected = json.loads(os.environ["KT_EXPECTED"])
translator = kt.Translator.load("translator.keras")
translations = dict(zip(expected, translator(list(expected)), strict=True))
assert translations == expected, (translations, expected)
print(f"[tensorflow] Translator.load + translate: {translations}")
import importlib.resources

from keras_transformer.serving import create_app  # noqa: F401 (the serve extra imports)

page = importlib.resources.files("keras_transformer.serving").joinpath("page.html").read_text()
assert 'id="translate"' in page
print(f"[tensorflow,serve] keras_transformer.serving imports; its page: {len(page)} characters")
EOF
echo "dist-check: passed in $SECONDS s"
