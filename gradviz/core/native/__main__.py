"""``python -m gradviz.core.native --build [--verbose]``: what the background build runs."""
import sys

from gradviz.core.native import _main

sys.exit(_main(sys.argv[1:]))
