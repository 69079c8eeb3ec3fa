"""Detectors added one module each: the registry imports every module here, and a module registers its kappas with
:func:`~harness.kappas.base.register_kappa` on a subclass of a kind (docs/examples/flip_agreement.py is one)."""
