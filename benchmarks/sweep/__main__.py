"""python -m benchmarks.sweep: build the sweep library and list its entries."""
import sys

from benchmarks.sweep import main

sys.exit(main())
