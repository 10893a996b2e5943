"""The command line: ``solci`` (``main``) and its commands, on top of everything else; nothing imports it
but ``ci.hooks``, the command a git hook runs."""
