"""``python -m embedcalc``: the same entry point as the ``embedcalc`` console script."""

from embedcalc.cli.app import main

if __name__ == "__main__":
    main()
