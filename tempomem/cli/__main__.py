"""``python -m tempomem.cli``: the same as the ``tempomem`` script."""

from tempomem.cli import run

run()
