"""``python -m cli``: the ``mosaic`` command line."""

from cli import main

main()
