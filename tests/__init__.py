"""vtakit's test suite; a regular package so `tests.support` wins over the top-level `tests` package that pynq installs."""
