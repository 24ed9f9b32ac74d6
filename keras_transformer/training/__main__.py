"""`python -m keras_transformer.training --config FILE`: same as `keras-transformer train`."""

import sys

from keras_transformer.training.cli import main

if __name__ == "__main__":
    sys.exit(main())
