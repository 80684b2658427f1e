"""IR utilities under every other part of fusec (besides ``fusec.errors``).

* ``diagnostics``: locations of ops (``location_of``), the one ``error_at`` and
  ``verify_module`` with located errors;
* ``module``: the entry function of a module, its arguments and constants;
* ``dtypes``: the one table of element types (xDSL, numpy, torch, storage);
* ``files``: the one atomic file write.
"""
