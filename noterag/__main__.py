"""``python -m noterag``: the same command line as ``noterag``."""

from noterag.cli import main

if __name__ == "__main__":
    main()
