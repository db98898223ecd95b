"""The ``tripath`` command line: thin wrappers over the typed functions the app and tests call."""
