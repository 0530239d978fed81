"""``python -m depthcraft ...``: the same command line as the ``depthcraft`` script."""

from depthcraft.verify.cli import main

if __name__ == "__main__":
    main()
