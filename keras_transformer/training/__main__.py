"""`python -m keras_transformer.training --config FILE`: same as `keras-transformer train`."""

import sys

from keras_transformer.cli.train import main  # The entry point: the one import of cli/ from below.

if __name__ == "__main__":
    sys.exit(main())
