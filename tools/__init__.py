"""Repository tools, not installed with the package: the docs generator (:mod:`tools.docgen`, run by
``depthcraft docs`` from a checkout) and the layering reader (:mod:`tools.architecture`, run by
``tests/test_layering.py`` and drawing ``docs/architecture.md``'s module table).

They import the installed ``depthcraft`` package; the package never imports them.
"""
