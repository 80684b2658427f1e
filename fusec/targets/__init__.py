"""The back ends of fusec, one package per target (see ``fusec.target``).

Each package's ``target`` module defines ``TARGET``; the package itself stays
import-light (the ``fusec`` command configures thread pools from
``fusec.targets.cpu.threads`` before numpy starts).
"""
