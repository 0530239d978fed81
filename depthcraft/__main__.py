"""``python -m depthcraft ...``: the same command line as the ``depthcraft`` script."""

from depthcraft.verify.cli import entry

if __name__ == "__main__":
    entry()
