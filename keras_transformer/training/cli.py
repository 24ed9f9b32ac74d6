"""Moved to `keras_transformer.cli.train` in 0.3.0; this path re-exports it for one release."""

from keras_transformer.cli.train import (  # noqa: F401
    add_train_arguments,
    add_train_parser,
    check_before_training,
    config_from_args,
    main,
    run_train,
)
